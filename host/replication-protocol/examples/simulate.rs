//! Runs the replication simulator over many seeds and prints any that fail.
//!
//! ```text
//! cargo run --release -p cohort-replication --features sim --example simulate -- --seeds 10000
//! cargo run --release -p cohort-replication --features sim --example simulate -- --seed 4711
//! ```
//!
//! `--seeds N` runs seeds `--from` (default 0) to `--from + N`; `--seed S`
//! replays one seed and prints its report. Exits 1 if any seed failed.

use cohort_replication::sim::{config_for, run};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut from, mut count, mut one) = (0u64, 1_000u64, None);
    while let Some(flag) = args.next() {
        let mut value = || -> u64 {
            let value = args.next().unwrap_or_default();
            value.parse().unwrap_or_else(|_| {
                eprintln!("{flag} needs a number, got {value:?}");
                std::process::exit(2)
            })
        };
        match flag.as_str() {
            "--seeds" => count = value(),
            "--from" => from = value(),
            "--seed" => one = Some(value()),
            _ => {
                eprintln!("usage: simulate [--seeds N] [--from S] | --seed S");
                std::process::exit(2);
            }
        }
    }
    if let Some(seed) = one {
        let config = cohort_replication::sim::Config {
            trace: true,
            ..config_for(seed)
        };
        let report = run(seed, &config);
        for line in &report.trace {
            println!("{line}");
        }
        println!("{config:?}\nviolations: {:#?}", report.violations);
        std::process::exit(i32::from(!report.violations.is_empty()));
    }
    let started = std::time::Instant::now();
    let (mut failed, mut acked, mut epochs, mut faults) = (Vec::new(), 0, 0, 0);
    let (mut retried, mut redirects, mut unavailable, mut indeterminate) = (0, 0, 0, 0);
    for seed in from..from + count {
        let report = run(seed, &config_for(seed));
        acked += report.acked;
        epochs += report.epochs;
        faults += report.faults;
        retried += report.retried;
        redirects += report.redirects;
        unavailable += report.unavailable;
        indeterminate += report.indeterminate;
        if !report.violations.is_empty() {
            println!("seed {seed} FAILED: {}", report.violations.join(" | "));
            failed.push(seed);
        }
    }
    println!(
        "{count} seeds from {from} in {:.1?}: {} failed; {acked} requests answered, {epochs} epochs led, {faults} faults injected",
        started.elapsed(),
        failed.len()
    );
    println!(
        "proxy: {retried} calls answered after a retry, {redirects} redirects followed, \
         {unavailable} given up as unavailable, {indeterminate} as indeterminate"
    );
    if !failed.is_empty() {
        println!("replay one with: --seed {}", failed[0]);
        std::process::exit(1);
    }
}
