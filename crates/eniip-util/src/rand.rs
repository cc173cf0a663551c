//! A small seedable PRNG (xoshiro256**, seeded through SplitMix64) for
//! nonces, ClientTokens, backoff jitter and the emulator's deterministic
//! `--seed` mode. Not for keys: nothing secret is derived from it.

use std::cell::RefCell;
use std::io::Read;

/// xoshiro256** generator.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Rng {
    /// A generator whose whole sequence is fixed by `seed`.
    pub fn seeded(seed: u64) -> Rng {
        let mut st = seed;
        Rng {
            s: [
                splitmix(&mut st),
                splitmix(&mut st),
                splitmix(&mut st),
                splitmix(&mut st),
            ],
        }
    }

    /// A generator seeded from `/dev/urandom`, falling back to the clock and
    /// the pid if that cannot be read.
    pub fn from_entropy() -> Rng {
        let mut buf = [0u8; 8];
        let seed =
            match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf)) {
                Ok(()) => u64::from_le_bytes(buf),
                Err(_) => {
                    let t = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(0);
                    t ^ (u64::from(std::process::id()) << 32)
                }
            };
        Rng::seeded(seed)
    }

    /// The next 64 random bits.
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

    /// Uniform in `0..n` (0 when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        // Lemire's multiply-shift; the bias is negligible for our uses.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// `n` random bytes as lowercase hex (2n characters).
    pub fn hex(&mut self, n: usize) -> String {
        let mut s = String::with_capacity(n * 2);
        for _ in 0..n {
            let b = self.next_u64() as u8;
            s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
            s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
        }
        s
    }

    /// A random (version 4) UUID in the canonical lowercase form.
    pub fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
        let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFFF,
            b >> 48,
            b & 0xFFFF_FFFF_FFFF
        )
    }

    /// Shuffles a slice in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

thread_local! {
    static THREAD_RNG: RefCell<Rng> = RefCell::new(Rng::from_entropy());
}

/// Runs `f` with this thread's entropy-seeded generator.
pub fn with_thread_rng<T>(f: impl FnOnce(&mut Rng) -> T) -> T {
    THREAD_RNG.with(|r| f(&mut r.borrow_mut()))
}

/// A fresh random UUID from the thread generator.
pub fn uuid() -> String {
    with_thread_rng(Rng::uuid)
}

/// A factor in `[1 - spread, 1 + spread]` for jittering delays.
pub fn jitter(spread: f64) -> f64 {
    with_thread_rng(|r| 1.0 - spread + 2.0 * spread * r.unit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_sequences_repeat() {
        let mut a = Rng::seeded(42);
        let mut b = Rng::seeded(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::seeded(43).next_u64(), xs[0]);
    }

    #[test]
    fn uuid_shape() {
        let u = Rng::seeded(1).uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(uuid(), uuid());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::seeded(7);
        for n in [1u64, 2, 3, 10, 1000] {
            for _ in 0..200 {
                assert!(r.below(n) < n);
            }
        }
        assert_eq!(r.below(0), 0);
        let j = jitter(0.2);
        assert!((0.8..=1.2).contains(&j));
    }
}
