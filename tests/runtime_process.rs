//! Every example and every misbehaving fixture again, each job in a sandbox
//! process (`Isolation::Process`), then what only sandbox processes can
//! get wrong: a process that dies mid-job, one that speaks garbage, and
//! one whose node is gone.

mod support;

use support::{OBSERVE, eventually_async};

const ISOLATION: Isolation = Isolation::Process;

include!("runtime/cases.rs");

/// The pids of this process's live children started as `program`
/// (other tests of this binary run their own sandboxes meanwhile).
fn sandbox_children(program: &std::path::Path) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces, so split after it.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if fields.get(1) == Some(&me.as_str())
            && fields.first() != Some(&"Z")
            && cmdline.split(|b| *b == 0).next() == Some(program.as_os_str().as_encoded_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

/// Whether `pid` has exited: gone, or a zombie nobody reaped yet whose
/// threads are all gone too. (A killed process's main thread shows `Z`
/// while its other threads are still exiting, and until they are,
/// `waitpid` does not report it.)
fn exited(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            let threads =
                std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count());
            zombie && threads <= 1
        }
    }
}

/// Waits (bounded) until process `pid` has [`exited`].
async fn wait_exited(what: &str, pid: i32) {
    eventually_async(what, OBSERVE, async || {
        if exited(pid) {
            Ok(())
        } else {
            Err(format!("process {pid} still runs"))
        }
    })
    .await
}

/// A one-slot runtime whose sandboxes run `cohort` as `<dir>/<name>` (a
/// symlink), so that a test finds its own sandbox among the others this
/// binary starts (see [`sandbox_children`]); `config` may change the rest.
fn named_runtime(
    dir: &tempfile::TempDir,
    name: &str,
    config: RuntimeConfig,
) -> (std::path::PathBuf, Runtime) {
    let program = dir.path().join(name);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cohort"), &program).unwrap();
    let rt = Runtime::new(RuntimeConfig {
        sandbox_program: Some(program.clone()),
        ..config
    })
    .unwrap();
    (program, rt)
}

/// The one sandbox process started as `program`.
fn the_sandbox(program: &std::path::Path) -> i32 {
    let pids = sandbox_children(program);
    assert_eq!(pids.len(), 1, "one slot, one sandbox: {pids:?}");
    pids[0]
}

/// Sends SIGKILL to `pid`, a child of this process.
fn sigkill(pid: i32) {
    // SAFETY: kill has no memory preconditions; the pid is our own child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
}

/// Runs the echo fixture on `input` and checks it answered.
async fn assert_echoes(rt: &Runtime, module: &Module, input: &[u8]) {
    let report = rt.run_input(module, input.to_vec()).await;
    assert_eq!(report.outcome.unwrap(), input);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_killed_mid_job_fails_that_attempt_only() {
    let dir = tempfile::tempdir().unwrap();
    let (program, rt) = named_runtime(&dir, "cohort-killed", config(1));
    let module = load(&rt, "fixture_spin").await;
    let spinning = {
        let (rt, module) = (rt.clone(), module.clone());
        tokio::spawn(async move { rt.run_input(&module, Vec::new()).await })
    };
    eventually_async("the job's sandbox process", OBSERVE, async || {
        if sandbox_children(&program).is_empty() {
            Err("none started yet")
        } else {
            Ok(())
        }
    })
    .await;
    sigkill(the_sandbox(&program));
    let report = spinning.await.unwrap();
    match failure(&report) {
        JobFailure::Internal { message } => {
            assert!(message.contains("sandbox process"), "{message}");
            assert!(message.contains("signal: 9"), "{message}");
        }
        other => panic!("expected an internal failure, got {other:?}"),
    }
    // The next job gets a fresh sandbox.
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn a_sandbox_that_sends_garbage_fails_only_its_attempt() {
    let dir = tempfile::tempdir().unwrap();
    // Reads the request's length, then answers with a frame claiming 4 GiB.
    let liar = dir.path().join("liar.sh");
    std::fs::write(
        &liar,
        "#!/bin/sh\nhead -c 4 >/dev/null\nprintf '\\377\\377\\377\\377'\nsleep 30\n",
    )
    .unwrap();
    std::fs::set_permissions(&liar, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let rt = Runtime::new(RuntimeConfig {
        sandbox_program: Some(liar),
        ..config(1)
    })
    .unwrap();
    let module = load(&rt, "fixture_echo").await;
    let report = rt.run_input(&module, b"hi".to_vec()).await;
    match failure(&report) {
        JobFailure::Internal { message } => {
            assert!(message.contains("frame"), "{message}")
        }
        other => panic!("expected an internal failure, got {other:?}"),
    }
    assert!(
        report.duration < Duration::from_secs(10),
        "{:?}",
        report.duration
    );
}

#[tokio::test]
async fn a_sandbox_whose_node_is_gone_exits() {
    let dir = tempfile::tempdir().unwrap();
    // A stand-in node: a shell that starts a sandbox with stdin held open
    // (so only the watchdog can end it), prints its pid, and waits. It is
    // killed at once, often before the sandbox has started: the sandbox
    // must notice a parent that died before it could look.
    let script = format!(
        "sleep 60 | {} sandbox --data-dir {} --memory-bytes-max 1048576 --parent-pid $$ & echo $!; wait",
        env!("CARGO_BIN_EXE_cohort"),
        dir.path().display()
    );
    let mut node = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(node.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let sandbox: i32 = line.trim().parse().unwrap();
    assert!(!exited(sandbox));
    node.kill().unwrap();
    node.wait().unwrap();
    wait_exited("the orphaned sandbox to exit", sandbox).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sandbox_that_died_is_replaced_before_a_job_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let (program, rt) = named_runtime(&dir, "cohort-idle", config(1));
    let module = load(&rt, "fixture_echo").await;
    assert_echoes(&rt, &module, b"one").await;
    let idle = the_sandbox(&program);
    sigkill(idle);
    wait_exited("the killed idle sandbox to exit", idle).await;
    assert_echoes(&rt, &module, b"two").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_idle_past_its_limit_is_stopped_and_the_next_job_starts_another() {
    let dir = tempfile::tempdir().unwrap();
    let idle_briefly = RuntimeConfig {
        sandbox_idle_max: Duration::from_millis(200),
        ..config(1)
    };
    let (program, rt) = named_runtime(&dir, "cohort-reaped", idle_briefly);
    let module = load(&rt, "fixture_echo").await;
    assert_echoes(&rt, &module, b"one").await;
    let idle = the_sandbox(&program);
    wait_exited("the idle sandbox to be stopped", idle).await;
    assert_echoes(&rt, &module, b"two").await;
}

// ---- Blobs in a sandbox process: the child writes outputs into the
// attempt's blob space and the node takes the files back, unverified (its
// store hashes them again). The full set of blob cases runs in-thread
// (`tests/runtime.rs`); these are the ones the process boundary can break.

include!("runtime/blobs.rs");

#[tokio::test]
async fn a_job_built_for_cohort_job_0_1_0_still_runs_in_a_sandbox() {
    let rt = runtime();
    let report = run(&rt, "fixture_legacy_job", b"old news", JobLimits::default()).await;
    assert_eq!(report.outcome.as_deref().unwrap(), b"legacy:old news");
    assert!(
        log_text(&report).contains("legacy job: 8 bytes in"),
        "{}",
        log_text(&report)
    );
}

#[tokio::test]
async fn a_sandboxed_job_copies_its_input_into_an_output_the_node_takes() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let data = pattern(1, (3 << 20) + 17);
    let offset = (1 << 20) + 3;
    let steps = json!([
        {"op": "list"},
        {"op": "copy", "from": "input", "to": "copy.bin"},
        {"op": "read", "from": "input", "offset": offset},
        {"op": "read", "from": "nope"},
    ]);
    let inputs = vec![dirs.input("input", &data)];
    let report = run_blobs(
        &rt,
        dirs.blobs(inputs, SPACE_BYTES_MAX),
        steps,
        JobLimits::default(),
    )
    .await;
    let results = step_results(&report);
    let digest = hex(&sha256(&data));
    assert_eq!(
        results[0],
        json!({"inputs": [{"name": "input", "digest": digest, "size": data.len()}]})
    );
    assert_eq!(results[1], json!({"bytes": data.len(), "sha256": digest}));
    let tail = &data[offset..];
    assert_eq!(
        results[2],
        json!({"bytes": tail.len(), "sha256": hex(&sha256(tail))})
    );
    let refused = results[3]["error"].as_str().unwrap_or_default();
    assert!(
        refused.contains(r#"no input blob named "nope""#),
        "{}",
        results[3]
    );

    assert_eq!(report.outputs.len(), 1);
    let output = &report.outputs[0];
    assert_eq!(output.name, "copy.bin");
    assert_eq!(
        (output.size, output.digest),
        (data.len() as u64, sha256(&data))
    );
    assert!(
        !output.verified,
        "a sandbox's word: the store hashes it again"
    );
    assert_eq!(output.file.parent(), Some(dirs.space.path()));
    assert!(std::fs::read(&output.file).unwrap() == data);
    assert_eq!(dirs.space_files().len(), 1);
    drop(report);
    assert_eq!(
        dirs.space_files(),
        Vec::<PathBuf>::new(),
        "removed unless stored"
    );
}

#[tokio::test]
async fn a_sandboxed_job_writing_past_the_output_ceiling_fails() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let limit = 1 << 20;
    let steps = json!([
        {"op": "write", "to": "first", "bytes": 512 << 10},
        {"op": "write", "to": "second", "bytes": 600 << 10},
    ]);
    let report = run_blobs(
        &rt,
        dirs.blobs(Vec::new(), limit),
        steps,
        JobLimits::default(),
    )
    .await;
    match failure(&report) {
        JobFailure::OutputTooLarge {
            size_bytes,
            limit_bytes,
        } => {
            assert_eq!(*limit_bytes, limit);
            assert!(*size_bytes > limit, "{size_bytes}");
        }
        other => panic!("expected output_too_large, got {other:?}"),
    }
    assert!(report.outputs.is_empty());
    assert_eq!(dirs.space_files(), Vec::<PathBuf>::new(), "nothing left");
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn a_sandboxed_job_that_fails_after_writing_outputs_leaves_none() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let data = pattern(3, 2 << 20);
    let steps = json!([
        {"op": "copy", "from": "input", "to": "half-done"},
        {"op": "write", "to": "more", "bytes": 3 << 20},
        {"op": "fail", "code": "on_purpose"},
    ]);
    let inputs = vec![dirs.input("input", &data)];
    let report = run_blobs(
        &rt,
        dirs.blobs(inputs, SPACE_BYTES_MAX),
        steps,
        JobLimits::default(),
    )
    .await;
    assert!(
        matches!(failure(&report), JobFailure::JobError { code, .. } if code == "on_purpose"),
        "{:?}",
        failure(&report)
    );
    assert!(report.outputs.is_empty());
    assert_eq!(
        dirs.space_files(),
        Vec::<PathBuf>::new(),
        "the child removed them"
    );
}
