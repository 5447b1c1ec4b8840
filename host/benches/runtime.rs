//! Runtime benchmarks: `cargo bench --bench runtime`.
//!
//! 1. Per-job overhead of an empty job (the echo fixture with empty input):
//!    instantiate from the pre-linked module, call `run`, drop the store,
//!    one job at a time; p50/p99 in µs.
//! 2. Throughput of empty jobs with one task per core.
//! 3. `primes` as a Wasm job against the same sieve compiled natively.
//!
//! Numbers go to stdout as Markdown, ready for BENCHMARKS.md.
//!
//! `cargo bench --bench runtime -- guard` is CI's regression guard: 1 in
//! short, and 3 best of two, failing only if the ratio exceeds
//! [`GUARD_PRIMES_RATIO_MAX`].

use cohort::runtime::{JobRequest, Module, Runtime, RuntimeConfig};
use hdrhistogram::Histogram;
use std::time::{Duration, Instant};

const OVERHEAD_WARMUP: u32 = 2_000;
const OVERHEAD_SAMPLES: u32 = 20_000;
const THROUGHPUT_DURATION: Duration = Duration::from_secs(3);
const PRIMES_LIMIT: u64 = 50_000_000;
const PRIMES_RUNS: u32 = 5;

fn guest(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/{name}.wasm", env!("COHORT_GUESTS_DIR")))
        .expect("guest built by build.rs")
}

/// Most the Wasm `primes` job may take against the same sieve compiled
/// natively before the guard fails (2.4x on the 2-CPU machine of
/// BENCHMARKS.md): generous, because it guards against a lost optimization
/// (say, bounds checks back in every access), not against noise.
const GUARD_PRIMES_RATIO_MAX: f64 = 4.0;

fn main() {
    // `cargo bench` passes `--bench`; the only filter is `guard`: the CI
    // regression guard, a short run that fails only on a ratio measured
    // in the same run.
    let guard = std::env::args().skip(1).any(|a| a == "guard");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("machine: {cores} cores ({})", std::env::consts::ARCH);
    if guard {
        overhead(OVERHEAD_SAMPLES / 10);
        let ratio = primes(2);
        println!(
            "guard: Wasm primes / native primes = {ratio:.2} (at most {GUARD_PRIMES_RATIO_MAX})"
        );
        if ratio > GUARD_PRIMES_RATIO_MAX {
            eprintln!("guard: FAILED: the Wasm job is {ratio:.2}x the native kernel");
            std::process::exit(1);
        }
        return;
    }
    overhead(OVERHEAD_SAMPLES);
    throughput(cores);
    primes(PRIMES_RUNS);
}

/// A runtime with `concurrent_jobs` slots and the guest `name` loaded in it.
fn load(rt: &tokio::runtime::Runtime, concurrent_jobs: u32, name: &str) -> (Runtime, Module) {
    let runtime = Runtime::new(RuntimeConfig {
        concurrent_jobs,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let module = rt.block_on(runtime.load(&guest(name))).unwrap();
    (runtime, module)
}

/// A single-threaded async runtime, so one-at-a-time numbers are not
/// blurred by work stealing.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn overhead(samples: u32) {
    let rt = current_thread();
    let (runtime, module) = load(&rt, 4, "fixture_echo");
    let mut histogram = Histogram::<u64>::new(3).unwrap();
    rt.block_on(async {
        for i in 0..OVERHEAD_WARMUP + samples {
            let started = Instant::now();
            let report = runtime.run(&module, JobRequest::default()).await;
            let nanos = started.elapsed().as_nanos() as u64;
            assert!(report.outcome.is_ok());
            if i >= OVERHEAD_WARMUP {
                histogram.record(nanos).unwrap();
            }
        }
    });
    let us = |q: f64| histogram.value_at_quantile(q) as f64 / 1000.0;
    println!("\n## Empty-job overhead (instantiate + call + drop), one at a time, {samples} jobs");
    println!("| p50 | p90 | p99 | p99.9 | mean |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs | {:.1} µs |",
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        histogram.mean() / 1000.0
    );
}

fn throughput(cores: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(cores)
        .enable_all()
        .build()
        .unwrap();
    let (runtime, module) = load(&rt, 64, "fixture_echo");
    let started = Instant::now();
    let total: u64 = rt.block_on(async {
        let tasks: Vec<_> = (0..cores)
            .map(|_| {
                let (runtime, module) = (runtime.clone(), module.clone());
                tokio::spawn(async move {
                    let mut done = 0u64;
                    while started.elapsed() < THROUGHPUT_DURATION {
                        assert!(
                            runtime
                                .run(&module, JobRequest::default())
                                .await
                                .outcome
                                .is_ok()
                        );
                        done += 1;
                    }
                    done
                })
            })
            .collect();
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap();
        }
        total
    });
    let secs = started.elapsed().as_secs_f64();
    println!("\n## Empty-job throughput, {cores} tasks on {cores} threads for {secs:.1} s");
    println!("| jobs | jobs/s |");
    println!("|---|---|");
    println!("| {total} | {:.0} |", total as f64 / secs);
}

/// Best of `runs`; returns the Wasm/native ratio.
fn primes(runs: u32) -> f64 {
    let rt = current_thread();
    let (runtime, module) = load(&rt, 2, "primes");
    let input = format!(r#"{{"limit": {PRIMES_LIMIT}}}"#).into_bytes();
    let expected = primes::count_primes(PRIMES_LIMIT);

    let mut wasm_best = Duration::MAX;
    let mut native_best = Duration::MAX;
    for _ in 0..runs {
        let started = Instant::now();
        let report = rt.block_on(runtime.run(
            &module,
            JobRequest {
                input: input.clone(),
                ..JobRequest::default()
            },
        ));
        wasm_best = wasm_best.min(started.elapsed());
        let out: serde_json::Value = serde_json::from_slice(&report.outcome.unwrap()).unwrap();
        assert_eq!(out["count"], expected);

        let started = Instant::now();
        assert_eq!(
            std::hint::black_box(primes::count_primes(std::hint::black_box(PRIMES_LIMIT))),
            expected
        );
        native_best = native_best.min(started.elapsed());
    }
    println!("\n## primes below {PRIMES_LIMIT}: Wasm job vs native, best of {runs}");
    println!("| Wasm (job, incl. progress + checkpoints) | native | ratio |");
    println!("|---|---|---|");
    println!(
        "| {:.1} ms | {:.1} ms | {:.2}x |",
        wasm_best.as_secs_f64() * 1000.0,
        native_best.as_secs_f64() * 1000.0,
        wasm_best.as_secs_f64() / native_best.as_secs_f64()
    );
    wasm_best.as_secs_f64() / native_best.as_secs_f64()
}
