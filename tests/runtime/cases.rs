// The runtime suite's cases, run once per isolation (`tests/runtime.rs`,
// `tests/runtime_process.rs`); each includes this file after setting
// `ISOLATION`.

use cohort::runtime::{
    Digest, Isolation, JobFailure, JobLimits, JobRequest, Module, Runtime, RuntimeConfig,
};
use std::time::Duration;

fn guest(name: &str) -> Vec<u8> {
    let path = format!("{}/{name}.wasm", env!("COHORT_GUESTS_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A runtime of the suite's isolation with `concurrent_jobs` slots.
fn config(concurrent_jobs: u32) -> RuntimeConfig {
    RuntimeConfig {
        concurrent_jobs,
        isolation: ISOLATION,
        sandbox_program: Some(env!("CARGO_BIN_EXE_cohort").into()),
        ..RuntimeConfig::default()
    }
}

fn runtime() -> Runtime {
    Runtime::new(config(4)).unwrap()
}

async fn load(runtime: &Runtime, name: &str) -> Module {
    runtime
        .load(&guest(name))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

async fn run(
    runtime: &Runtime,
    name: &str,
    input: &[u8],
    limits: JobLimits,
) -> cohort::runtime::JobReport {
    let module = load(runtime, name).await;
    let request = JobRequest {
        input: input.to_vec(),
        limits,
        ..JobRequest::default()
    };
    runtime.run(&module, request).await
}

/// The echo fixture still works: the runtime survived whatever came before.
async fn assert_healthy(runtime: &Runtime) {
    let report = run(
        runtime,
        "fixture_echo",
        b"still alive",
        JobLimits::default(),
    )
    .await;
    assert_eq!(report.outcome.unwrap(), b"still alive");
}

fn failure(report: &cohort::runtime::JobReport) -> &JobFailure {
    match &report.outcome {
        Ok(out) => panic!("expected a failure, got {} bytes of output", out.len()),
        Err(failure) => failure,
    }
}

fn log_text(report: &cohort::runtime::JobReport) -> String {
    String::from_utf8_lossy(&report.log).into_owned()
}

#[tokio::test]
async fn wordcount_counts_words() {
    let rt = runtime();
    let text = b"The cat and the hat. THE END, and that's that's it";
    let report = run(&rt, "wordcount", text, JobLimits::default()).await;
    let out: serde_json::Value = serde_json::from_slice(report.outcome.as_ref().unwrap()).unwrap();
    assert_eq!(out["words"], 11);
    assert_eq!(out["unique"], 7);
    assert_eq!(
        out["top"][0],
        serde_json::json!({"word": "the", "count": 3})
    );
    assert_eq!(
        out["top"][1],
        serde_json::json!({"word": "and", "count": 2})
    );
    assert_eq!(
        out["top"][2],
        serde_json::json!({"word": "that's", "count": 2})
    );
    assert!(
        log_text(&report).contains("INFO counted 11 words"),
        "{}",
        log_text(&report)
    );
}

#[tokio::test]
async fn wordcount_rejects_non_utf8_as_a_job_error() {
    let rt = runtime();
    let report = run(&rt, "wordcount", &[0xff, 0xfe, 0xfd], JobLimits::default()).await;
    match failure(&report) {
        JobFailure::JobError { code, .. } => assert_eq!(code, "bad_input"),
        other => panic!("expected a job error, got {other:?}"),
    }
}

#[tokio::test]
async fn primes_counts_and_reports_progress_and_checkpoints() {
    let rt = runtime();
    let report = run(
        &rt,
        "primes",
        br#"{"limit": 1000000}"#,
        JobLimits::default(),
    )
    .await;
    let out: serde_json::Value = serde_json::from_slice(report.outcome.as_ref().unwrap()).unwrap();
    assert_eq!(out, serde_json::json!({"limit": 1000000, "count": 78498}));
    assert_eq!(report.progress.as_ref().unwrap().fraction, 1.0);
    let checkpoint: serde_json::Value =
        serde_json::from_slice(report.checkpoint.as_ref().unwrap()).unwrap();
    assert_eq!(checkpoint["next"], 1000000);
    assert_eq!(checkpoint["count"], 78498);
}

#[tokio::test]
async fn primes_resumes_from_a_checkpoint() {
    let rt = runtime();
    let module = load(&rt, "primes").await;
    // A checkpoint that claims 1000 primes below 999_000: the job must trust
    // it and only sieve [999_000, 1_000_000), which holds 65 primes.
    let request = JobRequest {
        input: br#"{"limit": 1000000}"#.to_vec(),
        resume_state: Some(br#"{"limit": 1000000, "next": 999000, "count": 1000}"#.to_vec()),
        ..JobRequest::default()
    };
    let report = rt.run(&module, request).await;
    let out: serde_json::Value = serde_json::from_slice(report.outcome.as_ref().unwrap()).unwrap();
    assert_eq!(out["count"], 1000 + 65, "log: {}", log_text(&report));
    assert!(log_text(&report).contains("resuming at 999000"));
}

#[tokio::test]
async fn mandelbrot_draws_a_png_tile() {
    let rt = runtime();
    let tile =
        br#"{"width": 64, "height": 48, "x": 16, "y": 8, "w": 32, "h": 24, "iterations": 200}"#;
    let report = run(&rt, "mandelbrot", tile, JobLimits::default()).await;
    let png_bytes = report.outcome.unwrap();
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (32, 24));
    assert_eq!(info.color_type, png::ColorType::Rgb);
    // The middle of this view is inside the set (black); a corner is not.
    let pixel = |x: usize, y: usize| &pixels[(y * 32 + x) * 3..(y * 32 + x) * 3 + 3];
    assert_eq!(pixel(16, 16), [0, 0, 0]);
    assert_ne!(pixel(0, 0), [0, 0, 0]);
}

#[tokio::test]
async fn mandelbrot_rejects_a_tile_outside_the_image() {
    let rt = runtime();
    let tile = br#"{"width": 10, "height": 10, "x": 8, "y": 0, "w": 4, "h": 4}"#;
    let report = run(&rt, "mandelbrot", tile, JobLimits::default()).await;
    assert!(matches!(failure(&report), JobFailure::JobError { code, .. } if code == "bad_input"));
}

#[tokio::test]
async fn a_trap_reports_its_message_and_wasm_backtrace() {
    let rt = runtime();
    let report = run(&rt, "fixture_trap", b"", JobLimits::default()).await;
    match failure(&report) {
        JobFailure::Trap { message, backtrace } => {
            assert!(message.contains("unreachable"), "{message}");
            let backtrace = backtrace.as_deref().expect("a backtrace");
            assert!(backtrace.contains("deep"), "{backtrace}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_eq!(failure(&report).code(), "trap");
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn a_panic_is_a_trap_with_the_message_in_the_log() {
    let rt = runtime();
    let report = run(&rt, "fixture_trap", b"panic", JobLimits::default()).await;
    assert_eq!(failure(&report).code(), "trap");
    assert!(
        log_text(&report).contains("fixture panicked on purpose"),
        "{}",
        log_text(&report)
    );
    assert_healthy(&rt).await;
}

/// Runs the spin fixture with `input` under a 300 ms limit and checks that
/// it is stopped, promptly, as a timeout.
async fn assert_times_out(input: &[u8]) {
    let rt = runtime();
    let limits = JobLimits {
        timeout_ms: 300,
        ..JobLimits::default()
    };
    let report = run(&rt, "fixture_spin", input, limits).await;
    assert_eq!(failure(&report), &JobFailure::Timeout { limit_ms: 300 });
    assert!(
        report.duration < Duration::from_secs(5),
        "stopped promptly: {:?}",
        report.duration
    );
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn an_endless_loop_hits_the_timeout() {
    assert_times_out(b"").await;
}

#[tokio::test]
async fn a_job_blocked_in_a_host_call_still_times_out() {
    assert_times_out(b"sleep").await;
}

/// An attempt is charged the CPU time it used, not the time it took: one
/// spinning in Wasm uses CPU for much of its run, one blocked in a host
/// call (WASI's clock) almost none, though both run until their timeout.
/// (Measured in the sandbox process too, under process isolation.)
#[tokio::test]
async fn an_attempt_is_charged_the_cpu_it_used_not_the_time_it_took() {
    let rt = runtime();
    let limits = JobLimits {
        timeout_ms: 400,
        ..JobLimits::default()
    };
    let spun = run(&rt, "fixture_spin", b"", limits).await;
    let slept = run(&rt, "fixture_spin", b"sleep", limits).await;
    for report in [&spun, &slept] {
        assert_eq!(failure(report), &JobFailure::Timeout { limit_ms: 400 });
        assert!(
            report.cpu <= report.duration + Duration::from_millis(50),
            "one thread runs an attempt: {:?} of CPU in {:?}",
            report.cpu,
            report.duration
        );
    }
    assert!(
        spun.cpu >= Duration::from_millis(40) && spun.cpu > slept.cpu * 4,
        "spinning used {:?} of CPU, sleeping {:?}",
        spun.cpu,
        slept.cpu
    );
    assert!(slept.cpu < Duration::from_millis(100), "{:?}", slept.cpu);
    let echoed = run(&rt, "fixture_echo", b"hello", JobLimits::default()).await;
    assert!(echoed.cpu > Duration::ZERO, "every run is charged something");
    assert!(echoed.memory_peak_bytes > 0);
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_limit() {
    let rt = runtime();
    let limits = JobLimits {
        memory_bytes: 64 << 20,
        ..JobLimits::default()
    };
    let report = run(&rt, "fixture_hog", b"", limits).await;
    match failure(&report) {
        JobFailure::MemoryLimit {
            requested_bytes,
            limit_bytes,
        } => {
            assert_eq!(*limit_bytes, 64 << 20);
            assert!(*requested_bytes > 64 << 20);
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
    assert!(report.memory_peak_bytes <= 64 << 20);
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn flooding_stdout_truncates_the_log_but_the_job_succeeds() {
    let rt = runtime();
    let limits = JobLimits {
        log_bytes: 64 << 10,
        ..JobLimits::default()
    };
    let report = run(&rt, "fixture_flood", b"16", limits).await;
    assert_eq!(report.outcome.as_deref().unwrap(), b"flooded");
    assert!(
        report.log_dropped_bytes >= 16 << 20,
        "dropped {}",
        report.log_dropped_bytes
    );
    let log = log_text(&report);
    assert!(
        log.len() < (64 << 10) + 200,
        "log is bounded: {}",
        log.len()
    );
    assert!(
        log.trim_end().ends_with("past the 65536-byte limit"),
        "{}",
        &log[log.len() - 200..]
    );
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn an_oversized_output_is_refused() {
    let rt = runtime();
    let report = run(&rt, "fixture_bigout", b"32", JobLimits::default()).await;
    assert_eq!(
        failure(&report),
        &JobFailure::OutputTooLarge {
            size_bytes: 32 << 20,
            limit_bytes: 16 << 20
        }
    );
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn an_oversized_checkpoint_stops_the_job() {
    let rt = runtime();
    let limits = JobLimits {
        checkpoint_bytes: 8,
        ..JobLimits::default()
    };
    let report = run(&rt, "primes", br#"{"limit": 1000000}"#, limits).await;
    assert_eq!(failure(&report).code(), "checkpoint_too_large");
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn invalid_modules_are_refused_with_their_own_codes() {
    let rt = runtime();
    let garbage = rt.load(b"this is not wasm at all").await.unwrap_err();
    assert_eq!(garbage.code(), "module_invalid");

    // The smallest valid core module: just the preamble.
    let core = rt.load(b"\0asm\x01\0\0\0").await.unwrap_err();
    assert_eq!(core.code(), "module_invalid");
    assert!(
        core.to_string().contains("core WebAssembly module"),
        "{core}"
    );

    // A component header followed by junk.
    let mut broken = b"\0asm\x0d\0\x01\0".to_vec();
    broken.extend_from_slice(&[0xff; 32]);
    assert_eq!(rt.load(&broken).await.unwrap_err().code(), "module_invalid");

    let wrong = rt.load(&guest("fixture_wrong_world")).await.unwrap_err();
    assert_eq!(wrong.code(), "module_wrong_world");
    assert!(wrong.to_string().contains("run"), "{wrong}");
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn compiled_modules_are_cached_on_disk_across_runtimes() {
    let dir = tempfile::tempdir().unwrap();
    let on_disk = RuntimeConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..config(2)
    };
    let wasm = guest("fixture_echo");
    let digest = Digest::of(&wasm);
    {
        let rt = Runtime::new(on_disk.clone()).unwrap();
        assert!(rt.cached(&digest).await.is_none());
        rt.load(&wasm).await.unwrap();
    }
    // A fresh runtime (say, after a restart) finds it without the bytes.
    let rt = Runtime::new(on_disk).unwrap();
    let module = rt.cached(&digest).await.expect("found in the disk cache");
    assert_eq!(module.digest(), digest);
    assert_eq!(
        rt.run_input(&module, b"hi".to_vec()).await.outcome.unwrap(),
        b"hi"
    );

    // A corrupted artifact is discarded, not trusted.
    let compiled: Vec<_> = walk(dir.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
        .collect();
    assert_eq!(compiled.len(), 1);
    std::fs::write(&compiled[0], b"corrupt").unwrap();
    let rt = Runtime::new(RuntimeConfig {
        data_dir: Some(dir.path().to_path_buf()),
        ..config(2)
    })
    .unwrap();
    assert!(rt.cached(&digest).await.is_none());
    assert!(!compiled[0].exists(), "the corrupt artifact was removed");
    rt.load(&wasm).await.unwrap();
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_jobs_than_slots_wait_for_a_slot() {
    let rt = Runtime::new(config(2)).unwrap();
    let module = load(&rt, "fixture_echo").await;
    let jobs = (0..50u32).map(|i| {
        let (rt, module) = (rt.clone(), module.clone());
        tokio::spawn(async move { rt.run_input(&module, i.to_le_bytes().to_vec()).await })
    });
    for (i, job) in jobs.enumerate() {
        let report = job.await.unwrap();
        assert_eq!(report.outcome.unwrap(), (i as u32).to_le_bytes());
    }
}

/// A CPU-bound job must not monopolize its thread: on a single-threaded
/// runtime, another task keeps running while the job spins. Without the
/// epoch yield (in-thread) or the sandbox process running the job, the
/// ticker below could not run at all until the job ended.
#[tokio::test(flavor = "current_thread")]
async fn a_spinning_job_yields_to_other_tasks() {
    let rt = runtime();
    let module = load(&rt, "fixture_spin").await;
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let ticker = {
        let ticks = ticks.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                ticks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    let request = JobRequest {
        limits: JobLimits {
            timeout_ms: 500,
            ..JobLimits::default()
        },
        ..JobRequest::default()
    };
    let report = rt.run(&module, request).await;
    ticker.abort();
    assert_eq!(failure(&report).code(), "timeout");
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        ticks >= 10,
        "the other task ran only {ticks} times during a 500 ms job"
    );
}
