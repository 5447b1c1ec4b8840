//! Counts the primes below a limit with a segmented sieve of Eratosthenes.
//!
//! The job input is JSON `{"limit": N}`, its output `{"limit": N, "count": C}`.
//! It reports progress after every segment and checkpoints `{next, count}`,
//! so an attempt that is retried (say, because its worker died) resumes where
//! the last one stopped instead of starting over.
//!
//! The sieve itself is plain Rust with no cohort dependency, so the host's
//! benchmark links it natively to compare Wasm against native speed.

/// Numbers sieved per segment: a 256 KiB `Vec<bool>` stays in L2, and a
/// segment is a fraction of a millisecond of work between progress reports.
pub const SEGMENT_LEN: u64 = 1 << 18;

/// Largest accepted limit; keeps the base-prime table small (sqrt < 2^20).
pub const LIMIT_MAX: u64 = 1 << 40;

/// The primes up to and including `sqrt(limit)`.
pub fn base_primes(limit: u64) -> Vec<u64> {
    let root = isqrt(limit);
    let mut composite = vec![false; root as usize + 1];
    let mut primes = Vec::new();
    for n in 2..=root {
        if !composite[n as usize] {
            primes.push(n);
            let mut m = n * n;
            while m <= root {
                composite[m as usize] = true;
                m += n;
            }
        }
    }
    primes
}

/// The number of primes `p` with `lo <= p < hi`, given `base` from
/// [`base_primes`] for a limit of at least `hi`. `scratch` is reused between
/// segments to avoid an allocation per call.
pub fn count_segment(lo: u64, hi: u64, base: &[u64], scratch: &mut Vec<bool>) -> u64 {
    if hi <= lo {
        return 0;
    }
    scratch.clear();
    scratch.resize((hi - lo) as usize, true);
    for &p in base {
        if p * p >= hi {
            break;
        }
        let mut m = (p * p).max(lo.div_ceil(p) * p);
        while m < hi {
            scratch[(m - lo) as usize] = false;
            m += p;
        }
    }
    // 0 and 1 are not prime.
    for n in lo..hi.min(2) {
        scratch[(n - lo) as usize] = false;
    }
    scratch.iter().filter(|&&is_prime| is_prime).count() as u64
}

/// The number of primes below `limit`, natively, one segment at a time:
/// exactly the work the job does, minus its progress and checkpoint calls.
pub fn count_primes(limit: u64) -> u64 {
    let base = base_primes(limit);
    let mut scratch = Vec::new();
    let mut count = 0;
    let mut lo = 0;
    while lo < limit {
        let hi = (lo + SEGMENT_LEN).min(limit);
        count += count_segment(lo, hi, &base, &mut scratch);
        lo = hi;
    }
    count
}

fn isqrt(n: u64) -> u64 {
    let mut r = (n as f64).sqrt() as u64;
    while r * r > n {
        r -= 1;
    }
    while (r + 1) * (r + 1) <= n {
        r += 1;
    }
    r
}

#[cfg(target_arch = "wasm32")]
mod job {
    use super::*;
    use cohort_guest::{JobError, Json, job};
    use serde::{Deserialize, Serialize};

    #[derive(Deserialize)]
    struct Request {
        limit: u64,
    }

    #[derive(Serialize)]
    struct Response {
        limit: u64,
        count: u64,
    }

    /// Where an attempt stopped: all primes below `next` have been counted.
    #[derive(Serialize, Deserialize)]
    struct Checkpoint {
        limit: u64,
        next: u64,
        count: u64,
    }

    #[job]
    fn run(Json(request): Json<Request>) -> Result<Json<Response>, JobError> {
        let limit = request.limit;
        if limit > LIMIT_MAX {
            return Err(JobError::bad_input(format!(
                "limit must be at most {LIMIT_MAX}"
            )));
        }
        let (mut lo, mut count) = match cohort_guest::resume_json::<Checkpoint>()? {
            Some(c) if c.limit == limit => {
                cohort_guest::info!("resuming at {} with {} primes counted", c.next, c.count);
                (c.next, c.count)
            }
            _ => (0, 0),
        };
        let base = base_primes(limit);
        let mut scratch = Vec::new();
        while lo < limit {
            let hi = (lo + SEGMENT_LEN).min(limit);
            count += count_segment(lo, hi, &base, &mut scratch);
            lo = hi;
            cohort_guest::checkpoint_json(&Checkpoint {
                limit,
                next: lo,
                count,
            })?;
            cohort_guest::progress(lo as f32 / limit as f32, "sieving");
        }
        Ok(Json(Response { limit, count }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_counts() {
        for (limit, count) in [
            (0, 0),
            (1, 0),
            (2, 0),
            (3, 1),
            (10, 4),
            (100, 25),
            (1_000_000, 78_498),
        ] {
            assert_eq!(count_primes(limit), count, "primes below {limit}");
        }
    }

    #[test]
    fn segments_agree_with_one_pass() {
        let base = base_primes(1_000_000);
        let mut scratch = Vec::new();
        let split: u64 = (0..1_000_000u64)
            .step_by(77_777)
            .map(|lo| count_segment(lo, (lo + 77_777).min(1_000_000), &base, &mut scratch))
            .sum();
        assert_eq!(split, 78_498);
    }
}
