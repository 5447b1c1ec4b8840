//! End-to-end tests of the `cohort` binary's local commands: `exec` on every
//! example and fixture (exit codes, stdout, stderr) and a small `demo` (which
//! starts a 3-node local cluster of its own).

mod support;

use support::{cohort, guest};

fn exec(module: &str, extra: &[&str], stdin: &[u8]) -> (i32, Vec<u8>, String) {
    let path = guest(module);
    let mut args = vec!["exec", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = cohort(&args, stdin);
    (
        out.status.code().expect("exited normally"),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn exec_runs_a_job_from_a_file_and_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.json");
    std::fs::write(&input, br#"{"limit": 100000}"#).unwrap();
    let (code, stdout, stderr) = exec("primes", &["--input", input.to_str().unwrap()], b"");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, br#"{"limit":100000,"count":9592}"#);
    assert!(stderr.contains("[cohort] ok"), "{stderr}");
    // What it cost: the CPU its run used, never more than it took.
    let ok = stderr
        .lines()
        .find(|l| l.starts_with("[cohort] ok"))
        .unwrap();
    let number_before = |unit: &str| -> f64 {
        let head = &ok[..ok.find(unit).unwrap_or_else(|| panic!("{unit} in {ok}"))];
        head.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let (took, cpu) = (number_before(" ms, CPU"), number_before(" ms, peak"));
    assert!(cpu > 0.0 && cpu <= took + 1.0, "{ok}");

    // The same job in a sandbox process: the same output, and its progress
    // relayed to this process's stderr.
    let (code, stdout, stderr) = exec(
        "primes",
        &["--input", input.to_str().unwrap(), "--isolation", "process"],
        b"",
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, br#"{"limit":100000,"count":9592}"#);
    assert!(stderr.contains("[cohort] ok"), "{stderr}");

    let (code, stdout, _) = exec("wordcount", &["-i", "-"], b"to be or not to be");
    assert_eq!(code, 0);
    let counts: serde_json::Value = serde_json::from_slice(&stdout).unwrap();
    assert_eq!(counts["words"], 6);
}

/// Compiled modules are cached in the user's cache directory by default:
/// a second run loads the artifact, a damaged one is compiled again, and
/// a directory others may write to is not used.
#[test]
fn exec_caches_compiled_modules_per_user_and_recovers_from_a_damaged_entry() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let path = guest("wordcount");
        let mut args = vec!["exec", path.to_str().unwrap(), "-i", "-"];
        args.extend_from_slice(extra);
        let out = support::run_bounded(
            std::process::Command::new(env!("CARGO_BIN_EXE_cohort"))
                .args(&args)
                .env_remove("COHORT_CACHE_DIR")
                .env_remove("XDG_CACHE_HOME")
                .env("HOME", home.path()),
            b"to be or not to be",
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{stderr}");
        let counts: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(counts["words"], 6);
        stderr
    };
    let cache = home.path().join(".cache/cohort");
    let artifacts = || -> Vec<std::path::PathBuf> {
        let compiled = cache.join("compiled");
        let Ok(dirs) = std::fs::read_dir(compiled) else {
            return Vec::new();
        };
        dirs.flat_map(|d| std::fs::read_dir(d.unwrap().path()).unwrap())
            .map(|f| f.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "cwasm"))
            .collect()
    };

    run(&[]);
    let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the cache directory is the user's alone");
    let [artifact] = artifacts().try_into().expect("one compiled module");
    let whole = std::fs::read(&artifact).unwrap();

    // A damaged entry (one byte flipped) is compiled again and replaced.
    let mut damaged = whole.clone();
    damaged[whole.len() / 2] ^= 0xff;
    std::fs::write(&artifact, &damaged).unwrap();
    run(&[]);
    assert_eq!(std::fs::read(&artifact).unwrap(), whole);
    // Cut short: the same.
    std::fs::write(&artifact, &whole[..whole.len() / 3]).unwrap();
    run(&[]);
    assert_eq!(std::fs::read(&artifact).unwrap(), whole);

    // `--no-cache` neither reads nor writes it.
    std::fs::remove_file(&artifact).unwrap();
    run(&["--no-cache"]);
    assert!(artifacts().is_empty());

    // A directory others may write to is refused, with a warning.
    let shared = home.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let stderr = run(&["--cache-dir", shared.to_str().unwrap()]);
    assert!(stderr.contains("not caching compiled modules"), "{stderr}");
    assert!(stderr.contains("others may write to it"), "{stderr}");
    assert!(!shared.join("compiled").exists());
}

#[test]
fn exec_saves_and_resumes_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = dir.path().join("primes.ckpt");
    let (code, _, stderr) = exec(
        "primes",
        &["-i", "-", "--save-checkpoint", checkpoint.to_str().unwrap()],
        br#"{"limit": 500000}"#,
    );
    assert_eq!(code, 0, "{stderr}");
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&checkpoint).unwrap()).unwrap();
    assert_eq!(saved["next"], 500000);

    // Resuming from a finished checkpoint does no work and keeps its count.
    std::fs::write(
        &checkpoint,
        br#"{"limit": 500000, "next": 500000, "count": 7}"#,
    )
    .unwrap();
    let (code, stdout, stderr) = exec(
        "primes",
        &["-i", "-", "--resume", checkpoint.to_str().unwrap()],
        br#"{"limit": 500000}"#,
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, br#"{"limit":500000,"count":7}"#);
    assert!(stderr.contains("resuming at 500000"), "{stderr}");
}

#[test]
fn exec_exit_codes_tell_how_the_job_ended() {
    // (module, extra args, stdin, expected exit code, expected in stderr)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [u8], i32, &'a str);
    let cases: &[Case] = &[
        (
            "wordcount",
            &["-i", "-"],
            &[0xff, 0xfe],
            1,
            "error[job_error]",
        ),
        ("fixture_trap", &[], b"", 3, "error[trap]"),
        (
            "fixture_trap",
            &["--isolation", "process"],
            b"",
            3,
            "error[trap]",
        ),
        (
            "fixture_spin",
            &["--timeout", "300ms", "--isolation", "process"],
            b"",
            4,
            "error[timeout]",
        ),
        (
            "fixture_spin",
            &["--timeout", "300ms"],
            b"",
            4,
            "error[timeout]",
        ),
        (
            "fixture_hog",
            &["--memory", "32MiB"],
            b"",
            4,
            "error[memory_limit]",
        ),
        (
            "fixture_bigout",
            &["-i", "-"],
            b"20",
            4,
            "error[output_too_large]",
        ),
        ("fixture_wrong_world", &[], b"", 2, "[module_wrong_world]"),
        (
            "fixture_echo",
            &["--memory", "9GiB"],
            b"",
            2,
            "memory_bytes must be between",
        ),
        (
            "fixture_echo",
            &["--timeout", "soon"],
            b"",
            2,
            "not a duration",
        ),
    ];
    for (module, args, stdin, code, needle) in cases {
        let (got, stdout, stderr) = exec(module, args, stdin);
        assert_eq!(got, *code, "{module} {args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{module} {args:?}: expected `{needle}` in {stderr}"
        );
        assert!(stdout.is_empty(), "{module}: no output on failure");
    }
}

#[test]
fn exec_refuses_files_that_are_not_job_components() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"definitely not wasm").unwrap();
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0").unwrap();
    for (path, needle) in [
        (garbage.to_str().unwrap(), "[module_invalid]"),
        (core.to_str().unwrap(), "core WebAssembly module"),
        ("/nonexistent/job.wasm", "cannot read /nonexistent/job.wasm"),
    ] {
        let out = cohort(&["exec", path], b"");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert!(stderr.contains(needle), "{path}: {stderr}");
    }
}

#[test]
fn exec_bounds_a_flood_of_output_in_the_log() {
    let (code, stdout, stderr) = exec("fixture_flood", &["-i", "-", "--log-limit", "64KiB"], b"8");
    assert_eq!(code, 0, "{}", &stderr[stderr.len().saturating_sub(500)..]);
    assert_eq!(stdout, b"flooded");
    assert!(
        stderr.len() < 128 << 10,
        "stderr is bounded: {} bytes",
        stderr.len()
    );
    assert!(
        stderr.contains("log truncated"),
        "{}",
        &stderr[stderr.len() - 300..]
    );
}

#[test]
fn demo_renders_a_picture_from_tile_jobs_while_the_master_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("m.png");
    let run = cohort(
        &[
            "demo",
            "--width",
            "200",
            "--height",
            "120",
            "--tile",
            "50",
            "--iterations",
            "100",
            "--out",
            out.to_str().unwrap(),
        ],
        b"",
    );
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("3-node cluster"), "{stdout}");
    assert!(stdout.contains("12 jobs"), "{stdout}");
    assert!(stdout.contains("run by"), "{stdout}");
    // The chaos: the master's node is killed and another takes over.
    assert!(stdout.contains("chaos: killed demo-1"), "{stdout}");
    assert!(
        stdout.contains("took the master over (epoch 2)"),
        "{stdout}"
    );
    let reader = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&out).unwrap()))
        .read_info()
        .unwrap();
    assert_eq!((reader.info().width, reader.info().height), (200, 120));
}
