//! CRC-32C (Castagnoli), the checksum recorded for every shard in `metadata.db`. One place so
//! every command computes it the same way. `crc-fast` picks the fastest kernel the CPU has at
//! run time (VPCLMULQDQ/AVX-512 folding where present: about twice the SSE4.2 `crc32`
//! instruction, which matters because merge and validate checksum every byte they move).
//! Combining two CRCs is done here: a handful of polynomial multiplications instead of the
//! crate's matrix squaring, which cost about 8 µs a call.

use crc_fast::CrcAlgorithm::Crc32Iscsi;

/// The CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(Crc32Iscsi, data) as u32
}

/// The CRC-32C of `a ‖ b`, from the CRCs of `a` and of `b` (`b_len` bytes long): `crc_a`
/// shifted past `b_len` zero bytes (a multiplication by x^(8·b_len) modulo the polynomial),
/// then `crc_b` added. A few dozen shifts and xors, however long `b` is.
pub fn combine(crc_a: u32, crc_b: u32, b_len: usize) -> u32 {
    mul_mod_p(x_pow_8n_mod_p(b_len as u64), crc_a) ^ crc_b
}

/// The CRC-32C polynomial, bit-reflected (bit 31 holds x^0).
const POLY: u32 = 0x82f6_3b78;

/// a·b modulo the polynomial, both bit-reflected.
const fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut product = 0u32;
    loop {
        if a & m != 0 {
            product ^= b;
            if a & (m - 1) == 0 {
                return product;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
}

/// x^(2^k) modulo the polynomial, for every k a 64-bit byte count needs (8n < 2^67).
const X_POW_2K: [u32; 67] = {
    let mut table = [0u32; 67];
    let mut p = 1u32 << 30; // x^1
    let mut k = 0;
    while k < 67 {
        table[k] = p;
        p = mul_mod_p(p, p);
        k += 1;
    }
    table
};

/// x^(8n) modulo the polynomial: the shift past n zero bytes.
fn x_pow_8n_mod_p(mut n: u64) -> u32 {
    let mut power = 1u32 << 31; // x^0
    let mut k = 3; // 8n = n·2^3
    while n != 0 {
        if n & 1 != 0 {
            power = mul_mod_p(X_POW_2K[k], power);
        }
        n >>= 1;
        k += 1;
    }
    power
}

/// The CRC-32C of `a ‖ data`, from the CRC of `a` (0 for nothing).
pub fn append(crc: u32, data: &[u8]) -> u32 {
    combine(crc, crc32c(data), data.len())
}

/// The CRC-32C of a whole file, read in 1 MiB pieces.
pub fn file_crc(path: &std::path::Path) -> crate::Result<u32> {
    use crate::error::Context;
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    open_file_crc(&file, path)
}

/// The CRC-32C of the whole of `file`, an open file (`path` names it in messages), read in
/// 1 MiB pieces from its start whatever its position.
pub fn open_file_crc(file: &std::fs::File, path: &std::path::Path) -> crate::Result<u32> {
    use crate::error::Context;
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    let mut offset = 0u64;
    loop {
        let n = file
            .read_at(&mut buf, offset)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            return Ok(crc);
        }
        crc = combine(crc, crc32c(&buf[..n]), n);
        offset += n as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_check_value() {
        // The catalogue check value of CRC-32/ISCSI (CRC-32C) over "123456789".
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn combine_agrees_with_the_crate_for_long_lengths() {
        for len in [1u64, 7, 48, 4 << 20, (1 << 33) + 5, u64::MAX / 3] {
            let a = 0x1234_5678;
            let b = 0x9abc_def0;
            let theirs = crc_fast::checksum_combine(Crc32Iscsi, a, b, len) as u32;
            assert_eq!(
                combine(a as u32, b as u32, len as usize),
                theirs,
                "len {len}"
            );
        }
    }

    #[test]
    fn append_and_combine_agree_with_one_pass() {
        let data: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let whole = crc32c(&data);
        for cut in [0, 1, 47, 48, 4096, 9_999, 10_000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(append(crc32c(a), b), whole, "cut at {cut}");
            assert_eq!(
                combine(crc32c(a), crc32c(b), b.len()),
                whole,
                "cut at {cut}"
            );
        }
        assert_eq!(append(0, &data), whole);
    }
}
