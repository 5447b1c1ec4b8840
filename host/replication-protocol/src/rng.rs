//! A small seeded pseudo-random generator (splitmix64) for simulations and
//! fault schedules.
//!
//! It owns nothing but a 64-bit state: the same seed gives the same
//! sequence on every platform and build, which is what lets a failing
//! simulator seed or fault schedule replay exactly. The simulator draws
//! everything random from one [`Rng`]; the host's fault-injection tests
//! use the same generator rather than a copy of it.
//!
//! Not for anything that must be unpredictable (keys, nonces, tokens) and
//! not statistically strong: `below` takes a plain remainder, whose bias is
//! negligible for the small ranges drawn here.

use std::time::Duration;

/// splitmix64: small, fast, and the same everywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True with a chance of `per_million` in a million.
    pub fn chance(&mut self, per_million: u64) -> bool {
        self.below(1_000_000) < per_million
    }

    /// A number in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.below(high - low + 1)
    }

    /// A duration of `low_ms..high_ms` milliseconds (`low_ms` when the two
    /// are equal).
    pub fn millis(&mut self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(low_ms + self.below(high_ms - low_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_splitmix64s_sequence() {
        // splitmix64's reference outputs for seed 1234567: a changed
        // constant or shift would silently change every recorded simulator
        // seed and fault schedule.
        let mut rng = Rng::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821,
            ]
        );
    }

    #[test]
    fn draws_stay_in_their_ranges() {
        let mut rng = Rng::new(7);
        for _ in 0..10_000 {
            assert!(rng.below(10) < 10);
            assert!((5..=9).contains(&rng.between(5, 9)));
            let d = rng.millis(300, 1_000);
            assert!(d >= Duration::from_millis(300) && d < Duration::from_millis(1_000));
        }
        assert_eq!(rng.below(0), 0);
        assert!(!rng.chance(0));
        assert!(rng.chance(1_000_000));
    }
}
