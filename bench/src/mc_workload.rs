//! Workloads for `mc-load`: what keys, values and operations a memcached client sends.
//!
//! * [`Rng`]: xoshiro256++ (seeded through SplitMix64). A load generator draws several
//!   numbers per request; this one is fast, has no dependencies and its streams are
//!   reproducible from `--seed`.
//! * The Facebook ETC distributions as mutilate implements them (after Atikoglu et al.,
//!   "Workload Analysis of a Large-Scale Key-Value Store", SIGMETRICS'12):
//!   key sizes GEV(30.7984, 8.20449, 0.078688) ([`fb_key_size`]), value sizes a discrete
//!   table of small sizes over a generalized Pareto(15, 214.476, 0.348238) tail
//!   ([`fb_value_size`], mutilate's `fb_value`). Both are truncated here to the ranges the
//!   issue gives (keys 20–70 B, values 1–1024 B) by resampling, which keeps the shape
//!   inside the range instead of piling the tail onto the bounds.
//! * [`Zipf`]: key popularity, rank `i` (0-based) drawn with probability ∝ 1/(i+1)^s
//!   (Gray et al.'s method, as YCSB's ZipfianGenerator); ranks are then scrambled to key
//!   ids so the popular keys are not the ones with the smallest ids.
//! * [`Workload`]: a key space whose key sizes are fixed per key (as in mutilate, a key
//!   is always the same string), a get ratio and a value-size distribution.

/// xoshiro256++ (Blackman and Vigna).
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

/// SplitMix64's finaliser: a good 64-bit mix (used for seeding and for per-key hashes).
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            mix64(x)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in the open interval (0, 1): never 0 or 1, so `ln` and negative powers
    /// of it are finite.
    pub fn uniform(&mut self) -> f64 {
        unit(self.next_u64())
    }

    /// Uniform in `0..n` (`n > 0`; Lemire's multiply-shift, bias ≤ n/2^64).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// Exponential with mean `mean` (Poisson inter-arrival times).
    pub fn exp(&mut self, mean: f64) -> f64 {
        -self.uniform().ln() * mean
    }
}

/// A 64-bit value mapped into (0, 1).
fn unit(x: u64) -> f64 {
    ((x >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64)
}

/// Generalized extreme value quantile (mutilate's `GEV::generate`, shape ≠ 0).
fn gev(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    loc + scale * ((-u.ln()).powf(-shape) - 1.0) / shape
}

/// Generalized Pareto quantile (mutilate's `GPareto::generate`, shape ≠ 0).
fn gpareto(u: f64, loc: f64, scale: f64, shape: f64) -> f64 {
    loc + scale * (u.powf(-shape) - 1.0) / shape
}

pub const KEY_MIN: usize = 20;
pub const KEY_MAX: usize = 70;
pub const VALUE_MIN: usize = 1;
pub const VALUE_MAX: usize = 1024;

/// ETC key size of key `id`: a pure function of the id (mutilate hashes the key index
/// into the GEV too), so a key keeps its size; resampled by rehashing until it lies in
/// 20–70 B (about 1.4 % of GEV draws fall below 20 B and 1.6 % above 70 B).
pub fn fb_key_size(id: u64) -> usize {
    let mut h = id ^ 0x6b65_795f_7369_7a65; // "key_size"
    loop {
        h = mix64(h);
        let size = gev(unit(h), 30.7984, 8.20449, 0.078688).round();
        if (KEY_MIN as f64..=KEY_MAX as f64).contains(&size) {
            return size as usize;
        }
    }
}

/// mutilate's `fb_value` small sizes: (probability, size in bytes); otherwise the
/// generalized Pareto tail.
const FB_VALUE_SMALL: [(f64, f64); 15] = [
    (0.00536, 0.0),
    (0.00047, 1.0),
    (0.17820, 2.0),
    (0.09239, 3.0),
    (0.00018, 4.0),
    (0.02740, 5.0),
    (0.00065, 6.0),
    (0.00606, 7.0),
    (0.00023, 8.0),
    (0.00837, 9.0),
    (0.00837, 10.0),
    (0.08989, 11.0),
    (0.00092, 12.0),
    (0.00326, 13.0),
    (0.01980, 14.0),
];

/// ETC value size: mutilate's `fb_value`, resampled while above 1024 B (≈ 3.5 % of
/// draws); its 0-byte entry becomes 1 B (the range is 1–1024).
pub fn fb_value_size(rng: &mut Rng) -> usize {
    loop {
        let u = rng.uniform();
        let mut sum = 0.0;
        let mut size = None;
        for (p, v) in FB_VALUE_SMALL {
            sum += p;
            if u < sum {
                size = Some(v);
                break;
            }
        }
        let size = size.unwrap_or_else(|| gpareto(rng.uniform(), 15.0, 214.476, 0.348238));
        let size = (size as usize).max(VALUE_MIN);
        if size <= VALUE_MAX {
            return size;
        }
    }
}

/// Zipf-distributed ranks in `0..n` with exponent `theta` (0 < theta, theta ≠ 1), by
/// Gray et al. ("Quickly generating billion-record synthetic databases", SIGMOD'94), the
/// method of YCSB's ZipfianGenerator: O(n) set-up for ζ(n), O(1) per draw.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    pub fn new(n: u64, theta: f64) -> Result<Zipf, String> {
        if n == 0 || !(theta > 0.0 && theta < 10.0) || (theta - 1.0).abs() < 1e-9 {
            return Err(format!(
                "zipf: need n > 0 and 0 < skew < 10, skew ≠ 1 (got n={n}, skew={theta})"
            ));
        }
        let zetan: f64 = (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum();
        let zeta2 = 1.0 + 1.0 / 2f64.powf(theta);
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Ok(Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
        })
    }

    pub fn sample(&self, rng: &mut Rng) -> u64 {
        let u = rng.uniform();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// How keys are chosen.
#[derive(Clone, Debug)]
pub enum Popularity {
    Uniform,
    Zipf(Zipf),
}

/// How value sizes of sets are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueSize {
    Fixed(usize),
    /// mutilate's `fb_value`, truncated to 1–1024 B.
    Etc,
}

/// How key sizes are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySize {
    Fixed(usize),
    /// ETC's GEV, truncated to 20–70 B, fixed per key.
    Etc,
}

/// One request to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Get { key: u64 },
    Set { key: u64, value_len: usize },
}

#[derive(Clone, Debug)]
pub struct Workload {
    pub keys: u64,
    pub key_size: KeySize,
    pub value_size: ValueSize,
    /// Probability that a request is a get.
    pub get_ratio: f64,
    pub popularity: Popularity,
}

/// ETC's get:set mix, 30:1.
pub const ETC_GET_RATIO: f64 = 30.0 / 31.0;

impl Workload {
    /// Facebook ETC over `keys` keys with Zipf popularity `skew` (0: uniform).
    pub fn etc(keys: u64, skew: f64) -> Result<Workload, String> {
        Workload::new(keys, KeySize::Etc, ValueSize::Etc, ETC_GET_RATIO, skew)
    }

    pub fn new(
        keys: u64,
        key_size: KeySize,
        value_size: ValueSize,
        get_ratio: f64,
        skew: f64,
    ) -> Result<Workload, String> {
        if keys == 0 {
            return Err("--keys must be positive".into());
        }
        if !(0.0..=1.0).contains(&get_ratio) {
            return Err(format!("--get-ratio {get_ratio} is not within 0..1"));
        }
        if let KeySize::Fixed(k) = key_size {
            // The id is written in decimal into the key; memcached allows 250 bytes.
            let digits = keys.to_string().len();
            if k < digits || k > 250 {
                return Err(format!(
                    "--key-size {k}: must be {digits}..=250 for {keys} keys"
                ));
            }
        }
        if let ValueSize::Fixed(0) = value_size {
            return Err("--value-size must be positive".into());
        }
        let popularity = if skew == 0.0 {
            Popularity::Uniform
        } else {
            Popularity::Zipf(Zipf::new(keys, skew)?)
        };
        Ok(Workload {
            keys,
            key_size,
            value_size,
            get_ratio,
            popularity,
        })
    }

    /// A key id by popularity. Zipf ranks go through a bijection of `0..keys` (an
    /// affine map with a multiplier coprime to `keys`) so rank order and id order differ.
    pub fn key(&self, rng: &mut Rng) -> u64 {
        match &self.popularity {
            Popularity::Uniform => rng.below(self.keys),
            Popularity::Zipf(z) => scramble(z.sample(rng), self.keys),
        }
    }

    pub fn value_len(&self, rng: &mut Rng) -> usize {
        match self.value_size {
            ValueSize::Fixed(v) => v,
            ValueSize::Etc => fb_value_size(rng),
        }
    }

    pub fn next_op(&self, rng: &mut Rng) -> Op {
        let key = self.key(rng);
        if rng.uniform() < self.get_ratio {
            Op::Get { key }
        } else {
            Op::Set {
                key,
                value_len: self.value_len(rng),
            }
        }
    }

    pub fn key_len(&self, id: u64) -> usize {
        match self.key_size {
            KeySize::Fixed(k) => k,
            KeySize::Etc => fb_key_size(id),
        }
    }

    /// Appends key `id`: its decimal digits, then filler up to its size. The digits make
    /// keys distinct; the filler only sets the length.
    pub fn write_key(&self, id: u64, out: &mut Vec<u8>) {
        let start = out.len();
        let len = self.key_len(id);
        let mut digits = [0u8; 20];
        let mut n = id;
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        out.extend_from_slice(&digits[i..]);
        out.resize(start + len.max(digits.len() - i), b'k');
    }
}

/// A bijection of `0..n`: `(a·r + c) mod n` with `a` coprime to `n`.
fn scramble(rank: u64, n: u64) -> u64 {
    let mut a = 0x9e37_79b9_7f4a_7c15 % n;
    while a == 0 || gcd(a, n) != 1 {
        a += 1;
    }
    ((rank as u128 * a as u128 + 12_345) % n as u128) as u64
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_sizes_within_20_to_70_and_gev_shaped() {
        let sizes: Vec<usize> = (0..100_000).map(fb_key_size).collect();
        assert!(sizes.iter().all(|s| (KEY_MIN..=KEY_MAX).contains(s)));
        // The GEV's mode is near 30 B; the median of the truncated draw lies in 28..36.
        let mut sorted = sizes.clone();
        sorted.sort_unstable();
        let median = sorted[sorted.len() / 2];
        assert!((28..=36).contains(&median), "median key size {median}");
        // A key keeps its size.
        assert_eq!(fb_key_size(42), fb_key_size(42));
    }

    #[test]
    fn value_sizes_within_1_to_1024_with_small_mode() {
        let mut rng = Rng::new(1);
        let sizes: Vec<usize> = (0..200_000).map(|_| fb_value_size(&mut rng)).collect();
        assert!(sizes.iter().all(|s| (VALUE_MIN..=VALUE_MAX).contains(s)));
        // The table puts ≈ 44 % of the mass on 0–14 B (2 B alone ≈ 17.8 %).
        let small = sizes.iter().filter(|&&s| s < 15).count() as f64 / sizes.len() as f64;
        assert!((0.42..0.48).contains(&small), "share below 15 B: {small}");
        let two = sizes.iter().filter(|&&s| s == 2).count() as f64 / sizes.len() as f64;
        assert!((0.17..0.20).contains(&two), "share of 2 B: {two}");
        // And a long tail: some values near the top of the range.
        assert!(sizes.iter().any(|&s| s > 900));
    }

    #[test]
    fn etc_get_set_ratio_is_about_30_to_1() {
        let w = Workload::etc(100_000, 0.99).unwrap();
        let mut rng = Rng::new(7);
        let (mut gets, mut sets) = (0u64, 0u64);
        for _ in 0..1_000_000 {
            match w.next_op(&mut rng) {
                Op::Get { .. } => gets += 1,
                Op::Set { .. } => sets += 1,
            }
        }
        let ratio = gets as f64 / sets as f64;
        assert!((27.0..33.0).contains(&ratio), "get:set = {ratio}:1");
    }

    #[test]
    fn zipf_top_one_percent_takes_a_large_share() {
        let n = 100_000u64;
        let w = Workload::etc(n, 0.99).unwrap();
        let mut rng = Rng::new(3);
        let mut counts = vec![0u32; n as usize];
        let draws = 1_000_000;
        for _ in 0..draws {
            let k = w.key(&mut rng);
            assert!(k < n);
            counts[k as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = counts[..(n / 100) as usize].iter().map(|&c| c as u64).sum();
        let share = top as f64 / draws as f64;
        // Exact for s = 0.99, n = 1e5: H(1000)/H(100000) ≈ 0.62 (of the 1 %).
        assert!(share > 0.55, "top 1% of keys take {share}");
        // Uniform popularity for comparison: ≈ 1 %.
        let u = Workload::new(n, KeySize::Fixed(32), ValueSize::Fixed(32), 0.9, 0.0).unwrap();
        let mut counts = vec![0u32; n as usize];
        for _ in 0..draws {
            counts[u.key(&mut rng) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = counts[..(n / 100) as usize].iter().map(|&c| c as u64).sum();
        assert!((top as f64 / draws as f64) < 0.05);
    }

    #[test]
    fn scramble_is_a_bijection() {
        for n in [1u64, 2, 10, 97, 1000] {
            let mut seen = vec![false; n as usize];
            for r in 0..n {
                let k = scramble(r, n) as usize;
                assert!(!seen[k]);
                seen[k] = true;
            }
        }
    }

    #[test]
    fn keys_are_distinct_and_sized() {
        let w = Workload::etc(1000, 0.99).unwrap();
        let mut all = std::collections::HashSet::new();
        for id in 0..1000 {
            let mut k = Vec::new();
            w.write_key(id, &mut k);
            assert_eq!(k.len(), w.key_len(id));
            assert!(all.insert(k));
        }
        let f = Workload::new(100, KeySize::Fixed(64), ValueSize::Fixed(8), 0.9, 0.0).unwrap();
        let mut k = Vec::new();
        f.write_key(99, &mut k);
        assert_eq!(k.len(), 64);
        assert!(k.starts_with(b"99k"));
    }

    #[test]
    fn exp_mean() {
        let mut rng = Rng::new(9);
        let n = 200_000;
        let mean = (0..n).map(|_| rng.exp(10.0)).sum::<f64>() / n as f64;
        assert!((9.8..10.2).contains(&mean), "{mean}");
    }
}
