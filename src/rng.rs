//! Deterministic randomness for shuffling: a counter-based generator (SplitMix64) so row i's
//! draw depends only on (seed, i), whatever the thread count, and xoshiro256** with an unbiased
//! bounded draw for in-memory Fisher–Yates shuffles.

/// SplitMix64's output function: a bijective 64-bit mixer.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// The i-th output of the SplitMix64 stream keyed by `seed` (counter-based: random access).
pub fn splitmix_at(seed: u64, i: u64) -> u64 {
    mix64(mix64(seed).wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// A uniform integer in `0..n` from one 64-bit draw (multiply-shift). Its bias is below
/// n / 2^64 — for the bucket counts used here (≤ 10^5) under 10^-14 per draw.
pub fn below_fast(draw: u64, n: u64) -> u64 {
    ((u128::from(draw) * u128::from(n)) >> 64) as u64
}

/// xoshiro256**: a fast, well-tested generator for the in-memory shuffles.
pub struct Xoshiro {
    s: [u64; 4],
}

impl Xoshiro {
    /// Seeds the state from SplitMix64, as the authors recommend.
    pub fn new(seed: u64) -> Xoshiro {
        Xoshiro {
            s: [0, 1, 2, 3].map(|i| splitmix_at(seed, i)),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// An exactly uniform integer in `0..n` (Lemire's method with rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Fisher–Yates: every permutation of `items` equally likely.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        assert_eq!(splitmix_at(7, 3), splitmix_at(7, 3));
        assert_ne!(splitmix_at(7, 3), splitmix_at(8, 3));
        let mut a = Xoshiro::new(1);
        let mut b = Xoshiro::new(1);
        assert_eq!(
            (0..10).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..10).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn bounded_draws_are_roughly_uniform() {
        let mut r = Xoshiro::new(42);
        let mut counts = [0u32; 7];
        for _ in 0..70_000 {
            counts[r.below(7) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{counts:?}"
        );
        let mut fast = [0u32; 5];
        for i in 0..50_000 {
            fast[below_fast(splitmix_at(9, i), 5) as usize] += 1;
        }
        assert!(
            fast.iter().all(|&c| (9_000..11_000).contains(&c)),
            "{fast:?}"
        );
    }
}
