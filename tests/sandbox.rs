//! Proof of the job sandbox: a job module cannot read or write host files,
//! open sockets, read the host's environment, arguments or stdin, or spawn
//! anything, whatever WASI calls it tries.
//!
//! The `fixture_escape` job tries each of these through std and again
//! through raw WASI 0.2 calls (the host links all of WASI 0.2, sockets and
//! filesystem included, so a module importing them loads: the sandbox is the
//! per-job WASI context, and that is what these tests check). Each test
//! plants something for the job to find (a secret file, a secret environment
//! variable, listening TCP and UDP sockets, a place to write) and then looks
//! from the outside: the report must say denied or empty for every attempt,
//! the secrets must appear in neither the output nor the log, no file may
//! have appeared, and the listeners must have received nothing. The same
//! module runs in-process through `Runtime` (what a worker node does) and
//! through the `cohort exec` binary, which has its own environment,
//! working directory and stdin.
//!
//! A check that cannot fail proves nothing, so each was seen failing: with
//! the job's `WasiCtxBuilder` given a preopened `/` or `.`, `inherit_env`,
//! `inherit_args`, `inherit_stdin`, or `inherit_network` with
//! `allow_tcp`/`allow_udp`/`allow_ip_name_lookup`, every attempt concerned
//! succeeds (std and raw alike) and these tests fail, on the report and
//! again on the outside evidence (secret in the output, file written,
//! connection or datagram received). Spawning cannot be granted: WASI 0.2
//! has no interface for processes or threads. The listeners are also shown
//! to work after the job, so their silence means something.

use cohort::runtime::{JobLimits, JobReport, JobRequest, Runtime, RuntimeConfig};
use serde_json::{Value, json};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The variable planted in the test process's environment (and so in every
/// `cohort exec` it starts).
const ENV_NAME: &str = "COHORT_SANDBOX_TEST_SECRET";
/// The job's own wall-clock limit: a capability wrongly granted could make an
/// attempt block (say, on a connection), and the test must still end.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);
/// Backstop for the `cohort exec` process, which its `--timeout` bounds.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);

/// What a sandboxed job may see of each attempt.
enum Expect {
    /// The call failed.
    Denied,
    /// The call succeeded and returned exactly this: nothing of the host.
    Got(Value),
}

/// Every attempt the fixture makes, and the only acceptable outcome of each.
fn expected() -> Vec<(&'static str, Expect)> {
    use Expect::{Denied, Got};
    vec![
        ("read_secret_file", Denied),
        ("read_etc_passwd", Denied),
        ("list_root", Denied),
        ("list_cwd", Denied),
        ("write_absolute", Denied),
        ("write_relative", Denied),
        ("env_var", Denied),
        ("env_vars", Got(json!([]))),
        ("args", Got(json!([]))),
        ("stdin", Got(json!(""))),
        ("tcp_connect", Denied),
        ("udp_send", Denied),
        ("dns_lookup", Denied),
        ("spawn_process", Denied),
        ("spawn_thread", Denied),
        ("raw_preopens", Got(json!([]))),
        ("raw_environment", Got(json!([]))),
        ("raw_arguments", Got(json!([]))),
        ("raw_initial_cwd", Got(Value::Null)),
        // A handle to the instance's network is always handed out; what it
        // is good for (connecting, binding, resolving) is checked below it.
        ("raw_instance_network", Got(json!("a network handle"))),
        ("raw_tcp_connect", Denied),
        ("raw_udp_send", Denied),
        ("raw_ip_name_lookup", Denied),
    ]
}

fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The secret value of [`ENV_NAME`], planted once per test process.
fn planted_env_secret() -> &'static str {
    static SECRET: OnceLock<String> = OnceLock::new();
    SECRET.get_or_init(|| {
        let secret = format!("env-secret-{}", random_hex());
        // SAFETY: every test in this file calls this before doing anything
        // else (before any thread, job or process of its own), and the
        // others wait on this lock meanwhile: no thread of this process reads
        // the environment while it changes.
        unsafe { std::env::set_var(ENV_NAME, &secret) };
        secret
    })
}

/// Everything one run plants for the job to find, and how to look for it.
struct Bait {
    dir: tempfile::TempDir,
    file_secret: String,
    env_secret: &'static str,
    secret_file: PathBuf,
    write_path: PathBuf,
    relative_path: String,
    tcp: TcpListener,
    udp: UdpSocket,
}

impl Bait {
    fn plant() -> Self {
        let env_secret = planted_env_secret();
        let dir = tempfile::tempdir().unwrap();
        let file_secret = format!("file-secret-{}", random_hex());
        let secret_file = dir.path().join("secret.txt");
        std::fs::write(&secret_file, &file_secret).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        Self {
            write_path: dir.path().join("escaped.txt"),
            relative_path: format!("cohort-sandbox-escaped-{}.txt", random_hex()),
            dir,
            file_secret,
            env_secret,
            secret_file,
            tcp,
            udp,
        }
    }

    fn input(&self) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "secret_file": self.secret_file,
            "write_path": self.write_path,
            "relative_path": self.relative_path,
            "env_name": ENV_NAME,
            "tcp_port": self.tcp.local_addr().unwrap().port(),
            "udp_port": self.udp.local_addr().unwrap().port(),
        }))
        .unwrap()
    }

    /// Checks the job's report and log, and everything it could have
    /// touched. `cwds` are the host working directories a relative write
    /// could have landed in (besides `/`, where it lands when the host
    /// preopens the root).
    fn assert_nothing_escaped(&self, output: &[u8], log: &str, cwds: &[&Path]) {
        let report: Value = serde_json::from_slice(output).unwrap_or_else(|e| {
            panic!(
                "the report is not JSON ({e}): {}",
                String::from_utf8_lossy(output)
            )
        });
        let report = report.as_object().expect("the report is an object");
        let expected = expected();
        let mut attempts: Vec<&str> = report.keys().map(String::as_str).collect();
        let mut wanted: Vec<&str> = expected.iter().map(|(name, _)| *name).collect();
        attempts.sort_unstable();
        wanted.sort_unstable();
        assert_eq!(attempts, wanted, "the fixture's attempts changed");
        for (name, expect) in &expected {
            let outcome = &report[*name];
            match expect {
                Expect::Denied => assert!(
                    outcome["denied"].is_string(),
                    "{name} must be denied, got {outcome}"
                ),
                Expect::Got(value) => assert_eq!(
                    outcome,
                    &json!({ "allowed": value }),
                    "{name} must get nothing of the host"
                ),
            }
        }

        let output = String::from_utf8_lossy(output);
        for secret in [self.file_secret.as_str(), self.env_secret] {
            assert!(
                !output.contains(secret),
                "a secret leaked into the output: {output}"
            );
            assert!(!log.contains(secret), "a secret leaked into the log: {log}");
        }
        // The log carries every outcome, so its silence about the secrets is
        // not just an empty log.
        assert!(log.contains("read_secret_file: "), "{log}");

        assert!(
            !self.write_path.exists(),
            "the job wrote {:?}",
            self.write_path
        );
        for cwd in cwds.iter().copied().chain([Path::new("/")]) {
            let relative = cwd.join(&self.relative_path);
            assert!(!relative.exists(), "the job wrote {relative:?}");
        }
        assert_eq!(
            std::fs::read_dir(self.dir.path()).unwrap().count(),
            1,
            "the job left something beside the secret file"
        );

        // Loopback connections and datagrams are queued by the time the
        // sender's call returns, so anything the job sent is already here.
        match self.tcp.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("the TCP listener got a connection: {other:?}"),
        }
        let mut datagram = [0u8; 64];
        match self.udp.recv_from(&mut datagram) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => panic!("the UDP socket got a datagram: {other:?}"),
        }
        self.assert_listeners_work();
    }

    /// The listeners' silence only counts if they can hear.
    fn assert_listeners_work(&self) {
        let mut client = TcpStream::connect(self.tcp.local_addr().unwrap()).unwrap();
        client.write_all(b"ping").unwrap();
        let (mut accepted, _) = self.tcp.accept().expect("the TCP listener accepts");
        accepted.set_nonblocking(false).unwrap();
        let mut ping = [0u8; 4];
        accepted.read_exact(&mut ping).unwrap();
        assert_eq!(&ping, b"ping");

        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender
            .send_to(b"ping", self.udp.local_addr().unwrap())
            .unwrap();
        let mut datagram = [0u8; 64];
        let (len, _) = self
            .udp
            .recv_from(&mut datagram)
            .expect("the UDP socket receives");
        assert_eq!(&datagram[..len], b"ping");
    }
}

fn escape_module() -> Vec<u8> {
    let path = format!("{}/fixture_escape.wasm", env!("COHORT_GUESTS_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn limits() -> JobLimits {
    JobLimits {
        timeout_ms: JOB_TIMEOUT.as_millis() as u64,
        ..JobLimits::default()
    }
}

#[tokio::test]
async fn a_job_reaches_nothing_outside_its_sandbox() {
    let bait = Bait::plant();
    assert_eq!(std::env::var(ENV_NAME).unwrap(), bait.env_secret);
    let runtime = Runtime::new(RuntimeConfig {
        concurrent_jobs: 2,
        ..RuntimeConfig::default()
    })
    .unwrap();
    let module = runtime.load(&escape_module()).await.unwrap();
    let report: JobReport = runtime
        .run(
            &module,
            JobRequest {
                input: bait.input(),
                limits: limits(),
                ..JobRequest::default()
            },
        )
        .await;
    let log = String::from_utf8_lossy(&report.log).into_owned();
    let output = report
        .outcome
        .unwrap_or_else(|failure| panic!("the job failed: {failure}\nlog:\n{log}"));
    println!("{}", String::from_utf8_lossy(&output));
    let cwd = std::env::current_dir().unwrap();
    bait.assert_nothing_escaped(&output, &log, &[&cwd]);
}

/// Runs `cohort` with a secret in its environment and on its stdin, in a
/// working directory of its own; bounded by the job's `--timeout`, and by
/// [`PROCESS_TIMEOUT`] should that fail.
fn cohort_exec(module: &Path, input: &Path, cwd: &Path, env_secret: &str, stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cohort"))
        .arg("exec")
        .arg(module)
        .arg("--input")
        .arg(input)
        .args(["--timeout", &format!("{}s", JOB_TIMEOUT.as_secs())])
        .env(ENV_NAME, env_secret)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cohort starts");
    let mut pipe = child.stdin.take().unwrap();
    // The job must not read this; a closed pipe after it is fine either way.
    let _ = pipe.write_all(stdin);
    drop(pipe);
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    finished
        .recv_timeout(PROCESS_TIMEOUT)
        .expect("cohort exec finishes within its timeout")
        .unwrap()
}

#[test]
fn cohort_exec_gives_a_job_nothing_of_its_process() {
    let bait = Bait::plant();
    let workdir = tempfile::tempdir().unwrap();
    let input = workdir.path().join("input.json");
    std::fs::write(&input, bait.input()).unwrap();
    let module = workdir.path().join("escape.wasm");
    std::fs::write(&module, escape_module()).unwrap();
    let stdin_secret = format!("stdin-secret-{}", random_hex());

    let out = cohort_exec(
        &module,
        &input,
        workdir.path(),
        bait.env_secret,
        stdin_secret.as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    println!("{}", String::from_utf8_lossy(&out.stdout));
    let test_cwd = std::env::current_dir().unwrap();
    bait.assert_nothing_escaped(&out.stdout, &stderr, &[workdir.path(), &test_cwd]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains(&stdin_secret), "stdin leaked: {stdout}");
    assert!(!stderr.contains(&stdin_secret), "stdin leaked: {stderr}");
    let mut left: Vec<_> = std::fs::read_dir(workdir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["escape.wasm", "input.json"],
        "the job wrote into its cwd"
    );
}
