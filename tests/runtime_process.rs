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
