//! Helpers shared by the end-to-end tests: paths to the built guests, a
//! bounded runner for `cohort` commands, and real `cohort node` processes.

#![allow(dead_code)]

pub mod faults;
pub mod http;
pub mod text;

use cohort::api::types::{ClusterResponse, JobResponse, SubmitRequest};
use cohort::client::{ClientError, Node as Api};
use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// No test process may run longer than this.
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);
/// A node must print its address within this.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(60);

/// Longest a test waits for a node to report an event, write a line or
/// exit.
pub const EVENT_WAIT: Duration = Duration::from_secs(30);

/// Longest any single job in these tests may take to settle.
pub const SETTLE: Duration = Duration::from_secs(90);

/// Longest a state a test observes through the API (a metric, a job's
/// state, a schedule's tick, a DAG's progress) may take to show: a minute,
/// for a loaded 2-CPU machine where a master may move meanwhile.
pub const OBSERVE: Duration = Duration::from_secs(60);

/// How often [`eventually`] checks: short next to every bound above, long
/// enough that a check which reads journals or starts a process does not
/// keep a core busy.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Checks `check` every [`POLL_INTERVAL`] until it returns `Ok`, and
/// returns that value. `Err` says what the check saw instead; past
/// `timeout` the test fails with `what` it waited for, how long, and the
/// last thing seen.
pub fn eventually<T, S: Display>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, S>,
) -> T {
    let started = Instant::now();
    loop {
        let seen = match check() {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if started.elapsed() >= timeout {
            timed_out(what, timeout, started, seen);
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// [`eventually`] for a check that awaits (an API call); sleeps on the
/// async runtime between checks. (`check` returns a future rather than
/// being an `AsyncFnMut`: a future that names its type stays `Send` in a
/// spawned task.)
pub async fn eventually_async<T, S: Display, F: Future<Output = Result<T, S>>>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> F,
) -> T {
    let started = Instant::now();
    loop {
        let seen = match check().await {
            Ok(value) => return value,
            Err(seen) => seen,
        };
        if started.elapsed() >= timeout {
            timed_out(what, timeout, started, seen);
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

fn timed_out(what: &str, timeout: Duration, started: Instant, seen: impl Display) -> ! {
    let waited = started.elapsed();
    panic!("waited {waited:.1?} (bound {timeout:?}) for {what}; last seen: {seen}");
}

/// The async runtime a test drives its HTTP clients with.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Uploads the guest `name`; returns its digest.
pub async fn upload(client: &Api, name: &str) -> String {
    client
        .upload(std::fs::read(guest(name)).unwrap())
        .await
        .unwrap()
}

/// A submission of `module` with a text input and default settings.
pub fn job(module: &str, input: &str) -> SubmitRequest {
    SubmitRequest {
        module: module.into(),
        input: Some(input.into()),
        ..SubmitRequest::default()
    }
}

/// Polls jobs `ids` until one is running on one of `workers` with a
/// checkpoint saved and `also` holds for it (`also` sees every job polled);
/// returns that job. Fails the test past `within`.
///
/// Which worker a job lands on is the master's choice (whichever worker's
/// poll it answers first), so a test that kills "a worker running a
/// checkpointed job" names every worker it could kill.
pub async fn running_with_checkpoint(
    client: &Api,
    ids: &[u64],
    workers: &[&str],
    within: Duration,
    also: impl FnMut(&JobResponse) -> bool,
) -> JobResponse {
    let what = format!("a job running on one of {workers:?} with a checkpoint saved");
    // Each check's future calls `also`.
    let also = &std::cell::RefCell::new(also);
    eventually_async(&what, within, || async move {
        let mut states = Vec::new();
        for id in ids {
            let job = client.job(*id, 0).await.unwrap();
            let on_worker =
                (job.attempts.last()).is_some_and(|a| workers.contains(&a.worker.as_str()));
            let wanted = (also.borrow_mut())(&job);
            if job.state == "running" && on_worker && job.has_checkpoint && wanted {
                return Ok(job);
            }
            let last_worker = job.attempts.last().map(|a| a.worker.clone());
            // How each ended attempt ended, so a failure says why jobs
            // died rather than only that they did.
            let ended: Vec<String> = (job.attempts.iter())
                .filter_map(|a| {
                    let outcome = a.outcome.as_deref()?;
                    let message = a.message.as_deref().unwrap_or_default();
                    Some(format!(
                        "#{} on {}: {outcome} {message}",
                        a.number, a.worker
                    ))
                })
                .collect();
            states.push((job.id, job.state, last_worker, job.has_checkpoint, ended));
        }
        Err(format!(
            "(id, state, worker, checkpoint, ended attempts): {states:?}"
        ))
    })
    .await
}

/// Waits (bounded by [`SETTLE`]) until job `id` is no longer queued or
/// running; returns it.
pub async fn settle(client: &Api, id: u64) -> JobResponse {
    let started = Instant::now();
    eventually_async(&format!("job {id} to settle"), SETTLE, async || {
        // A long poll: answers as soon as the job changes.
        let job = retrying(started, || client.job(id, 5_000)).await;
        match job.state.as_str() {
            "queued" | "running" => Err(format!("{job:?}")),
            _ => Ok(job),
        }
    })
    .await
}

/// Runs `call` until it succeeds, retrying (within [`SETTLE`] of
/// `started`) while the cluster answers that it cannot serve yet (an error
/// the server calls retryable: `503`s are what a cluster says right after
/// a fault, and a client retries them). Any other error fails the test.
pub async fn retrying<T, F: std::future::Future<Output = Result<T, ClientError>>>(
    started: Instant,
    mut call: impl FnMut() -> F,
) -> T {
    let left = SETTLE.saturating_sub(started.elapsed());
    eventually_async("an answer that is not a retryable error", left, || {
        let answer = call();
        async move {
            match answer.await {
                Ok(value) => Ok(value),
                Err(error @ ClientError::Api { .. }) if error.retryable() => Err(error),
                Err(error) => panic!("{error}"),
            }
        }
    })
    .await
}

/// The value of the metric `name` (with its labels, if any) in the node's
/// `/metrics`; 0 when absent.
pub async fn metric(client: &Api, name: &str) -> u64 {
    metric_in(&metrics(client).await, name).unwrap_or(0)
}

/// [`metric`] of a metric that is not a whole number (seconds, say).
pub async fn metric_f64(client: &Api, name: &str) -> f64 {
    metric_in(&metrics(client).await, name).unwrap_or(0.0)
}

/// The value of the metric `name` in `/metrics` text, if it is there.
fn metric_in<T: std::str::FromStr>(text: &str, name: &str) -> Option<T> {
    (text.lines()).find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
}

/// The node's `/metrics` text.
pub async fn metrics(client: &Api) -> String {
    let (_, body) = client
        .call(
            hyper::Method::GET,
            "/metrics",
            "text/plain",
            Default::default(),
        )
        .await
        .unwrap();
    String::from_utf8_lossy(&body).into_owned()
}

/// Path of a guest component built by `host/build.rs`.
pub fn guest(name: &str) -> PathBuf {
    Path::new(env!("COHORT_GUESTS_DIR")).join(format!("{name}.wasm"))
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// A Python venv in `target/tmp/<name>` with `requirements` (pinned with
/// hashes) installed, made again when the pins change (the file's text is
/// kept beside it, as `.ci/install-toolchains` keeps it); returns its
/// directory.
pub fn pinned_venv(name: &str, requirements: &Path) -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let stamp = venv.join("requirements.stamp");
    let wanted = std::fs::read_to_string(requirements).unwrap();
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(&wanted) {
        let _ = std::fs::remove_dir_all(&venv);
        let install = |command: &mut Command| {
            let out = run_bounded(command, b"");
            assert!(
                out.status.success(),
                "{command:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        install(Command::new("python3").arg("-m").arg("venv").arg(&venv));
        install(
            Command::new(venv.join("bin/python"))
                .args(["-m", "pip", "install", "--quiet", "--require-hashes", "-r"])
                .arg(requirements),
        );
        std::fs::write(&stamp, &wanted).unwrap();
    }
    venv
}

/// Waits for `child`, killing it past `timeout`.
pub fn wait_bounded(child: &mut Child, timeout: Duration, what: &str) -> ExitStatus {
    let reaper = Reaper(child);
    eventually(&format!("{what} to exit"), timeout, || {
        reaper.0.try_wait().unwrap().ok_or("it still runs")
    })
}

/// Kills and reaps its child if dropped while the test panics: a process
/// that overran its bound does not outlive the test.
struct Reaper<'a>(&'a mut Child);

impl Drop for Reaper<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// A token with `scopes`, made through the node at `server` (`http://` or
/// `https://`) by proving the cluster key in `key`; retried while the
/// master comes up, for at most [`EVENT_WAIT`].
pub fn token_at(server: &str, key: &Path, scopes: &str) -> String {
    token_with(server, key, scopes, &[])
}

/// [`token_at`] with `extra` arguments to `cohort token create` (e.g.
/// `--namespace NAME`).
pub fn token_with(server: &str, key: &Path, scopes: &str, extra: &[&str]) -> String {
    eventually("a token", EVENT_WAIT, || {
        let mut args = vec![
            "token",
            "create",
            "--server",
            server,
            "--cluster-key",
            key.to_str().unwrap(),
            "--scope",
            scopes,
        ];
        args.extend(extra);
        let out = cohort(&args, b"");
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        let token = String::from_utf8(out.stdout).unwrap().trim().to_string();
        assert!(token.starts_with("cohort_"), "{token}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("checks no token"), "{stderr}");
        Ok(token)
    })
}

/// Runs `cohort` with `args` and `stdin`, killing it if it overruns.
/// `cohort exec` caches compiled modules under the build's own temporary
/// directory, never the user's cache.
pub fn cohort(args: &[&str], stdin: &[u8]) -> Output {
    cohort_with_env(args, &[], stdin)
}

/// [`cohort`] with the environment variables `env` set too.
pub fn cohort_with_env(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cohort"));
    command.args(args).env_remove("COHORT_CACHE_DIR").env(
        "XDG_CACHE_HOME",
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("xdg-cache"),
    );
    command.envs(env.iter().copied());
    run_bounded(&mut command, stdin)
}

/// Runs `command` with `stdin`, collecting its output; kills it (and fails
/// the test) past [`PROCESS_TIMEOUT`].
pub fn run_bounded(command: &mut Command, stdin: &[u8]) -> Output {
    let what = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    // Drain both pipes while waiting, or a chatty child blocks on a full pipe.
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let status = wait_bounded(&mut child, PROCESS_TIMEOUT, &what);
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Where the tests' nodes cache compiled code (inside `target/`).
pub const NODE_CACHE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/node-cache");

/// A `cohort node` process on loopback; killed when dropped.
pub struct Node {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread copying its stderr into `stderr`; it ends when every
    /// writer (the node, and any sandbox process it started) closed it.
    stderr_reader: std::thread::JoinHandle<()>,
}

impl Node {
    /// Starts a node on an ephemeral port with `data_dir` and `extra` flags.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Node {
        match Self::try_start(data_dir, extra) {
            Ok(node) => node,
            Err(stderr) => panic!("the node did not start:\n{stderr}"),
        }
    }

    /// Like [`start`](Self::start), but returns the node's stderr if it
    /// exits instead of serving.
    pub fn try_start(data_dir: &Path, extra: &[&str]) -> Result<Node, String> {
        Self::try_start_env(data_dir, extra, &[])
    }

    /// Like [`try_start`](Self::try_start), with `env` set in the node's
    /// environment.
    pub fn try_start_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Node, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cohort"))
            .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            // Every node of the test run compiles into one cache: each
            // module and the master are compiled once on the machine, not
            // once per node (a test's `env` may name another).
            .env("COHORT_CACHE_DIR", NODE_CACHE)
            .envs(env.iter().copied())
            // The default filter: what an operator sees, events included.
            .env_remove("COHORT_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cohort node starts");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(url) = line.split("listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        // Dropped (so killed, its stderr printed) if it never serves.
        let mut node = Node {
            child,
            url: String::new(),
            data_dir: data_dir.to_path_buf(),
            stderr,
            stderr_reader,
        };
        let served = eventually("the node to print its address", NODE_START_TIMEOUT, || {
            if let Ok(url) = rx.try_recv() {
                return Ok(Some(url));
            }
            match node.child.try_wait().unwrap() {
                Some(_exited) => Ok(None),
                None => Err("it printed none yet"),
            }
        });
        match served {
            Some(url) => {
                node.url = url;
                Ok(node)
            }
            None => Err(node.stderr_when_closed()),
        }
    }

    /// The node's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Its name: the last part of its data directory.
    pub fn name(&self) -> String {
        self.data_dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    }

    /// Everything the node wrote to stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// All the node wrote to stderr, once the pipe is closed (the node
    /// exited): waits (bounded) until the last of it has been read.
    fn stderr_when_closed(&self) -> String {
        eventually("the exited node's stderr to close", EVENT_WAIT, || {
            if self.stderr_reader.is_finished() {
                Ok(())
            } else {
                Err(format!("read so far:\n{}", self.stderr()))
            }
        });
        self.stderr()
    }

    /// The fields of every node event `name` the node reported so far, in
    /// order (see `cohort::events`).
    pub fn events(&self, name: &str) -> Vec<BTreeMap<String, String>> {
        let stderr = self.stderr();
        // The last piece is a line still being written, or empty.
        let complete = stderr.rsplit_once('\n').map_or("", |(lines, _)| lines);
        complete
            .lines()
            .filter_map(parse_event)
            .filter(|(event, _)| event == name)
            .map(|(_, fields)| fields)
            .collect()
    }

    /// Waits (bounded by [`EVENT_WAIT`]) until the node reports event
    /// `name` with (at least) the fields `with`; returns all its fields.
    pub fn wait_event(&self, name: &str, with: &[(&str, &str)]) -> BTreeMap<String, String> {
        let what = format!("the node to report {name} with {with:?}");
        eventually(&what, EVENT_WAIT, || {
            let found = self.events(name).into_iter().find(|fields| {
                with.iter()
                    .all(|(key, value)| fields.get(*key).map(String::as_str) == Some(*value))
            });
            found.ok_or_else(|| format!("its stderr:\n{}", self.stderr()))
        })
    }

    /// Waits (bounded by [`EVENT_WAIT`]) until the node's stderr contains
    /// `text`; returns it. For prose meant for people (a warning); match
    /// events with [`wait_event`](Self::wait_event).
    pub fn wait_stderr(&self, text: &str) -> String {
        eventually(&format!("the node to write {text:?}"), EVENT_WAIT, || {
            let stderr = self.stderr();
            if stderr.contains(text) {
                Ok(stderr)
            } else {
                Err(format!("its stderr:\n{stderr}"))
            }
        })
    }

    /// Waits (bounded by [`EVENT_WAIT`]) for the node to exit by itself;
    /// returns its status and all it wrote to stderr.
    pub fn wait_exit(&mut self) -> (ExitStatus, String) {
        let status = wait_bounded(&mut self.child, EVENT_WAIT, "a failing node");
        (status, self.stderr_when_closed())
    }

    /// SIGKILL, as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends `signal` (`STOP`, `CONT`...) to the node.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
    }

    /// SIGTERM, then waits (bounded) for the node to exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success());
        wait_bounded(&mut self.child, EVENT_WAIT, "a stopping node")
    }

    /// Runs a `cohort` client command against this node.
    pub fn cli(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--server", &self.url]);
        cohort(&all, stdin)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- stderr of the node at {} ({}):\n{}",
                self.url,
                self.data_dir.display(),
                self.stderr()
            );
        }
        self.kill();
    }
}

/// A node event from one line of its stderr:
/// `... MESSAGE event=NAME key=value key="quoted text" key=[a, b]`; its name
/// and fields.
pub fn parse_event(line: &str) -> Option<(String, BTreeMap<String, String>)> {
    let start = line.find(" event=")? + 1;
    let mut fields = BTreeMap::new();
    let mut rest = &line[start..];
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let (value, after) = field_value(after);
        fields.insert(key.to_string(), value);
        rest = after.trim_start();
    }
    Some((fields.remove("event")?, fields))
}

/// A field's value at the start of `text` (unquoted if quoted; a list or
/// a struct whole) and what follows it.
fn field_value(text: &str) -> (String, &str) {
    let mut chars = text.char_indices();
    if text.starts_with('"') {
        chars.next();
        let mut value = String::new();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.extend(chars.next().map(|(_, c)| c)),
                '"' => return (value, &text[i + 1..]),
                c => value.push(c),
            }
        }
        return (value, "");
    }
    let (mut depth, mut quoted) = (0usize, false);
    for (i, c) in chars {
        match c {
            '"' => quoted = !quoted,
            '[' | '(' | '{' if !quoted => depth += 1,
            ']' | ')' | '}' if !quoted => depth = depth.saturating_sub(1),
            ' ' if !quoted && depth == 0 => return (text[..i].to_string(), &text[i..]),
            _ => {}
        }
    }
    (text.to_string(), "")
}

/// Longest a cluster may take to agree on a view in these tests.
pub const CONVERGE: Duration = Duration::from_secs(30);

/// The node's gossip address (the same port as its HTTP one, over UDP).
pub fn gossip(node: &Node) -> String {
    node.url.trim_start_matches("http://").to_string()
}

pub fn start(dir: &tempfile::TempDir, name: &str, roles: &str, seed: Option<&Node>) -> Node {
    start_with(dir, name, roles, seed, &[])
}

/// A node of `roles` per name, each later one seeded by the first; as
/// options, so a test can take one out to kill it and put it back.
pub fn start_all(
    dir: &tempfile::TempDir,
    names: &[&str],
    roles: &str,
    extra: &[&str],
) -> Vec<Option<Node>> {
    let mut nodes = vec![Some(start_with(dir, names[0], roles, None, extra))];
    for name in &names[1..] {
        let seed = nodes[0].as_ref();
        nodes.push(Some(start_with(dir, name, roles, seed, extra)));
    }
    nodes
}

/// [`start`] with `extra` flags.
pub fn start_with(
    dir: &tempfile::TempDir,
    name: &str,
    roles: &str,
    seed: Option<&Node>,
    extra: &[&str],
) -> Node {
    let path = dir.path().join(name);
    let cut = partition_file(dir, name);
    let cut = cut.to_str().unwrap();
    let mut args = vec![
        "--node-id",
        name,
        "--roles",
        roles,
        "--slots",
        "4",
        "--fault-partition",
        cut,
    ];
    let seed = seed.map(gossip);
    if let Some(seed) = &seed {
        args.extend(["--seed", seed]);
    }
    args.extend(extra);
    Node::start(&path, &args)
}

/// Waits until `node` sees a cluster that satisfies `done`; returns it.
pub async fn converge(
    node: &Node,
    what: &str,
    done: impl Fn(&ClusterResponse) -> bool,
) -> ClusterResponse {
    converge_via(&Api::new(&node.url), what, done).await
}

/// [`converge`] asking through `client` (one that carries a token, say).
/// The master must answer too (`master_error` absent): a converged
/// cluster is one whose master knows its workers.
pub async fn converge_via(
    client: &Api,
    what: &str,
    done: impl Fn(&ClusterResponse) -> bool,
) -> ClusterResponse {
    converge_view(client, what, |c| c.master_error.is_none() && done(c)).await
}

/// [`converge`] on what `node` itself sees, whether or not a master
/// answers (a cluster that lost its quorum, say).
pub async fn converge_members(
    node: &Node,
    what: &str,
    done: impl Fn(&ClusterResponse) -> bool,
) -> ClusterResponse {
    converge_view(&Api::new(&node.url), what, done).await
}

async fn converge_view(
    client: &Api,
    what: &str,
    done: impl Fn(&ClusterResponse) -> bool,
) -> ClusterResponse {
    let waiting = format!("{} to see {what}", client.server());
    eventually_async(&waiting, CONVERGE, async || match client.cluster().await {
        Ok(cluster) if done(&cluster) => Ok(cluster),
        seen => Err(format!("{seen:?}")),
    })
    .await
}

pub fn live(cluster: &ClusterResponse) -> Vec<&str> {
    cluster
        .nodes
        .iter()
        .filter(|n| n.status == "live")
        .map(|n| n.id.as_str())
        .collect()
}

/// The file listing the addresses node `name` is cut off from (see
/// `cohort::fault`).
pub fn partition_file(dir: &tempfile::TempDir, name: &str) -> PathBuf {
    dir.path().join(format!("{name}.cut"))
}

/// Cuts `name` off from `others` (one direction; call both ways for a
/// symmetric partition), or heals it with no others.
pub fn cut_off(dir: &tempfile::TempDir, name: &str, others: &[&Node]) {
    let lines: Vec<&str> = others.iter().map(|n| gossip_of(n)).collect();
    std::fs::write(partition_file(dir, name), lines.join("\n")).unwrap();
}

fn gossip_of(node: &Node) -> &str {
    node.url.trim_start_matches("http://")
}

/// Share of one core an idle node may use: far above what gossip, the
/// master's tick and a worker's long poll cost, far below a thread that
/// never waits.
pub const IDLE_CPU_MAX: f64 = 0.2;
/// Window over which a node's CPU use is measured.
const IDLE_WINDOW: Duration = Duration::from_secs(2);
/// Windows measured before a node counts as busy for good: work that
/// follows a convergence (a replica catching up) may take a window.
const IDLE_WINDOWS_MAX: usize = 5;

/// CPU time (user and system, all threads) process `pid` has used.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Field 2, the command, is in parentheses and may hold spaces: count
    // from after it. `rest` starts at field 3; utime and stime are 14, 15.
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// Clock ticks per second in `/proc/<pid>/stat` (`USER_HZ`).
fn clock_ticks() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8_lossy(&out.stdout).trim().parse().ok())
            .unwrap_or(100)
    })
}

/// Waits (bounded) for a window of [`IDLE_WINDOW`] over which every node
/// in `nodes` used less than [`IDLE_CPU_MAX`] of one core; panics with
/// what each used otherwise. A bound on resource use, not on speed.
pub fn assert_idle(nodes: &[&Node]) {
    let mut windows = Vec::new();
    for _ in 0..IDLE_WINDOWS_MAX {
        let before: Vec<Duration> = nodes.iter().map(|n| cpu_time(n.pid())).collect();
        let started = Instant::now();
        // The sleep is the measurement: the nodes' CPU time over a window.
        std::thread::sleep(IDLE_WINDOW);
        let elapsed = started.elapsed().as_secs_f64();
        let used: Vec<(String, f64)> = nodes
            .iter()
            .zip(before)
            .map(|(node, before)| {
                let spent = cpu_time(node.pid()) - before;
                (node.name(), spent.as_secs_f64() / elapsed)
            })
            .collect();
        eprintln!("CPU use over {elapsed:.1} s, in cores: {used:.3?}");
        if used.iter().all(|(_, share)| *share < IDLE_CPU_MAX) {
            return;
        }
        windows.push(used);
    }
    panic!(
        "a node stayed busy in each of {IDLE_WINDOWS_MAX} windows of {IDLE_WINDOW:?} (bound {IDLE_CPU_MAX} of a core): {windows:.3?}"
    );
}

/// The digests and sizes of a blob listing (`GET /v1/blobs`), without
/// what the master says of each.
pub fn infos(list: Vec<cohort::client::types::BlobEntry>) -> Vec<cohort::client::types::BlobInfo> {
    list.iter().map(|entry| entry.info()).collect()
}
