//! Recorded calls end to end: a job (`fixture_http`) charges a local
//! counting server with a `POST`, then waits at a gate the test holds shut
//! while it kills a node with SIGKILL. Once the server has seen the job at
//! the gate, the job has seen the charge's response, so the response was
//! durable on a majority of the back-ends: the next attempt, on another
//! node, is answered from the record and the server counts one charge.
//! Without recording it counts two, with one idempotency key.

mod support;

use cohort::api::types::JobResponse;
use cohort::client::Node as Api;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use support::faults::exclusive;
use support::http::{Seen, Server, respond};
use support::*;

/// Longest the server holds an answer at a shut door: past it the
/// connection is dropped, and the job sees an error rather than the test
/// hanging.
const HOLD_MAX: Duration = Duration::from_secs(60);

/// Each call's own timeout in the job: a call held at a door waits while
/// the test kills a node, which takes well under this.
const CALL_TIMEOUT_MS: u64 = 30_000;

/// The charge the job sends: its body is part of what a replay matches.
const CHARGE_BODY: &str = r#"{"amount":1200,"currency":"eur"}"#;

/// A door a held answer waits at until the test opens it.
#[derive(Clone, Default)]
struct Door(Arc<(Mutex<bool>, Condvar)>);

impl Door {
    fn open(&self) {
        let (open, changed) = &*self.0;
        *open.lock().unwrap() = true;
        changed.notify_all();
    }

    /// Waits until the door is open; `false` if the server stopped or
    /// [`HOLD_MAX`] passed first.
    fn pass(&self, stop: &AtomicBool) -> bool {
        let (open, changed) = &*self.0;
        let until = Instant::now() + HOLD_MAX;
        let mut is_open = open.lock().unwrap();
        while !*is_open {
            if stop.load(Ordering::Relaxed) || Instant::now() >= until {
                return false;
            }
            // Bounded so a stopped server is noticed.
            is_open = changed
                .wait_timeout(is_open, Duration::from_millis(50))
                .unwrap()
                .0;
        }
        true
    }
}

/// A payment provider in miniature: `POST /charge` counts a charge and
/// answers `201` with its number (`charge N`, header `charge-id: ch_N`)
/// once `charge` is open; `GET /gate` answers `200 open` once `gate` is.
struct Provider {
    server: Server,
    charge: Door,
    gate: Door,
}

impl Provider {
    fn start() -> Provider {
        let (charge, gate) = (Door::default(), Door::default());
        let charges = AtomicU32::new(0);
        let (held_charge, held_gate) = (charge.clone(), gate.clone());
        let server = Server::start(move |seen: &Seen, writer, stop| {
            match (seen.method.as_str(), seen.path.as_str()) {
                ("POST", "/charge") => {
                    // Counted when it arrives: what a real provider would
                    // act on, whether or not its answer gets back.
                    let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                    if !held_charge.pass(stop) {
                        return Err(std::io::Error::other("the charge was never released"));
                    }
                    let id = format!("ch_{n}");
                    let body = format!("charge {n}");
                    respond(
                        writer,
                        "201 Created",
                        &[("charge-id", &id)],
                        body.as_bytes(),
                    )
                }
                ("GET", "/gate") => {
                    if !held_gate.pass(stop) {
                        return Err(std::io::Error::other("the gate was never opened"));
                    }
                    respond(writer, "200 OK", &[], b"open")
                }
                _ => respond(writer, "404 Not Found", &[], b"no such thing"),
            }
        });
        Provider {
            server,
            charge,
            gate,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.server.port())
    }

    /// The requests it read for `method` `path`, in order.
    fn seen(&self, method: &str, path: &str) -> Vec<Seen> {
        (self.server.seen().into_iter())
            .filter(|seen| seen.method == method && seen.path == path)
            .collect()
    }

    /// The job's input: the charge, then the gate.
    fn input(&self) -> String {
        json!({"calls": [
            {"method": "POST", "url": self.url("/charge"), "body": CHARGE_BODY,
             "timeout_ms": CALL_TIMEOUT_MS},
            {"method": "GET", "url": self.url("/gate"), "timeout_ms": CALL_TIMEOUT_MS},
        ]})
        .to_string()
    }
}

/// A request's `Idempotency-Key`, checked to be what the node sets: 32
/// hex digits.
fn idempotency_key(seen: &Seen) -> String {
    let key = seen
        .header("idempotency-key")
        .unwrap_or_else(|| panic!("no Idempotency-Key: {seen:?}"));
    assert!(
        key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{key}"
    );
    key.to_owned()
}

/// Whether the fixture's result for a call holds header `name: value`.
fn has_header(result: &Value, name: &str, value: &str) -> bool {
    (result["headers"].as_array().into_iter().flatten()).any(|pair| {
        pair[0]
            .as_str()
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
            && pair[1] == value
    })
}

/// Deploys `fixture_http` as `charger` and grants it the provider, with
/// `record` (`None`: the default, which records the `POST`).
fn deploy_charger(node: &Node, provider: &Provider, record: Option<bool>) {
    let file = guest("fixture_http");
    let deployed = node.cli(&["deploy", "charger", file.to_str().unwrap()], b"");
    assert!(deployed.status.success(), "{deployed:?}");
    let origin = provider.url("");
    let mut args = vec!["grant", "charger", "--http", &origin];
    match record {
        Some(true) => args.push("--record"),
        Some(false) => args.push("--no-record"),
        None => {}
    }
    let granted = node.cli(&args, b"");
    assert!(granted.status.success(), "{granted:?}");
    let shown = String::from_utf8_lossy(&granted.stdout);
    // The default goes unsaid; a choice is named.
    match record {
        None => assert!(!shown.contains("records"), "{shown}"),
        Some(true) => assert!(shown.contains("records every call"), "{shown}"),
        Some(false) => assert!(shown.contains("records nothing"), "{shown}"),
    }
}

/// Roles of a back-end node that runs jobs, and of one that does not.
const WORKS: &str = "back-end,worker,front-end";
const IDLES: &str = "back-end,front-end";

/// Three back-end nodes: n1 hosts the master and runs no jobs; n2 and n3
/// have `roles`. Losing any one node leaves two of the three voters, a
/// majority; losing n1 moves the master to n2, the next oldest.
fn three(
    dir: &tempfile::TempDir,
    rt: &tokio::runtime::Runtime,
    roles: [&str; 2],
    extra: &[&str],
) -> [Node; 3] {
    let n1 = start_with(dir, "n1", IDLES, None, extra);
    let n2 = start_with(dir, "n2", roles[0], Some(&n1), extra);
    let n3 = start_with(dir, "n3", roles[1], Some(&n1), extra);
    let workers = roles.iter().filter(|r| r.contains("worker")).count();
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "3 live voters, the master on n1, its workers", |c| {
                live(c).len() == 3
                    && c.master_node == "n1"
                    && c.voters.len() == 3
                    && c.workers.len() == workers
            })
            .await;
        }
    });
    [n1, n2, n3]
}

/// Waits until job `id` runs on a worker; returns that worker's name.
async fn running_on(client: &Api, id: u64) -> String {
    eventually_async(&format!("job {id} running"), OBSERVE, || async move {
        let job = client.job(id, 0).await.map_err(|e| e.to_string())?;
        match job.attempts.last() {
            Some(attempt) if job.state == "running" => Ok(attempt.worker.clone()),
            _ => Err(format!("{job:?}")),
        }
    })
    .await
}

/// How a job whose worker was killed after its charge ended.
struct AfterTheKill {
    /// The settled job.
    job: JobResponse,
    /// The fixture's results: the charge's, the gate's.
    results: Vec<Value>,
    /// The worker killed.
    killed: String,
    /// The charges the provider read, and the gate requests.
    charges: Vec<Seen>,
    gates: Vec<Seen>,
    provider_url: String,
    /// The nodes left, kept until the checks are done: a failed check
    /// prints their stderr when they are dropped. Then their directory.
    _nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// The worker-kill scenario: the job charges (answered at once), then
/// waits at the gate; the test kills the worker running it with SIGKILL,
/// opens the gate, and lets the next attempt finish on the other worker.
fn charge_then_kill_the_worker(record: Option<bool>, extra: &[&str]) -> AfterTheKill {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let [n1, n2, n3] = three(&dir, &rt, [WORKS, WORKS], extra);
    let mut workers = [Some(n2), Some(n3)];
    let provider = Provider::start();
    provider.charge.open();
    deploy_charger(&n1, &provider, record);
    let client = Api::new(&n1.url);
    let submitted = rt.block_on(client.submit(&job("charger", &provider.input())));
    let id = submitted.unwrap().id;
    // The job calls the gate only after the charge's response reached it,
    // which it did only once the response was recorded.
    eventually("the job at the gate", OBSERVE, || {
        match provider.seen("GET", "/gate").len() {
            0 => Err(format!("{:?}", provider.server.seen())),
            _ => Ok(()),
        }
    });
    let killed = rt.block_on(running_on(&client, id));
    assert_eq!(provider.seen("POST", "/charge").len(), 1);
    let slot = (workers.iter())
        .position(|w| w.as_ref().is_some_and(|w| w.name() == killed))
        .unwrap_or_else(|| panic!("job {id} runs on {killed}, not a worker"));
    workers[slot].take().unwrap().kill();
    provider.gate.open();
    let job = rt.block_on(settle(&client, id));
    assert_eq!(job.state, "succeeded", "{job:?}");
    let output = rt.block_on(async { client.result(id).await.unwrap() });
    let output: Value = serde_json::from_slice(&output).unwrap();
    let results = output["results"].as_array().unwrap().clone();
    assert_eq!(results.len(), 2, "{output}");
    // The gate answered the attempt that finished.
    assert_eq!(results[1]["status"], 200, "{output}");
    // The kill ended the first attempt; the next ran on the other worker.
    let outcomes: Vec<(&str, Option<&str>)> = (job.attempts.iter())
        .map(|a| (a.worker.as_str(), a.outcome.as_deref()))
        .collect();
    assert_eq!(outcomes.len(), 2, "{job:?}");
    assert_eq!(
        outcomes[0],
        (killed.as_str(), Some("worker_lost")),
        "{job:?}"
    );
    assert_ne!(outcomes[1].0, killed, "{job:?}");
    assert_eq!(outcomes[1].1, Some("succeeded"), "{job:?}");
    AfterTheKill {
        job,
        results,
        killed,
        charges: provider.seen("POST", "/charge"),
        gates: provider.seen("GET", "/gate"),
        provider_url: provider.url(""),
        _nodes: [Some(n1)].into_iter().chain(workers).flatten().collect(),
        _dir: dir,
    }
}

/// What a recorded charge guarantees after its worker was killed: one
/// charge, its response replayed to the next attempt, and the same keys.
fn charged_once(after: &AfterTheKill) {
    assert_eq!(after.charges.len(), 1, "charged again: {:?}", after.charges);
    let charge = &after.charges[0];
    assert_eq!(charge.body, CHARGE_BODY.as_bytes());
    idempotency_key(charge);
    // The job's result holds the response the provider sent once.
    let answer = &after.results[0];
    assert_eq!(answer["status"], 201, "{answer}");
    assert_eq!(answer["body"], "charge 1", "{answer}");
    assert!(has_header(answer, "charge-id", "ch_1"), "{answer}");
    let last = after.job.attempts.last().unwrap();
    let replayed = format!("[cohort] replayed: POST {}", after.provider_url);
    assert!(last.log_tail.contains(&replayed), "{}", last.log_tail);
    assert_eq!(last.calls[0].status, Some(201), "{:?}", last.calls);
    // The gate is the job's call 1 in both attempts, replay or not: the
    // same key both times.
    assert_eq!(after.gates.len(), 2, "{:?}", after.gates);
    assert_eq!(
        idempotency_key(&after.gates[0]),
        idempotency_key(&after.gates[1])
    );
    assert_ne!(idempotency_key(&after.gates[0]), idempotency_key(charge));
    eprintln!("killed {}; charged once", after.killed);
}

/// The issue's scenario: the worker dies right after the charge's
/// response arrived, and the next attempt is answered from the record.
#[test]
fn a_charge_recorded_before_its_worker_was_killed_is_not_sent_again() {
    let _turn = exclusive();
    let after = charge_then_kill_the_worker(None, &[]);
    charged_once(&after);
}

/// The same with every job in a sandbox process: the process's calls are
/// recorded through its node the same way.
#[test]
fn a_charge_recorded_in_a_sandbox_process_is_not_sent_again_after_a_kill() {
    let _turn = exclusive();
    let after = charge_then_kill_the_worker(None, &["--job-isolation", "process"]);
    charged_once(&after);
}

/// Without recording, the next attempt charges again, as it must (the
/// count this file's other tests hold to one is two here), and sends the
/// same Idempotency-Key, so a provider that honours it acts once.
#[test]
fn an_unrecorded_charge_is_sent_again_with_the_same_idempotency_key() {
    let _turn = exclusive();
    let after = charge_then_kill_the_worker(Some(false), &[]);
    assert_eq!(after.charges.len(), 2, "{:?}", after.charges);
    let keys: Vec<String> = after.charges.iter().map(idempotency_key).collect();
    assert_eq!(keys[0], keys[1]);
    // The job saw the second charge's response: nothing was replayed.
    assert_eq!(after.results[0]["body"], "charge 2", "{:?}", after.results);
    let last = after.job.attempts.last().unwrap();
    assert!(
        !last.log_tail.contains("[cohort] replayed:"),
        "{}",
        last.log_tail
    );
}

/// The master-kill scenario: n1's master is killed with SIGKILL while
/// the provider holds the charge's response; answered once n1 is dead,
/// the response can only be made durable by the next master, on n2. The
/// job runs on `worker`, the only node with that role. Checks that it was
/// charged once and finished in the attempt that made the charge.
fn recorded_by_the_next_master(worker: &str) {
    let dir = tempfile::tempdir().unwrap();
    let rt = runtime();
    let roles = match worker {
        "n2" => [WORKS, IDLES],
        _ => [IDLES, WORKS],
    };
    let [mut n1, n2, n3] = three(&dir, &rt, roles, &[]);
    let provider = Provider::start();
    provider.gate.open();
    deploy_charger(&n1, &provider, None);
    // Asked through a node that outlives the master's.
    let client = Api::new(&n2.url);
    let submitted = rt.block_on(client.submit(&job("charger", &provider.input())));
    let id = submitted.unwrap().id;
    eventually("the charge to arrive", OBSERVE, || {
        match provider.seen("POST", "/charge").len() {
            0 => Err(format!("{:?}", provider.server.seen())),
            _ => Ok(()),
        }
    });
    assert_eq!(rt.block_on(running_on(&client, id)), worker);
    n1.kill();
    provider.charge.open();
    let job = rt.block_on(settle(&client, id));
    let charges = provider.seen("POST", "/charge");
    assert_eq!(charges.len(), 1, "charged again: {charges:?}\n{job:?}");
    idempotency_key(&charges[0]);
    assert_eq!(job.state, "succeeded", "{job:?}");
    // The worker kept trying until the next master took the record: the
    // attempt went on, and no other was needed.
    assert_eq!(job.attempts.len(), 1, "{job:?}");
    assert_eq!(job.attempts[0].worker, worker);
    let output = rt.block_on(async { client.result(id).await.unwrap() });
    let output: Value = serde_json::from_slice(&output).unwrap();
    assert_eq!(output["results"][0]["status"], 201, "{output}");
    assert_eq!(output["results"][0]["body"], "charge 1", "{output}");
    assert_eq!(output["results"][1]["status"], 200, "{output}");
    rt.block_on(async {
        for node in [&n2, &n3] {
            converge(node, "the master on n2", |c| {
                c.master_node == "n2" && c.master_epoch == 2
            })
            .await;
        }
    });
}

/// The master's node dies while a worker (not the next master's node)
/// waits for the charge's response: the worker records the call with the
/// next master, and the job finishes in the same attempt, charged once.
#[test]
fn a_charge_answered_after_the_masters_node_was_killed_is_recorded_by_the_next_master() {
    let _turn = exclusive();
    recorded_by_the_next_master("n3");
}

/// The same when the next master's node is the worker's own.
#[test]
fn a_charge_answered_after_the_master_moved_to_the_workers_own_node_is_recorded_there() {
    let _turn = exclusive();
    recorded_by_the_next_master("n2");
}
