//! CRC-32C (Castagnoli), the checksum recorded for every shard in `metadata.db`. One place so
//! every command computes it the same way. `crc-fast` picks the fastest kernel the CPU has at
//! run time (VPCLMULQDQ/AVX-512 folding where present: about twice the SSE4.2 `crc32`
//! instruction, which matters because merge and validate checksum every byte they move).

use crc_fast::CrcAlgorithm::Crc32Iscsi;

/// The CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(Crc32Iscsi, data) as u32
}

/// The CRC-32C of `a ‖ b`, from the CRCs of `a` and of `b` (`b_len` bytes long).
pub fn combine(crc_a: u32, crc_b: u32, b_len: usize) -> u32 {
    crc_fast::checksum_combine(Crc32Iscsi, crc_a.into(), crc_b.into(), b_len as u64) as u32
}

/// The CRC-32C of `a ‖ data`, from the CRC of `a` (0 for nothing).
pub fn append(crc: u32, data: &[u8]) -> u32 {
    combine(crc, crc32c(data), data.len())
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
