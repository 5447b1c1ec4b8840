//! Benchmarks of a single `cohort node` and of the master's journal.
//!
//! ```text
//! cargo bench --bench node                 # everything
//! cargo bench --bench node -- throughput   # one section: throughput,
//!                                          # latency, commit, recovery
//! ```
//!
//! * throughput: a real node process (release build, all CPUs as slots);
//!   trivial jobs submitted in batches of 1000 by 4 clients; the clock stops
//!   when the node's metrics count every job succeeded.
//! * latency: one job at a time on an idle node: submit (acknowledged after
//!   fsync), then a long-poll for its result.
//! * commit: the master service in-process, 256 concurrent submitters; events
//!   made durable per second and events per fsync (group commit).
//! * recovery: a journal of 1M submissions written directly; the time for
//!   the master to recover it, and the process's resident memory with 1M
//!   queued jobs in the master component.
//! * cluster: three nodes (every role) on loopback on this one machine:
//!   throughput with submissions spread over the three front-ends, with the
//!   journal replicated (every batch on a majority of the 3 voters before
//!   it is acknowledged), latency of one job through a node
//!   that does not host the master (one proxy hop), and the time from
//!   `kill -9` of a node until the master's node no longer lists it as live
//!   (failure detection with default settings). Throughput alternates
//!   warm standbys on (the default) and `--standby off`.
//! * dag: a DAG of 10,000 trivial jobs (1 to 3 parents each) on one node,
//!   from its submission until its status says it ended; and the same
//!   jobs with no edges.
//! * snapshot: a Wasm master holding 1,000,000 queued jobs snapshots
//!   every 10,000 events while 4 callers submit one job at a time each:
//!   their round trips, and the master's own longest pass, with no
//!   snapshot, with snapshots on the master's thread, then taken by its
//!   shadow (`--snapshots master|shadow`).
//! * schedule: five one-second schedules on one idle node; how late each
//!   tick's job is submitted and started after the tick's time.
//! * tracing: one node's throughput and one-at-a-time p99 with tracing
//!   off, at 1% and at 100% sampling, exporting over OTLP/HTTP to a local
//!   sink; alternated in one run, ratios against off.
//! * pools: the native master's polls of one worker starting 10,000 plain
//!   jobs while 100,000 jobs for a pool it does not fit wait ahead of
//!   them, against no such flood, and the `Stats` query counting them.
//! * shares: the native master (decide and apply, no journal) in
//!   simulated time, one worker of 16 slots: namespace a floods 100,000
//!   jobs of 1 ms, then b submits 1,000: b's waits (p50, p99) with the
//!   two in their own namespaces (fair shares) against all in the default
//!   one (first come, first served), with their simulated makespan; two
//!   backlogged namespaces weighted 1 and 2 whose jobs cost 10 ms and
//!   1 ms: the CPU each got over 30 simulated seconds, shared by measured
//!   CPU and, on the same jobs, with every attempt reported as costing
//!   the same (job-count sharing); and wall-clock decisions per second
//!   for 100,000 jobs over 1 namespace against over 1,000.
//! * guard (only when named: `cargo bench --bench node -- guard`; CI runs
//!   it): one node's throughput over 20,000 jobs divided by the rate of
//!   single journal appends with fsync on the same disk, in the same run;
//!   fails below [`GUARD_JOBS_PER_SYNC_MIN`].
//! * soak (only when named: `cargo bench --bench node -- soak`): three
//!   nodes at a steady half-peak load with no fault for 30 minutes
//!   (`COHORT_SOAK_SECS`, `COHORT_SOAK_RATE`); counts take-overs, which
//!   must be none.
//! * handover: three back-end nodes; one client submits one job at a time
//!   through the youngest while the oldest, hosting the master, gets
//!   SIGTERM; the longest submission round trip around the hand-over is the
//!   pause clients see.
//! * upgrade: three back-end nodes; one client submits one job at a time
//!   through the youngest while an admin client of another node switches
//!   the master to `examples/fifo-master` and back (`cohort master
//!   upgrade`/`rollback`); the longest submission round trip during each
//!   switch, over 3 clusters, next to the hand-over's. Then, in-process,
//!   the same switch of a master holding 1,000,000 queued jobs while a
//!   caller asks it for stats in a loop.
//! * takeover: three back-end nodes; one client submits one job at a time
//!   through the youngest while the oldest, hosting the master, gets
//!   SIGKILL; the time from the kill until the first submission is
//!   acknowledged by the new master, over 10 runs.
//! * takeover-large: three back-end nodes without workers hold
//!   `COHORT_TAKEOVER_JOBS` (default 500,000) queued jobs; SIGKILL of the
//!   master's node, then the time until a submission through the youngest
//!   is acknowledged, with warm standbys (the default) and with `--standby
//!   off` (the new master recovers from its snapshot and journal),
//!   alternated over 3 runs each.
//! * security: the cluster throughput and the proxied one-at-a-time
//!   latency above, on three nodes without a key and on three nodes with a
//!   cluster key (sealed gossip and node-to-node bodies, clients with a
//!   token), alternated in one run (`COHORT_BENCH_ROUNDS`, default 2).
//! * egress: three nodes as in cluster; `fixture_http` deployed by name
//!   and granted a local hyper server (in this process, answering `200
//!   ok`); 1,000 jobs each making one GET to it, in batches over the three
//!   front-ends, until all succeeded, next to the same 1,000 jobs with no
//!   call, alternated over [`EGRESS_ROUNDS`]; checks that the server saw
//!   each call once and that jobs' attempts recorded them.
//!
//! * blobs: a file of `COHORT_BENCH_BLOB_MIB` MiB (default 1024) of
//!   pseudo-random bytes; `cp`, `cp` then `sync`, and `cat >` of it on the
//!   same disk; then, on one node and on three (every role, the upload
//!   acknowledged once on a majority), its upload streamed from the file,
//!   the first byte of its download through the last node, its download
//!   to a file as `cohort blob get > file` copies it (a 1 MiB buffer), the
//!   same with its sha256 checked (`get_blob_to_file`, `cohort blob get -o`),
//!   and 1 KiB from its middle (`Range`); over 2 rounds.
//!
//! * relay: a blob of `COHORT_BENCH_RELAY_MIB` MiB (default 1024) uploaded
//!   to a back-end node, then downloaded (sha256 checked, to a file)
//!   through a front-end-only node that has no copy: the answer's first
//!   byte and the whole download; then again from the copy it made. With
//!   `COHORT_BENCH_BEFORE=PATH` (another build's `cohort`), each of the 3
//!   rounds runs that build's nodes too, alternating which goes first.
//!
//! `COHORT_BENCH_BIN=PATH` runs the nodes from another `cohort` binary (an
//! older commit's, for before/after in one run; the in-process sections,
//! commit and recovery, use this build's library either way).
//! `COHORT_BENCH_VERBOSE=1` prints the slow submissions of the hand-over;
//! `COHORT_BENCH_NODE_LOGS=DIR` keeps the nodes' stderr in `DIR` (set
//! `COHORT_LOG` too for their debug logs).

use cohort::api::types::{
    BatchItem, BatchRequest, DagJobRequest, DagRequest, ScheduleRequest, SubmitRequest,
};
use cohort::client::Node as Api;
use cohort::journal::{FsStorage, Journal};
use cohort::master::{self, CoreKind, MasterOptions};
use cohort::replication::Replication;
use cohort_master::{
    Command, Config, Event, EventKind, JobOptions, JobSpec, JobState, RequestId, encode,
};
use hdrhistogram::Histogram;
use hyper::Method;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command as Process, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("machine: {cpus} CPUs");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if wanted("throughput") {
        rt.block_on(throughput());
    }
    if wanted("latency") {
        rt.block_on(latency());
    }
    if wanted("commit") {
        for core in [CoreKind::Wasm, CoreKind::Native] {
            rt.block_on(commit(core));
        }
    }
    if wanted("cluster") {
        rt.block_on(cluster());
    }
    if wanted("handover") {
        rt.block_on(handover());
    }
    if wanted("takeover") {
        rt.block_on(takeover());
    }
    if wanted("takeover-large") {
        rt.block_on(takeover_large());
    }
    if wanted("upgrade") {
        rt.block_on(upgrade());
    }
    if wanted("upgrade-large") {
        rt.block_on(upgrade_large());
    }
    if filter.iter().any(|f| f == "soak") {
        rt.block_on(soak());
    }
    if filter.iter().any(|f| f == "guard") {
        rt.block_on(guard());
    }
    if wanted("security") {
        rt.block_on(security());
    }
    if wanted("recovery") {
        for core in [CoreKind::Wasm, CoreKind::Native] {
            rt.block_on(recovery(core));
        }
    }
    if wanted("history") {
        for core in [CoreKind::Wasm, CoreKind::Native] {
            rt.block_on(history(core));
        }
        rt.block_on(history_node());
    }
    if wanted("snapshot") {
        rt.block_on(snapshot_pause());
    }
    if wanted("schedule") {
        rt.block_on(schedule_jitter());
    }
    if wanted("dag") {
        rt.block_on(dag_end_to_end());
    }
    if wanted("egress") {
        rt.block_on(egress());
    }
    if wanted("blobs") {
        rt.block_on(blobs());
    }
    if wanted("relay") {
        rt.block_on(relay());
    }
    if wanted("tracing") {
        rt.block_on(tracing_cost());
    }
    if wanted("locality") {
        rt.block_on(locality());
    }
    if wanted("pools") {
        pools();
    }
    if wanted("shares") {
        shares();
    }
}

/// One worker's slots in simulated time over the native master: runs
/// attempts for as long as each job's namespace says, reporting the CPU
/// it says (`reported`), until `until` or no job is left.
struct SharesSim {
    master: cohort_master::Master,
    now: u64,
    seq: u64,
    slots: u32,
    /// Per namespace: (simulated duration and CPU of an attempt, in µs;
    /// the CPU reported for it).
    cost: std::collections::BTreeMap<String, (u64, u64)>,
    /// Running attempts: (end in µs, job, namespace).
    running: std::collections::BTreeSet<(u64, u64, String)>,
    /// When each job was submitted and started, in µs.
    submitted: std::collections::BTreeMap<u64, (String, u64)>,
    waits: std::collections::BTreeMap<String, Vec<u64>>,
    cpu: std::collections::BTreeMap<String, u64>,
    decisions: u64,
}

impl SharesSim {
    fn new(slots: u32, cost: &[(&str, u64, u64)]) -> Self {
        SharesSim {
            master: cohort_master::Master::new(),
            now: 1_000_000_000,
            seq: 0,
            slots,
            cost: (cost.iter())
                .map(|&(name, us, reported)| (name.to_owned(), (us, reported)))
                .collect(),
            running: Default::default(),
            submitted: Default::default(),
            waits: Default::default(),
            cpu: Default::default(),
            decisions: 0,
        }
    }

    fn run(&mut self, command: &Command) -> Vec<Event> {
        self.decisions += 1;
        let decision = (self.master)
            .decide(self.now / 1000, command)
            .expect("accepted");
        for event in &decision.events {
            self.master.apply(event);
        }
        decision.events
    }

    /// `n` jobs of `namespace` (`None`: the default one), counted as
    /// `label`'s.
    fn submit(&mut self, namespace: Option<&str>, label: &str, n: u64) {
        for _ in 0..n {
            self.seq += 1;
            let options = JobOptions {
                namespace: namespace.map(str::to_owned),
                ..JobOptions::default()
            };
            let submit = Command::Submit {
                spec: spec(self.seq),
                request: RequestId {
                    origin: 1,
                    seq: self.seq,
                },
                options,
            };
            for event in self.run(&submit) {
                if let EventKind::Submitted { id, .. } = event.kind {
                    self.submitted.insert(id, (label.to_owned(), self.now));
                }
            }
        }
    }

    fn fill(&mut self) {
        let free = self.slots - self.running.len() as u32;
        if free == 0 {
            return;
        }
        let poll = Command::Poll {
            worker: "w".into(),
            slots: self.slots,
            free,
            holds: Vec::new(),
            pool: cohort_master::WorkerPool::default(),
        };
        for event in self.run(&poll) {
            if let EventKind::Assigned { id, .. } = event.kind {
                let (label, at) = self.submitted[&id].clone();
                let (us, _) = self.cost[&label];
                self.waits
                    .entry(label.clone())
                    .or_default()
                    .push(self.now - at);
                self.running.insert((self.now + us, id, label));
            }
        }
    }

    /// Ends the attempt that ends first; false if none runs.
    fn end_one(&mut self) -> bool {
        let Some((end, id, label)) = self.running.pop_first() else {
            return false;
        };
        self.now = self.now.max(end);
        let (us, reported) = self.cost[&label];
        *self.cpu.entry(label).or_default() += us;
        let finish = Command::Finish {
            id,
            attempt: 1,
            worker: "w".into(),
            outcome: cohort_master::Outcome::Succeeded(Vec::new()),
            duration_ms: us / 1000,
            log_tail: String::new(),
            calls: Vec::new(),
            calls_dropped: 0,
            usage: cohort_master::Usage {
                cpu_us: reported,
                memory_peak_bytes: 0,
                egress_bytes: 0,
            },
        };
        self.run(&finish);
        true
    }

    /// Runs until simulated `until` µs from now, or until no job is left.
    fn run_for(&mut self, until: u64) {
        let until = self.now + until;
        loop {
            self.fill();
            if self.now >= until || !self.end_one() {
                return;
            }
        }
    }
}

/// Fair shares, in simulated time over the native master (see the notes
/// at the top).
fn shares() {
    let percentile = |waits: &mut Vec<u64>, p: f64| {
        waits.sort_unstable();
        let at = ((waits.len() as f64 * p).ceil() as usize).clamp(1, waits.len()) - 1;
        waits[at] as f64 / 1000.0
    };
    println!("shares: a floods 100,000 jobs of 1 ms, then b submits 1,000 (16 slots)");
    for fair in [false, true] {
        let mut sim = SharesSim::new(16, &[("a", 1_000, 1_000), ("b", 1_000, 1_000)]);
        let (a, b) = match fair {
            true => (Some("a"), Some("b")),
            false => (None, None),
        };
        sim.submit(a, "a", 100_000);
        sim.submit(b, "b", 1_000);
        let start = sim.now;
        sim.run_for(u64::MAX / 2);
        let waits = sim.waits.get_mut("b").unwrap();
        println!(
            "  {}: b's wait p50 {:.1} ms, p99 {:.1} ms; all done in {:.2} s simulated",
            if fair {
                "fair shares (own namespaces)"
            } else {
                "one namespace (first come)"
            },
            percentile(waits, 0.5),
            percentile(waits, 0.99),
            (sim.now - start) as f64 / 1e6,
        );
    }
    println!(
        "shares: a (weight 1, 10 ms a job) and b (weight 2, 1 ms a job), 16 slots, 30 s simulated"
    );
    for (label, a_reported, b_reported) in
        [("by measured CPU", 10_000, 1_000), ("by job count", 1, 1)]
    {
        let mut sim = SharesSim::new(16, &[("a", 10_000, a_reported), ("b", 1_000, b_reported)]);
        sim.run(&Command::SetWeight {
            namespace: "b".into(),
            weight: 2,
        });
        sim.submit(Some("a"), "a", 60_000);
        sim.submit(Some("b"), "b", 600_000);
        sim.run_for(30_000_000);
        let (a, b) = (sim.cpu["a"] as f64, sim.cpu["b"] as f64);
        println!(
            "  {label}: CPU a {:.1} s, b {:.1} s: b/a {:.3} (weights ask 2)",
            a / 1e6,
            b / 1e6,
            b / a
        );
    }
    println!("shares: decisions a second, 100,000 jobs submitted, started and finished");
    for round in 1..=3 {
        for namespaces in [1u64, 1_000] {
            let mut sim = SharesSim::new(16, &[]);
            let names: Vec<String> = (0..namespaces).map(|n| format!("ns{n}")).collect();
            for name in &names {
                sim.cost.insert(name.clone(), (1_000, 1_000));
            }
            let started = Instant::now();
            for n in 0..100_000u64 {
                let name = &names[(n % namespaces) as usize];
                sim.submit(Some(name), &name.clone(), 1);
            }
            sim.run_for(u64::MAX / 2);
            let took = started.elapsed().as_secs_f64();
            println!(
                "  round {round}, {namespaces} namespaces: {} decisions in {:.2} s: {:.0} a second, {:.0} jobs a second",
                sim.decisions,
                took,
                sim.decisions as f64 / took,
                100_000.0 / took
            );
        }
    }
}

/// Worker pools: how long a worker's polls take when the line ahead of
/// the jobs it may run holds a flood of jobs for a pool it does not fit
/// (`COHORT_BENCH_POOL_FLOOD` jobs asking for `gpu=a100`, default
/// 100,000, at a higher priority), against no flood: the native master
/// (decide and apply, no journal) starting 10,000 plain jobs on one
/// worker, 16 a poll, 3 rounds; and the `Stats` query (which counts the
/// unplaceable jobs) with the flood in line.
fn pools() {
    use cohort_master::{Master, Query, WorkerPool};
    let flood: u64 = std::env::var("COHORT_BENCH_POOL_FLOOD")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    const PLAIN: u64 = 10_000;
    const T: u64 = 1_000_000;
    let run = |master: &mut Master, now: u64, command: &Command| {
        let decision = master.decide(now, command).expect("accepted");
        let assigned = (decision.events.iter())
            .filter(|event| matches!(event.kind, EventKind::Assigned { .. }))
            .count();
        for event in &decision.events {
            master.apply(event);
        }
        assigned as u64
    };
    let poll = Command::Poll {
        worker: "cpu".into(),
        slots: 16,
        free: 16,
        holds: Vec::new(),
        pool: WorkerPool {
            labels: vec![("zone".into(), "eu".into())],
            memory_max: Some(4 << 30),
        },
    };
    println!("pools: {flood} jobs for a pool no worker fits, ahead of {PLAIN} plain ones");
    for round in 1..=3 {
        for flooded in [0, flood] {
            let mut master = Master::new();
            let gpu = JobOptions {
                labels: vec![("gpu".into(), "a100".into())],
                ..JobOptions::default()
            };
            let jobs = (0..flooded).map(|n| (n, 1, gpu.clone()));
            let plain = (flooded..flooded + PLAIN).map(|n| (n, 0, JobOptions::default()));
            for (n, priority, options) in jobs.chain(plain) {
                let submit = Command::Submit {
                    spec: JobSpec {
                        priority,
                        ..spec(n)
                    },
                    request: RequestId { origin: 1, seq: n },
                    options,
                };
                run(&mut master, T, &submit);
            }
            let started = Instant::now();
            let (mut assigned, mut polls) = (0, 0u64);
            while assigned < PLAIN {
                assigned += run(&mut master, T + 1, &poll);
                polls += 1;
            }
            let took = started.elapsed();
            let started = Instant::now();
            let stats = match master.query(T + 1, &Query::Stats) {
                Ok(cohort_master::Answer::Stats(stats)) => stats,
                other => panic!("stats, not {other:?}"),
            };
            let stats_took = started.elapsed();
            assert_eq!(stats.unplaceable, flooded);
            println!(
                "  round {round}, flood {flooded}: {polls} polls in {:.1} ms, {:.2} µs a poll; \
                 stats {:.1} µs ({} unplaceable)",
                took.as_secs_f64() * 1e3,
                took.as_secs_f64() * 1e6 / polls as f64,
                stats_took.as_secs_f64() * 1e6,
                stats.unplaceable,
            );
        }
    }
}

/// Data locality: N jobs (`COHORT_BENCH_LOCALITY_JOBS`, default 240), each
/// reading one of M blobs (9, of `COHORT_BENCH_LOCALITY_MIB` MiB each,
/// default 4) in a fixed pseudo-random order, on one back-end node and
/// three worker-only nodes of two slots whose caches hold three blobs
/// each: the share of inputs found in the worker's cache (the workers'
/// `cohort_worker_inputs_total`), with locality (`--locality-wait 1s`,
/// the default, or `COHORT_BENCH_LOCALITY_WAIT`) and without (`0s`),
/// alternated in one run
/// (`COHORT_BENCH_ROUNDS`, default 2), each on a fresh cluster.
async fn locality() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (jobs, mib, rounds) = (
        env("COHORT_BENCH_LOCALITY_JOBS", 240),
        env("COHORT_BENCH_LOCALITY_MIB", 4),
        env("COHORT_BENCH_ROUNDS", 2),
    );
    const BLOBS: u64 = 9;
    let cache = format!("{}MiB", 3 * mib);
    let waited = std::env::var("COHORT_BENCH_LOCALITY_WAIT").unwrap_or_else(|_| "1s".into());
    for round in 1..=rounds {
        for wait in [waited.as_str(), "0s"] {
            let back = start_node(&[
                "--node-id",
                "b",
                "--roles",
                "back-end,front-end",
                "--locality-wait",
                wait,
            ]);
            let seed = gossip_of(&back);
            let workers: Vec<NodeProcess> = ["w1", "w2", "w3"]
                .iter()
                .map(|name| {
                    start_node(&[
                        "--node-id",
                        name,
                        "--roles",
                        "worker,front-end",
                        "--slots",
                        "2",
                        "--seed",
                        &seed,
                        "--blob-cache-bytes",
                        &cache,
                    ])
                })
                .collect();
            let client = Api::new(&back.url);
            while client.cluster().await.map_or(true, |c| c.workers.len() < 3) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let module = client
                .upload(
                    std::fs::read(format!("{}/fixture_blobs.wasm", env!("COHORT_GUESTS_DIR")))
                        .unwrap(),
                )
                .await
                .unwrap();
            let mut digests = Vec::new();
            for n in 0..BLOBS {
                let bytes = vec![n as u8; (mib << 20) as usize];
                digests.push(client.put_blob(bytes.into()).await.unwrap().digest);
            }
            wait_master(&client, &module).await;
            let base = succeeded(&client).await;
            let mut state = 0x2545_f491_4f6c_dd1du64;
            let started = Instant::now();
            for batch in 0..jobs.div_ceil(20) {
                let size = 20.min(jobs - batch * 20);
                let batch = BatchRequest {
                    jobs: (0..size)
                        .map(|_| {
                            state ^= state << 13;
                            state ^= state >> 7;
                            state ^= state << 17;
                            SubmitRequest::new(&module)
                                .json(
                                    serde_json::json!({"steps": [{"op": "read", "from": "input"}]}),
                                )
                                .input_blob(&digests[(state % BLOBS) as usize])
                        })
                        .collect(),
                };
                client.submit_batch(&batch).await.unwrap();
            }
            while succeeded(&client).await < base + jobs {
                assert!(
                    started.elapsed() < Duration::from_secs(600),
                    "jobs not done"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let took = started.elapsed();
            let (mut local, mut fetched) = (0, 0);
            for worker in &workers {
                let worker = Api::new(&worker.url);
                local += metric(&worker, "cohort_worker_inputs_total{where=\"local\"}").await;
                fetched += metric(&worker, "cohort_worker_inputs_total{where=\"fetched\"}").await;
            }
            let assigned = metric(&client, "cohort_assignments_with_input_blob_total").await;
            let held = metric(&client, "cohort_assignments_local_total").await;
            println!(
                "locality round {round}: --locality-wait {wait}: {jobs} jobs over {BLOBS} blobs of {mib} MiB, caches of 3: \
                 {:.1}% of inputs found local ({local} local, {fetched} fetched, {:.0} MiB moved); \
                 the master started {held} of {assigned} where the input was said to be; {:.2} s",
                100.0 * local as f64 / (local + fetched).max(1) as f64,
                (fetched * mib) as f64,
                took.as_secs_f64(),
            );
            drop(workers);
            drop(back);
        }
    }
}

/// The cost of tracing: one node's throughput (as `throughput`, 20,000
/// jobs) and one-at-a-time latency (1,000 jobs) with tracing off, at 1%
/// and at 100% sampling, exporting over OTLP/HTTP to a local sink that
/// answers every request at once; alternated in one run
/// (`COHORT_BENCH_ROUNDS`, default 2), ratios against off.
async fn tracing_cost() {
    let sink = OtlpSink::start();
    let endpoint = format!("http://{}", sink.addr);
    let rounds: usize = std::env::var("COHORT_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let modes: [(&str, Vec<&str>); 3] = [
        ("off", vec![]),
        (
            "1%",
            vec!["--otlp-endpoint", &endpoint, "--trace-sample", "0.01"],
        ),
        (
            "100%",
            vec!["--otlp-endpoint", &endpoint, "--trace-sample", "1"],
        ),
    ];
    let mut results = vec![(Vec::new(), Vec::new()); modes.len()];
    // Each round starts with the next mode, so that no mode always runs
    // first (on a machine still cool) or last.
    for round in 0..rounds {
        for k in 0..modes.len() {
            let i = (round + k) % modes.len();
            let (label, args) = &modes[i];
            let rate = node_throughput(20_000, args).await;
            let node = start_node(args);
            let client = Api::new(&node.url);
            let module = client.upload(echo_wasm()).await.unwrap();
            let (total, _) = one_at_a_time(&client, &module, 1_000).await;
            let p99 = total.value_at_quantile(0.99);
            println!(
                "tracing {label}: {rate:.0} jobs/s, one at a time submit->result p99 {p99} µs"
            );
            results[i].0.push(rate);
            results[i].1.push(p99 as f64);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (off_rate, off_p99) = (mean(&results[0].0), mean(&results[0].1));
    for ((label, _), (rates, p99s)) in modes.iter().zip(&results) {
        println!(
            "tracing {label} (mean of {rounds}): {:.0} jobs/s ({:+.1}% vs off), p99 {:.0} µs ({:+.1}% vs off)",
            mean(rates),
            (mean(rates) / off_rate - 1.0) * 100.0,
            mean(p99s),
            (mean(p99s) / off_p99 - 1.0) * 100.0,
        );
    }
    println!(
        "tracing: the sink took {} export requests, {} bytes",
        sink.requests.load(Ordering::Relaxed),
        sink.bytes.load(Ordering::Relaxed)
    );
}

/// An OTLP/HTTP sink on loopback: reads each request whole and answers
/// `200` with an empty body (an export fully accepted).
struct OtlpSink {
    addr: std::net::SocketAddr,
    requests: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
}

impl OtlpSink {
    fn start() -> OtlpSink {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (counted, read) = (requests.clone(), bytes.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (counted, read) = (counted.clone(), read.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream);
                    loop {
                        let mut length = 0usize;
                        loop {
                            let mut line = String::new();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let line = line.trim_end();
                            if line.is_empty() {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':')
                                && name.eq_ignore_ascii_case("content-length")
                            {
                                length = value.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        counted.fetch_add(1, Ordering::Relaxed);
                        read.fetch_add(length as u64, Ordering::Relaxed);
                        let answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                        if reader.get_mut().write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        OtlpSink {
            addr,
            requests,
            bytes,
        }
    }
}

/// A file of pseudo-random bytes for the blob sections, of the MiB that
/// `variable` says (default 1024), and where to copy it.
struct BlobFile {
    mib: u64,
    bytes: u64,
    _dir: tempfile::TempDir,
    source: std::path::PathBuf,
    copy: std::path::PathBuf,
}

fn blob_file(variable: &str) -> BlobFile {
    let mib: u64 = std::env::var(variable)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let bytes = mib << 20;
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    write_pseudo_random(&source, bytes);
    let copy = dir.path().join("copy");
    BlobFile {
        mib,
        bytes,
        _dir: dir,
        source,
        copy,
    }
}

impl BlobFile {
    /// MiB/s of moving the file's bytes in `took`.
    fn rate(&self, took: Duration) -> f64 {
        self.bytes as f64 / took.as_secs_f64() / f64::from(1u32 << 20)
    }
}

/// Blob throughput and first-byte latency against `cp` and `cat` of the
/// same file on the same disk, in the same run (see the module's notes).
async fn blobs() {
    let file = blob_file("COHORT_BENCH_BLOB_MIB");
    let (mib, bytes) = (file.mib, file.bytes);
    let (source, copy) = (file.source.clone(), file.copy.clone());
    let rate = |took: Duration| file.rate(took);
    let timed = |program: &str, args: &[&str]| {
        let started = Instant::now();
        let status = Process::new(program).args(args).status().unwrap();
        assert!(status.success(), "{program} {args:?}");
        started.elapsed()
    };
    let (src, dst) = (source.to_str().unwrap(), copy.to_str().unwrap());
    let shell = |script: String| timed("sh", &["-c", &script]);
    for round in 1..=2 {
        let _ = std::fs::remove_file(&copy);
        let cp = timed("cp", &[src, dst]);
        let _ = std::fs::remove_file(&copy);
        let cp_sync = shell(format!("cp {src} {dst} && sync -f {dst}"));
        let cat = shell(format!("cat {src} > {dst}"));
        println!(
            "blobs round {round}: {mib} MiB file: cp {:.0} MiB/s, cp + sync {:.0} MiB/s, cat > file {:.0} MiB/s",
            rate(cp),
            rate(cp_sync),
            rate(cat)
        );
        for nodes in [1, 3] {
            let cluster: Vec<NodeProcess> = if nodes == 1 {
                vec![start_node(&[])]
            } else {
                three_nodes(&[]).await.into()
            };
            let first = Api::new(&cluster[0].url);
            let last = Api::new(&cluster[nodes - 1].url);
            let started = Instant::now();
            let file = tokio::fs::File::open(&source).await.unwrap();
            let info = first.put_blob_stream(file).await.unwrap();
            let upload = started.elapsed();
            assert_eq!(info.bytes, bytes);
            // The download through the last node: on three nodes, one
            // that may have to fetch it first.
            let _ = std::fs::remove_file(&copy);
            let started = Instant::now();
            let mut reader = last.get_blob(&info.digest, None).await.unwrap();
            let first_byte = {
                use tokio::io::AsyncReadExt;
                let mut one = [0u8; 1];
                reader.read_exact(&mut one).await.unwrap();
                started.elapsed()
            };
            drop(reader);
            let started = Instant::now();
            let mut reader = last.get_blob(&info.digest, None).await.unwrap();
            // As `cohort blob get > file` copies it (unchecked): through a
            // 1 MiB buffer, each write to the file a trip to a blocking
            // thread.
            let out = tokio::fs::File::create(&copy).await.unwrap();
            let mut out = tokio::io::BufWriter::with_capacity(1 << 20, out);
            tokio::io::copy(&mut reader, &mut out).await.unwrap();
            tokio::io::AsyncWriteExt::flush(&mut out).await.unwrap();
            let download = started.elapsed();
            let started = Instant::now();
            last.get_blob_to_file(&info.digest, &copy).await.unwrap();
            let checked = started.elapsed();
            let started = Instant::now();
            let middle = Some((bytes / 2, Some(bytes / 2 + 1023)));
            let mut reader = last.get_blob(&info.digest, middle).await.unwrap();
            let mut range = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut reader, &mut range)
                .await
                .unwrap();
            let ranged = started.elapsed();
            println!(
                "blobs round {round}: {nodes} node(s): upload {:.0} MiB/s ({:.2}x cp + sync), download to a file {:.0} MiB/s ({:.2}x cat), with its sha256 checked {:.0} MiB/s, first byte {:.1} ms, 1 KiB from the middle {:.1} ms",
                rate(upload),
                cp_sync.as_secs_f64() / upload.as_secs_f64(),
                rate(download),
                cat.as_secs_f64() / download.as_secs_f64(),
                rate(checked),
                first_byte.as_secs_f64() * 1e3,
                ranged.as_secs_f64() * 1e3,
            );
        }
    }
}

/// A download through a node without a copy (see the module's notes).
async fn relay() {
    let file = blob_file("COHORT_BENCH_RELAY_MIB");
    let (mib, bytes) = (file.mib, file.bytes);
    let (source, copy) = (file.source.clone(), file.copy.clone());
    let rate = |took: Duration| file.rate(took);
    let this = std::ffi::OsString::from(env!("CARGO_BIN_EXE_cohort"));
    let mut builds = vec![("this build", this)];
    if let Some(before) = std::env::var_os("COHORT_BENCH_BEFORE") {
        builds.push(("before", before));
    }
    for round in 1..=3 {
        builds.rotate_left(1);
        for (build, binary) in &builds {
            let back = start_node_from(binary, &["--node-id", "back"]);
            let front = start_node_from(
                binary,
                &[
                    "--node-id",
                    "front",
                    "--roles",
                    "front-end",
                    "--seed",
                    &gossip_of(&back),
                ],
            );
            let (b, f) = (Api::new(&back.url), Api::new(&front.url));
            while live_nodes(&f).await.len() < 2 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let file = tokio::fs::File::open(&source).await.unwrap();
            let info = b.put_blob_stream(file).await.unwrap();
            assert_eq!(info.bytes, bytes);
            // The front-end knows where it is (a HEAD copies nothing).
            while f.head_blob(&info.digest).await.ok().flatten().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            // The first byte of the body of another blob (one byte more),
            // to a plain HTTP/1.1 GET (one write, read to the body's first
            // byte), dropped after it; its copy is let finish.
            let file = tokio::fs::File::open(&source).await.unwrap();
            let other = (b.put_blob_stream(tokio::io::AsyncReadExt::chain(file, &b"+"[..])))
                .await
                .unwrap();
            while f.head_blob(&other.digest).await.ok().flatten().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let first_byte = tokio::task::spawn_blocking({
                let (url, digest) = (front.url.clone(), other.digest.clone());
                move || first_body_byte(&url, &format!("/v1/blobs/{digest}"))
            })
            .await
            .unwrap();
            wait_partial_gone(&front).await;
            let started = Instant::now();
            let _ = std::fs::remove_file(&copy);
            let mut reader = f.get_blob(&info.digest, None).await.unwrap();
            {
                use tokio::io::AsyncReadExt;
                let mut one = [0u8; 1];
                reader.read_exact(&mut one).await.unwrap();
            }
            let out = tokio::fs::File::create(&copy).await.unwrap();
            let mut out = tokio::io::BufWriter::with_capacity(1 << 20, out);
            tokio::io::copy(&mut reader, &mut out).await.unwrap();
            tokio::io::AsyncWriteExt::flush(&mut out).await.unwrap();
            let relayed = started.elapsed();
            assert_eq!(std::fs::metadata(&copy).unwrap().len(), bytes - 1);
            let started = Instant::now();
            f.get_blob_to_file(&info.digest, &copy).await.unwrap();
            let held = started.elapsed();
            println!(
                "relay round {round}, {build}: {mib} MiB through a node without a copy: first byte {:.1} ms, whole {:.2} s ({:.0} MiB/s); from its copy then, checked: {:.2} s ({:.0} MiB/s)",
                first_byte.as_secs_f64() * 1e3,
                relayed.as_secs_f64(),
                rate(relayed),
                held.as_secs_f64(),
                rate(held),
            );
        }
    }
}

/// How long a plain HTTP/1.1 GET of `path` from the node at `url` takes
/// to its body's first byte.
fn first_body_byte(url: &str, path: &str) -> Duration {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://");
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream.set_nodelay(true).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(
            n > 0,
            "the answer ended in its head: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
        if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
            assert!(
                seen.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&seen)
            );
            if seen.len() > end + 4 {
                return started.elapsed();
            }
        }
    }
}

/// Waits until the node at `node` has no blob copy under way (its
/// `blobs/partial/` empty): a download let go leaves its copy going.
async fn wait_partial_gone(node: &NodeProcess) {
    let partial = node.dir.path().join("blobs/partial");
    while std::fs::read_dir(&partial).is_ok_and(|mut d| d.next().is_some()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `bytes` of a fast pseudo-random sequence (xorshift) to `path`.
fn write_pseudo_random(path: &std::path::Path, bytes: u64) {
    use std::io::Write;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        for word in chunk.chunks_exact_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            word.copy_from_slice(&state.to_le_bytes());
        }
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    file.into_inner().unwrap().sync_all().unwrap();
}

/// A DAG of 10,000 trivial jobs on one node, end to end: one request,
/// then until the DAG's status says it ended; next to the same jobs with
/// no edges in one batch, in the same run.
async fn dag_end_to_end() {
    const N: usize = 10_000;
    let node = start_node(&[]);
    let client = Api::new(&node.url);
    let wasm = std::fs::read(format!("{}/fixture_depth.wasm", env!("COHORT_GUESTS_DIR"))).unwrap();
    let module = client.upload(wasm).await.unwrap();
    let parents = |i: usize| -> Vec<String> {
        let mut parents = match i {
            0..=9 => Vec::new(),
            _ => vec![i / 2, i - 1 - (i * 7) % 10, (i * 13) % i],
        };
        parents.sort_unstable();
        parents.dedup();
        parents.into_iter().map(|p| format!("j{p}")).collect()
    };
    // The longest path: the jobs that must run one after another.
    let mut depth = vec![0usize; N];
    for i in 0..N {
        let deepest = (parents(i).iter())
            .map(|p| depth[p[1..].parse::<usize>().unwrap()])
            .max();
        depth[i] = 1 + deepest.unwrap_or(0);
    }
    let longest = *depth.iter().max().unwrap();
    for edges in [false, true] {
        let request = DagRequest {
            jobs: (0..N)
                .map(|i| DagJobRequest {
                    name: format!("j{i}"),
                    job: SubmitRequest::new(&module),
                    after: if edges { parents(i) } else { Vec::new() },
                    ..DagJobRequest::default()
                })
                .collect(),
            ..DagRequest::default()
        };
        let started = Instant::now();
        let submitted = client.submit_dag(&request).await.unwrap();
        let accepted = started.elapsed();
        loop {
            let status = client.dag(submitted.id).await.unwrap();
            if status.state != "running" {
                assert_eq!(status.state, "succeeded");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = started.elapsed();
        let path = if edges { longest } else { 1 };
        println!(
            "dag of {N} trivial jobs, {}: accepted in {} ms, all succeeded in {} ms ({:.0} jobs/s; longest path {path} jobs, {:.2} ms a step)",
            if edges {
                "1 to 3 parents each"
            } else {
                "no edges"
            },
            accepted.as_millis(),
            took.as_millis(),
            N as f64 / took.as_secs_f64(),
            took.as_secs_f64() * 1000.0 / path as f64,
        );
    }
}

/// Schedules on one idle node: how late each tick's job is submitted
/// (the master's decision) and started (a worker's first attempt) after
/// the tick's time. Five one-second schedules, told apart by priority,
/// for `COHORT_BENCH_SCHEDULE_SECS` seconds (default 40).
async fn schedule_jitter() {
    const SCHEDULES: i32 = 5;
    let secs: u64 = std::env::var("COHORT_BENCH_SCHEDULE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let node = start_node(&[]);
    let client = Api::new(&node.url);
    let module = client.upload(echo_wasm()).await.unwrap();
    let mut created = Vec::new();
    for k in 0..SCHEDULES {
        let request = ScheduleRequest {
            name: format!("s{k}"),
            every_ms: Some(1_000),
            overlap: Some("allow_all".into()),
            job: SubmitRequest {
                priority: Some(k),
                ..SubmitRequest::new(&module)
            },
            ..ScheduleRequest::default()
        };
        created.push(client.create_schedule(&request).await.unwrap().created_at);
        // Spread the schedules' ticks over the second.
        tokio::time::sleep(Duration::from_millis(1000 / SCHEDULES as u64)).await;
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    for k in 0..SCHEDULES {
        client.pause_schedule(&format!("s{k}"), true).await.unwrap();
    }
    let mut decided = Histogram::<u64>::new(3).unwrap();
    let mut started = Histogram::<u64>::new(3).unwrap();
    let mut cursor = None;
    let mut jobs = Vec::new();
    loop {
        let page = client.jobs(None, 1000, cursor.as_deref()).await.unwrap();
        jobs.extend(page.jobs);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    for k in 0..SCHEDULES {
        let of_k = jobs.iter().filter(|job| job.priority == k);
        for (n, job) in of_k.enumerate() {
            let tick = created[k as usize] + (n as u64 + 1) * 1_000;
            decided
                .record(job.submitted_at.saturating_sub(tick))
                .unwrap();
            let record = client.job(job.id, 10_000).await.unwrap();
            if let Some(attempt) = record.attempts.first() {
                started
                    .record(attempt.started_at.saturating_sub(tick))
                    .unwrap();
            }
        }
    }
    println!(
        "schedule jitter ({} ticks of {SCHEDULES} one-second schedules, idle node): submitted after the tick p50 {} ms p99 {} ms max {} ms; first attempt started p50 {} ms p99 {} ms max {} ms",
        decided.len(),
        decided.value_at_quantile(0.5),
        decided.value_at_quantile(0.99),
        decided.max(),
        started.value_at_quantile(0.5),
        started.value_at_quantile(0.99),
        started.max(),
    );
}

struct NodeProcess {
    child: Child,
    url: String,
    /// Its data directory, removed with it.
    dir: tempfile::TempDir,
}

impl NodeProcess {
    /// The node's resident memory in bytes.
    fn rss(&self) -> u64 {
        rss_of(&self.child.id().to_string())
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_node(extra: &[&str]) -> NodeProcess {
    // Another build's binary (say, the commit before a change) for
    // before/after in one run.
    let binary =
        std::env::var_os("COHORT_BENCH_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_cohort").into());
    start_node_from(&binary, extra)
}

/// A node of the `cohort` at `binary`, with `extra` flags.
fn start_node_from(binary: &std::ffi::OsStr, extra: &[&str]) -> NodeProcess {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Process::new(binary)
        .args(["node", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(match std::env::var_os("COHORT_BENCH_NODE_LOGS") {
            Some(dir) => {
                let name = format!("node-{}.log", extra.get(1).unwrap_or(&"x"));
                Stdio::from(std::fs::File::create(std::path::Path::new(&dir).join(name)).unwrap())
            }
            None => Stdio::null(),
        })
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let url = loop {
        let line = lines.next().expect("the node prints its address").unwrap();
        if let Some(url) = line.split("listening on ").nth(1) {
            break url.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    NodeProcess { child, url, dir }
}

/// Longest a fresh node may take to accept its first job.
const NODE_READY_GIVE_UP: Duration = Duration::from_secs(30);

/// Submits one trivial job of `module` until the node accepts it (a fresh
/// node refuses jobs with `master_unavailable` until it hosts the master).
async fn wait_master(client: &Api, module: &str) {
    let one = echo_batch(module, 0, 1);
    let started = Instant::now();
    while !matches!(
        client.submit_batch(&one).await.unwrap().results[..],
        [BatchItem::Accepted(_)]
    ) {
        assert!(
            started.elapsed() < NODE_READY_GIVE_UP,
            "no master within {NODE_READY_GIVE_UP:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Batch `b` of `size` trivial jobs, each with its own number as input.
fn echo_batch(module: &str, b: usize, size: usize) -> BatchRequest {
    BatchRequest {
        jobs: (0..size)
            .map(|n| SubmitRequest {
                module: module.to_string(),
                input: Some(format!("{}", b * size + n)),
                ..SubmitRequest::default()
            })
            .collect(),
    }
}

fn echo_wasm() -> Vec<u8> {
    std::fs::read(format!("{}/fixture_echo.wasm", env!("COHORT_GUESTS_DIR"))).unwrap()
}

async fn succeeded(client: &Api) -> u64 {
    metric(client, "cohort_jobs{state=\"succeeded\"}").await
}

/// The value of metric `name` (with its labels) on the node, 0 if absent.
async fn metric(client: &Api, name: &str) -> u64 {
    let (_, body) = client
        .call(Method::GET, "/metrics", "text/plain", Default::default())
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&body);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn throughput() {
    // Snapshots by the master's shadow (the default) against on its own
    // thread: the shadow applies every event a second time.
    for _ in 0..2 {
        node_throughput(100_000, &[]).await;
        node_throughput(100_000, &["--snapshots", "master"]).await;
    }
}

/// One node started with `args`: `jobs` trivial jobs in batches of 1000
/// from 4 clients; prints and returns jobs/s submit->result.
async fn node_throughput(jobs: usize, args: &[&str]) -> f64 {
    const BATCH: usize = FILL_BATCH;
    let node = start_node(args);
    let client = Api::new(&node.url);
    let module = client.upload(echo_wasm()).await.unwrap();
    wait_master(&client, &module).await;
    // Warm up: compile caches, connections.
    let warm = BatchRequest {
        jobs: vec![
            SubmitRequest {
                module: module.clone(),
                ..SubmitRequest::default()
            };
            BATCH
        ],
    };
    client.submit_batch(&warm).await.unwrap();
    // The warm-up batch and the job `wait_master` submitted.
    let warm = BATCH as u64 + 1;
    while succeeded(&client).await < warm {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    fill(std::slice::from_ref(&node.url), &module, jobs).await;
    let submitted = started.elapsed();
    while succeeded(&client).await < jobs as u64 + warm {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    println!(
        "throughput{}: {jobs} trivial jobs submitted in {:.2?} ({:.0}/s), all succeeded after {:.2?}: {:.0} jobs/s submit->result",
        if args.is_empty() {
            String::new()
        } else {
            format!(" ({})", args.join(" "))
        },
        submitted,
        jobs as f64 / submitted.as_secs_f64(),
        elapsed,
        jobs as f64 / elapsed.as_secs_f64()
    );
    jobs as f64 / elapsed.as_secs_f64()
}

/// Jobs per fsync the guard requires at least: group commit and the
/// worker's prefetch make one node run several jobs per journal sync
/// (about 8 on this machine); below one, the rate follows the disk's
/// sync latency again.
const GUARD_JOBS_PER_SYNC_MIN: f64 = 1.0;

/// The CI regression guard (only when named: `-- guard`): a short
/// throughput run against a baseline measured in the same run on the same
/// disk, one small journal append and fsync at a time. Machines vary 2-3x
/// from run to run, so it fails only on the ratio, with a generous bound.
async fn guard() {
    const APPENDS: u32 = 2_000;
    let dir = tempfile::tempdir().unwrap();
    let storage = FsStorage::open(&dir.path().join("journal")).unwrap();
    let (mut journal, _) = Journal::open(storage).unwrap();
    let started = Instant::now();
    for _ in 0..APPENDS {
        journal.append(1, &[0u8; 64]).unwrap();
        journal.sync().unwrap();
    }
    let syncs = f64::from(APPENDS) / started.elapsed().as_secs_f64();
    println!("guard: raw journal, one 64-byte append + fsync at a time: {syncs:.0}/s");
    let jobs = node_throughput(20_000, &[]).await;
    let ratio = jobs / syncs;
    println!(
        "guard: one node runs {ratio:.1} trivial jobs per raw fsync (at least {GUARD_JOBS_PER_SYNC_MIN})"
    );
    if ratio < GUARD_JOBS_PER_SYNC_MIN {
        eprintln!("guard: FAILED: throughput fell to {ratio:.2} jobs per raw fsync");
        std::process::exit(1);
    }
}

async fn latency() {
    const JOBS: usize = 2000;
    let node = start_node(&[]);
    let client = Api::new(&node.url);
    let module = client.upload(echo_wasm()).await.unwrap();
    let (total, acked) = one_at_a_time(&client, &module, JOBS).await;
    println!(
        "latency (idle node, {JOBS} jobs one at a time): submit->result p50 {} µs p99 {} µs; submit->202 p50 {} µs p99 {} µs",
        total.value_at_quantile(0.5),
        total.value_at_quantile(0.99),
        acked.value_at_quantile(0.5),
        acked.value_at_quantile(0.99),
    );
}

fn spec(n: u64) -> JobSpec {
    JobSpec {
        module: [7; 32],
        input: n.to_le_bytes().to_vec(),
        timeout_ms: 60_000,
        memory_bytes: None,
        max_attempts: 3,
        priority: 0,
        idempotency_key: None,
    }
}

async fn commit(core: CoreKind) {
    const EVENTS: u64 = 200_000;
    const SUBMITTERS: u64 = 256;
    let dir = tempfile::tempdir().unwrap();
    let options = master_options(dir.path(), core, u64::MAX, true);
    let (replication, begun) = Replication::solo(dir.path()).await.unwrap();
    let (handle, _) =
        tokio::task::spawn_blocking(move || master::start(options, replication, begun))
            .await
            .unwrap()
            .unwrap();
    let syncs = || handle.replication_status().map_or(0, |s| s.syncs);
    let syncs_before = syncs();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for s in 0..SUBMITTERS {
        let handle = handle.clone();
        tasks.push(tokio::spawn(async move {
            for n in (s..EVENTS).step_by(SUBMITTERS as usize) {
                let request = RequestId { origin: 1, seq: n };
                let submit = Command::Submit {
                    spec: spec(n),
                    request,
                    options: JobOptions::default(),
                };
                handle.command(submit).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let syncs = syncs() - syncs_before;
    println!(
        "commit ({core:?} master, {SUBMITTERS} concurrent submitters): {EVENTS} events durable in {elapsed:.2?}: {:.0} events/s, {syncs} fsyncs ({:.0} events per fsync)",
        EVENTS as f64 / elapsed.as_secs_f64(),
        EVENTS as f64 / syncs.max(1) as f64
    );
    drop(handle);
}

fn rss_bytes() -> u64 {
    rss_of("self")
}

/// Resident memory of process `pid` ("self": this one).
fn rss_of(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Submission events written straight to a journal in `dir`, as a master
/// would have journaled them; the journal's size in bytes.
fn write_submissions(dir: &std::path::Path, events: u64) -> u64 {
    let storage = FsStorage::open(&dir.join("journal")).unwrap();
    let (mut journal, _) = Journal::open(storage).unwrap();
    for n in 0..events {
        let event = Event {
            at: 1_800_000_000_000 + n,
            kind: EventKind::Submitted {
                id: n + 1,
                spec: spec(n),
                request: Some(RequestId { origin: 1, seq: n }),
                options: JobOptions::default(),
            },
        };
        journal.append(1, &encode(&event)).unwrap();
    }
    journal.sync().unwrap();
    std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Events of `jobs` trivial jobs that ran and succeeded on one worker,
/// each submitted with a request id, written straight to a journal in
/// `dir`, ending with the request ids' expiry (as five minutes later).
fn write_finished(dir: &std::path::Path, jobs: u64) {
    const WORKER: &str = "n1/worker";
    let storage = FsStorage::open(&dir.join("journal")).unwrap();
    let (mut journal, _) = Journal::open(storage).unwrap();
    let start = 1_800_000_000_000;
    let mut append = |at: u64, kind: EventKind| {
        journal.append(1, &encode(&Event { at, kind })).unwrap();
    };
    append(
        start,
        EventKind::WorkerSeen {
            worker: WORKER.into(),
            slots: 16,
        },
    );
    for n in 0..jobs {
        let (id, at) = (n + 1, start + n);
        append(
            at,
            EventKind::Submitted {
                id,
                spec: spec(n),
                request: Some(RequestId { origin: 1, seq: n }),
                options: JobOptions::default(),
            },
        );
        append(
            at,
            EventKind::Assigned {
                id,
                attempt: 1,
                worker: WORKER.into(),
                lease_until: at + 70_000,
            },
        );
        append(
            at + 1,
            EventKind::Finished {
                id,
                attempt: 1,
                outcome: cohort_master::Outcome::Succeeded(n.to_le_bytes().to_vec()),
                duration_ms: 0,
                log_tail: String::new(),
                // What an empty job's attempt reports.
                usage: Some(cohort_master::Usage {
                    cpu_us: 5,
                    memory_peak_bytes: 1 << 20,
                    egress_bytes: 0,
                }),
            },
        );
    }
    append(
        start + jobs,
        EventKind::RequestsExpired {
            before: start + jobs,
        },
    );
    journal.sync().unwrap();
}

/// Finished jobs [`history`] and [`history_node`] hold: the default cap.
const HISTORY_JOBS: u64 = 1_000_000;

/// Jobs submitted at once by [`history_node`] before it waits for
/// them to finish.
const HISTORY_WAVE: u64 = 20_000;

/// The master's memory with 1,000,000 finished trivial jobs (the default
/// history cap): a master replays their events and stops (a clean stop
/// snapshots), then one starts from that snapshot alone, as a node's
/// would after a restart; how much its resident memory grew.
async fn history(core: CoreKind) {
    let dir = tempfile::tempdir().unwrap();
    write_finished(dir.path(), HISTORY_JOBS);
    let (handle, report) = master_in(dir.path(), core, u64::MAX, false).await;
    println!(
        "history ({core:?} master): {} events of {HISTORY_JOBS} finished jobs replayed in {:.2?}",
        report.events_replayed, report.duration
    );
    handle.shutdown().await;
    let component = compiled_master().await;
    let rss_before = rss_bytes();
    let options = MasterOptions {
        component: Some(component),
        ..master_options(dir.path(), core, u64::MAX, false)
    };
    let (replication, begun) = Replication::solo(dir.path()).await.unwrap();
    let started = Instant::now();
    let (handle, _) =
        tokio::task::spawn_blocking(move || master::start(options, replication, begun))
            .await
            .unwrap()
            .unwrap();
    let restored = started.elapsed();
    let rss = rss_bytes().saturating_sub(rss_before);
    let done = stats(&handle).await.jobs[JobState::Succeeded as usize];
    assert_eq!(done, HISTORY_JOBS, "every job is held, succeeded");
    let snapshot_bytes = cohort::journal::durable::latest_snapshot(dir.path())
        .unwrap()
        .map_or(0, |s| s.state.len());
    // A filtered listing that matches none looks at its most jobs, every
    // one finished, packed and read in place to be matched.
    let listing = cohort_master::Query::Jobs {
        filter: cohort_master::JobFilter {
            error: Some("no such text".into()),
            ..Default::default()
        },
        after: None,
        limit: 100,
        newest_first: true,
    };
    let mut times = Vec::new();
    for _ in 0..5 {
        let asked = Instant::now();
        handle.query(listing.clone()).await.unwrap();
        times.push(asked.elapsed());
    }
    let (least, greatest, median) = spread(&mut times);
    println!(
        "history ({core:?} master): a listing by error text that matches none, {} jobs looked at: {least:.1?}–{greatest:.1?}, median {median:.1?} (5 runs)",
        cohort_master::limits::LIST_SCAN_MAX
    );
    let linear = handle
        .counters()
        .memory_bytes
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "history ({core:?} master): {done} finished jobs restored from a {} MiB snapshot in {restored:.2?}; resident memory grew {} MiB; the component's memory {} MiB",
        snapshot_bytes >> 20,
        rss >> 20,
        linear >> 20
    );
    handle.shutdown().await;
}

/// [`history`] on a node: 1,000,001 trivial jobs run in waves; its resident
/// memory and its master component's.
async fn history_node() {
    // A node that ran them: its whole process, with every request id
    // still remembered (they live five minutes), its journal's window of
    // recent entries and, by default, the shadow's second copy.
    for args in [&[][..], &["--snapshots", "master"]] {
        let node = start_node(args);
        let client = Api::new(&node.url);
        let module = client.upload(echo_wasm()).await.unwrap();
        wait_master(&client, &module).await;
        // In waves, so no backlog of queued jobs raises the high-water
        // mark: the Wasm master's memory never shrinks. The master holds
        // at most `HISTORY_JOBS` finished jobs (the default cap), the oldest
        // purged beyond it.
        for wave in 1..=HISTORY_JOBS / HISTORY_WAVE {
            fill(
                std::slice::from_ref(&node.url),
                &module,
                HISTORY_WAVE as usize,
            )
            .await;
            while succeeded(&client).await < (wave * HISTORY_WAVE).min(HISTORY_JOBS) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        println!(
            "history (a node{}): {} trivial jobs ran in waves of {HISTORY_WAVE}; the node's resident memory is {} MiB, its master component's {} MiB",
            if args.is_empty() {
                String::new()
            } else {
                format!(", {}", args.join(" "))
            },
            HISTORY_JOBS + 1,
            node.rss() >> 20,
            metric(&client, "cohort_master_memory_bytes").await >> 20
        );
    }
}

/// A master in `dir` (in-process), snapshotting every `snapshot_every`
/// events, with or without a shadow, with room for more than the million
/// jobs the large benches write.
fn master_options(
    dir: &std::path::Path,
    core: CoreKind,
    snapshot_every: u64,
    shadow: bool,
) -> MasterOptions {
    MasterOptions {
        data_dir: dir.to_path_buf(),
        cache_dir: dir.to_path_buf(),
        config: Config {
            queue_max: 2_000_000,
            ..Config::default()
        },
        core,
        snapshot_every,
        live_workers: Vec::new(),
        component: None,
        shadow,
    }
}

/// The master (in-process) recovered from `dir` ([`master_options`]).
async fn master_in(
    dir: &std::path::Path,
    core: CoreKind,
    snapshot_every: u64,
    shadow: bool,
) -> (master::MasterHandle, master::RecoveryReport) {
    let options = master_options(dir, core, snapshot_every, shadow);
    let (replication, begun) = Replication::solo(dir).await.unwrap();
    tokio::task::spawn_blocking(move || master::start(options, replication, begun))
        .await
        .unwrap()
        .unwrap()
}

/// The master component, compiled (a node does it when it starts, not
/// when it takes the master over).
async fn compiled_master() -> master::core::MasterComponent {
    tokio::task::spawn_blocking(|| master::core::MasterComponent::load(None))
        .await
        .unwrap()
        .unwrap()
}

/// The master's counters over its whole state.
async fn stats(handle: &master::MasterHandle) -> cohort_master::Stats {
    match handle.query(cohort_master::Query::Stats).await.unwrap() {
        cohort_master::Answer::Stats(stats) => stats,
        other => panic!("{other:?}"),
    }
}

/// A master holding 1,000,000 queued jobs switched to the FIFO example
/// build in place, while a caller asks it for its stats in a loop: the
/// longest the caller waited, and the switch's own pause.
async fn upgrade_large() {
    const EVENTS: u64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    write_submissions(dir.path(), EVENTS);
    let (handle, _) = master_in(dir.path(), CoreKind::Wasm, u64::MAX, true).await;
    let fifo = std::fs::read(concat!(env!("COHORT_GUESTS_DIR"), "/fifo_master.wasm")).unwrap();
    let digest = cohort::master::upgrade::MasterStore::new(dir.path())
        .put(&fifo)
        .unwrap();
    // Compiled once first, as the upload's checks do on a real node.
    let data_dir = dir.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        cohort::master::handover::check_component(&fifo, Some(&data_dir)).unwrap();
    })
    .await
    .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let asking = {
        let (stop, handle) = (stop.clone(), handle.clone());
        tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let started = Instant::now();
                handle.query(cohort_master::Query::Stats).await.unwrap();
                longest = longest.max(started.elapsed());
            }
            longest
        })
    };
    let started = Instant::now();
    let report = handle
        .upgrade(cohort::master::upgrade::Build::Uploaded(digest))
        .await
        .unwrap();
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let longest = asking.await.unwrap();
    assert!(report.switched);
    println!(
        "upgrade of a master holding {EVENTS} queued jobs: {took:.2?} in all, the switch paused the master {} ms; the longest a caller waited meanwhile {longest:.2?}",
        report.pause_ms
    );
    handle.shutdown().await;
}

/// A Wasm master holding 1,000,000 queued jobs snapshots every 10,000
/// events while 4 callers submit one job at a time each for 12 s: the
/// submissions' round trips with no periodic snapshot (the yardstick),
/// with the snapshots taken on the master's thread, then by its shadow.
async fn snapshot_pause() {
    const JOBS: u64 = 1_000_000;
    const EVERY: u64 = 10_000;
    const CALLERS: u64 = 4;
    const WINDOW: Duration = Duration::from_secs(12);
    let modes = [
        ("none taken (the yardstick)", u64::MAX, false),
        ("taken on the master's thread", EVERY, false),
        ("taken by the shadow", EVERY, true),
    ];
    for (mode, every, shadow) in modes {
        let dir = tempfile::tempdir().unwrap();
        write_submissions(dir.path(), JOBS);
        let rss_before = rss_bytes();
        let (handle, _) = master_in(dir.path(), CoreKind::Wasm, every, shadow).await;
        // The master's own longest pass, over the window alone.
        let longest_pass = &handle.counters().pass_longest_nanos;
        longest_pass.store(0, std::sync::atomic::Ordering::Relaxed);
        let started = Instant::now();
        let mut callers = Vec::new();
        for caller in 0..CALLERS {
            let handle = handle.clone();
            callers.push(tokio::spawn(async move {
                let mut times = Histogram::<u64>::new(3).unwrap();
                let verbose = std::env::var_os("COHORT_BENCH_VERBOSE").is_some();
                let mut seq = JOBS + caller;
                while started.elapsed() < WINDOW {
                    let submit = Command::Submit {
                        spec: spec(seq),
                        request: RequestId { origin: 2, seq },
                        options: JobOptions::default(),
                    };
                    let sent = Instant::now();
                    handle.command(submit).await.unwrap();
                    times.record(sent.elapsed().as_micros() as u64).unwrap();
                    if verbose && sent.elapsed() > Duration::from_millis(20) {
                        println!(
                            "  slow: sent at {:.3?}, took {:.1?}",
                            sent - started,
                            sent.elapsed()
                        );
                    }
                    seq += CALLERS;
                }
                times
            }));
        }
        let mut times = Histogram::<u64>::new(3).unwrap();
        for caller in callers {
            times.add(caller.await.unwrap()).unwrap();
        }
        let snapshots = handle
            .counters()
            .snapshots
            .load(std::sync::atomic::Ordering::Relaxed);
        let rss = rss_bytes().saturating_sub(rss_before);
        let longest_pass = longest_pass.load(std::sync::atomic::Ordering::Relaxed);
        let compacted = cohort::journal::durable::latest_snapshot(dir.path())
            .unwrap()
            .map_or(0, |s| s.index);
        println!(
            "snapshot pause (snapshots {mode}): {} submissions in {WINDOW:?} by {CALLERS} callers, p50 {} µs, p99 {} µs, p99.9 {} µs, longest {:.1} ms; the master's longest pass {:.1} ms; {snapshots} snapshots asked, the journal compacted up to entry {compacted}; resident memory grew {} MiB",
            times.len(),
            times.value_at_quantile(0.5),
            times.value_at_quantile(0.99),
            times.value_at_quantile(0.999),
            times.max() as f64 / 1000.0,
            longest_pass as f64 / 1e6,
            rss >> 20,
        );
        handle.shutdown().await;
    }
}

async fn recovery(core: CoreKind) {
    const EVENTS: u64 = 1_000_000;
    let dir = tempfile::tempdir().unwrap();
    let written = Instant::now();
    let journal_bytes = write_submissions(dir.path(), EVENTS);
    println!(
        "recovery: wrote {EVENTS} submission events ({} MiB) in {:.2?}",
        journal_bytes >> 20,
        written.elapsed()
    );
    // A node compiles the master component when it starts, not when it
    // takes the master over.
    let compiled = Instant::now();
    let component = compiled_master().await;
    let compiled = compiled.elapsed();
    let rss_before = rss_bytes();
    let started = Instant::now();
    let (replication, begun) = Replication::solo(dir.path()).await.unwrap();
    let read = started.elapsed();
    let options = MasterOptions {
        component: Some(component),
        ..master_options(dir.path(), core, u64::MAX, false)
    };
    let (handle, report) =
        tokio::task::spawn_blocking(move || master::start(options, replication, begun))
            .await
            .unwrap()
            .unwrap();
    let elapsed = started.elapsed();
    let rss_after = rss_bytes();
    println!(
        "recovery ({core:?} master): {elapsed:.2?} in all: opening the journal and taking over {read:.2?}, reading and replaying the events {:.2?} (compiling the component beforehand: {compiled:.2?})",
        report.duration
    );
    let stats = stats(&handle).await;
    assert_eq!(stats.jobs[0], EVENTS, "every job is queued");
    println!(
        "recovery ({core:?} master): {} events replayed in {elapsed:.2?}; resident memory grew {} MiB with {} queued jobs",
        report.events_replayed,
        rss_after.saturating_sub(rss_before) >> 20,
        stats.jobs[0]
    );
    // A clean stop snapshots the whole state: how long the master thread
    // is busy with it at this size.
    let started = Instant::now();
    handle.shutdown().await;
    let snapshot_bytes: u64 = std::fs::read_dir(dir.path().join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .max()
        .unwrap_or(0);
    println!(
        "snapshot ({core:?} master) of {EVENTS} queued jobs: {} MiB written in {:.2?} (flush, snapshot, fsync, compaction)",
        snapshot_bytes >> 20,
        started.elapsed()
    );
}

fn gossip_of(node: &NodeProcess) -> String {
    node.url.trim_start_matches("http://").to_string()
}

async fn live_nodes(client: &Api) -> Vec<String> {
    client
        .cluster()
        .await
        .map(|c| {
            c.nodes
                .into_iter()
                .filter(|n| n.status == "live")
                .map(|n| n.id)
                .collect()
        })
        .unwrap_or_default()
}

/// Three nodes with every role (and `extra` flags), n1 the oldest, once
/// all three workers are known to the master.
async fn three_nodes(extra: &[&str]) -> [NodeProcess; 3] {
    let nodes = start_three(extra);
    wait_three(&Api::new(&nodes[2].url)).await;
    nodes
}

/// Starts three nodes with every role (and `extra` flags), n1 the oldest.
fn start_three(extra: &[&str]) -> [NodeProcess; 3] {
    let with = |name: &'static str, seed: Option<&str>| {
        let mut args = vec!["--node-id", name];
        if let Some(seed) = seed {
            args.extend(["--seed", seed]);
        }
        args.extend(extra);
        start_node(&args)
    };
    let n1 = with("n1", None);
    let seed = gossip_of(&n1);
    let n2 = with("n2", Some(&seed));
    let n3 = with("n3", Some(&seed));
    [n1, n2, n3]
}

/// Waits until `client`'s node sees three workers and the master on n1.
async fn wait_three(client: &Api) {
    while client.cluster().await.map_or(true, |c| {
        c.workers.len() < 3 || c.master_node != "n1" || c.voters.len() < 3
    }) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn cluster() {
    // With warm standbys (the default) and without: each standby applies
    // every event once more, on the same two cores here.
    for standby in ["on", "off", "on", "off"] {
        let nodes = three_nodes(&["--standby", standby]).await;
        let clients: Vec<Api> = nodes.iter().map(|n| Api::new(&n.url)).collect();
        let rate = cluster_throughput(&clients).await;
        println!(
            "cluster throughput (3 nodes on one 2-CPU machine, journal on a majority of 3 voters, standby {standby}): {rate:.0} jobs/s submit->result"
        );
    }
    let [n1, _n2, mut n3] = three_nodes(&[]).await;
    let clients: Vec<Api> = [&n1, &n3].iter().map(|n| Api::new(&n.url)).collect();
    let module = clients[1].upload(echo_wasm()).await.unwrap();

    // Latency through n3 (the master is on n1): one proxy hop each way.
    let (total, _) = one_at_a_time(&clients[1], &module, 1000).await;
    println!(
        "cluster latency (1000 jobs one at a time through a node that does not host the master): submit->result p50 {} µs p99 {} µs",
        total.value_at_quantile(0.5),
        total.value_at_quantile(0.99)
    );

    // Failure detection: kill -9 n3, time until n1 stops listing it live.
    let killed = Instant::now();
    let _ = n3.child.kill();
    let _ = n3.child.wait();
    while live_nodes(&clients[0]).await.iter().any(|n| n == "n3") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!(
        "failure detection (defaults: gossip every 100 ms, phi threshold 8): a killed node left the live set after {:.2?}",
        killed.elapsed()
    );
}

/// `jobs` jobs one at a time through `client` (after 100 to warm up):
/// submit->result and submit->202, in µs.
async fn one_at_a_time(
    client: &Api,
    module: &str,
    jobs: usize,
) -> (Histogram<u64>, Histogram<u64>) {
    let mut total = Histogram::<u64>::new(3).unwrap();
    let mut acked = Histogram::<u64>::new(3).unwrap();
    for n in 0..jobs + 100 {
        let started = Instant::now();
        let request = SubmitRequest {
            module: module.to_string(),
            input: Some(n.to_string()),
            ..SubmitRequest::default()
        };
        let id = client.submit(&request).await.unwrap().id;
        let ack = started.elapsed();
        let path = format!("/v1/jobs/{id}/result?wait_ms=10000");
        client
            .call(Method::GET, &path, "text/plain", Default::default())
            .await
            .unwrap();
        if n >= 100 {
            total.record(started.elapsed().as_micros() as u64).unwrap();
            acked.record(ack.as_micros() as u64).unwrap();
        }
    }
    (total, acked)
}

/// The same cluster measures with and without a cluster key, after the
/// in-process cost of sealing and opening one node-to-node exchange.
async fn security() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    cohort::security::key::write_new(&key).unwrap();
    {
        use cohort::peer::{answer_context, request_context};
        use cohort::security::key::Purpose;
        use cohort::security::seal::Freshness;
        const ROUNDS: u32 = 200_000;
        let keys = cohort::security::Keyring::load(&key).unwrap();
        let (client, server) = (
            cohort::security::Sealer::new(keys, "cohort"),
            cohort::security::Sealer::new(cohort::security::Keyring::load(&key).unwrap(), "cohort"),
        );
        for size in [256usize, 4096] {
            let body = vec![7u8; size];
            let started = Instant::now();
            for _ in 0..ROUNDS {
                let context = request_context(b"POST", b"/internal/v1/master");
                let (request, _) = client.seal(Purpose::Http, &context, &body);
                let opened = server
                    .open(Purpose::Http, &context, &request, Freshness::Once)
                    .unwrap();
                let status = 200u16.to_be_bytes();
                let (answer, _) = server.seal(
                    Purpose::Http,
                    &answer_context(&opened.nonce, &status),
                    &body,
                );
                client
                    .open(
                        Purpose::Http,
                        &answer_context(&opened.nonce, &status),
                        &answer,
                        Freshness::Bound,
                    )
                    .unwrap();
            }
            println!(
                "security: seal + open of a {size}-byte request and its {size}-byte answer (replay guard included): {:.2} µs",
                started.elapsed().as_secs_f64() * 1e6 / ROUNDS as f64
            );
        }
    }
    let key_arg = key.to_str().unwrap();
    let rounds: u32 = std::env::var("COHORT_BENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    for round in 1..=rounds {
        for secured in [false, true] {
            let extra: &[&str] = if secured {
                &["--cluster-key", key_arg]
            } else {
                &[]
            };
            let nodes = start_three(extra);
            let token = secured.then(|| {
                cohort::security::token::mint(
                    "bench",
                    &[cohort::security::token::Scope::Admin],
                    None,
                )
            });
            if let Some(minted) = &token {
                add_token(&nodes[0].url, &key, &minted.record).await;
            }
            let token_text = token.as_ref().map(|m| m.token.as_str());
            let clients: Vec<Api> = nodes
                .iter()
                .map(|n| Api::with_options(&n.url, token_text, None).unwrap())
                .collect();
            wait_three(&clients[2]).await;
            let rate = cluster_throughput(&clients).await;
            let module = clients[2].upload(echo_wasm()).await.unwrap();
            let (latency, _) = one_at_a_time(&clients[2], &module, 1000).await;
            println!(
                "security round {round}, {}: cluster throughput {rate:.0} jobs/s; one at a time through a proxy p50 {} µs p99 {} µs",
                if secured {
                    "cluster key + token"
                } else {
                    "no key"
                },
                latency.value_at_quantile(0.5),
                latency.value_at_quantile(0.99),
            );
        }
    }
}

/// Records `record` through the sealed internal route of the node at
/// `url` (retried until its master answers).
async fn add_token(url: &str, key: &std::path::Path, record: &cohort_master::TokenRecord) {
    use cohort::api::auth::{TokenCreateRequest, TokenOp};
    let keys = cohort::security::Keyring::load(key).unwrap();
    let peer = cohort::peer::Peer::node(Some(std::sync::Arc::new(cohort::security::Sealer::new(
        keys, "cohort",
    ))));
    let op = TokenOp::Create(TokenCreateRequest {
        id: record.id.clone(),
        name: record.name.clone(),
        scopes: record.scopes.clone(),
        sha256: cohort::runtime::Digest::from(record.hash).to_string(),
        namespace: None,
    });
    loop {
        let answer = peer
            .post_internal(
                &format!("{url}/internal/v1/tokens"),
                encode(&op).into(),
                Duration::from_secs(10),
            )
            .await;
        if answer.is_ok_and(|(status, _)| status.is_success()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Jobs per second submit->result, batches through all three front-ends.
async fn cluster_throughput(clients: &[Api]) -> f64 {
    const JOBS: usize = 60_000;
    const BATCH: usize = 1000;
    let module = clients[2].upload(echo_wasm()).await.unwrap();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let module = module.clone();
        tasks.push(tokio::spawn(async move {
            for b in (c..JOBS / BATCH).step_by(3) {
                let batch = echo_batch(&module, b, BATCH);
                client.submit_batch(&batch).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    while succeeded(&clients[0]).await < JOBS as u64 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    JOBS as f64 / started.elapsed().as_secs_f64()
}

/// soak (only when named): three nodes take a steady load with no fault
/// for `COHORT_SOAK_SECS` (default 1800) at `COHORT_SOAK_RATE` jobs/s
/// (default 4000, about half of what three nodes sustain on 2 CPUs), spread
/// over the three front-ends. Every second it asks where the master is; a
/// master that moved or an epoch that changed is a false take-over (no
/// fault was injected). Prints the epochs and masters seen, the rate held,
/// failed submissions and the worst submission round trip per minute.
/// `COHORT_SOAK_HOGS=N` runs N busy-looping processes beside the nodes for
/// the whole soak (a machine shared with other work); with
/// `COHORT_BENCH_NODE_LOGS=DIR`, the nodes' logs say what held a thread
/// past the lease ("busy for longer than the lease").
async fn soak() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let secs = env("COHORT_SOAK_SECS", 1800);
    let rate = env("COHORT_SOAK_RATE", 4000);
    // Extra node arguments, e.g. `--snapshots master` to compare.
    let args = std::env::var("COHORT_SOAK_ARGS").unwrap_or_default();
    let args: Vec<&str> = args.split_whitespace().collect();
    let nodes = three_nodes(&args).await;
    let clients: Vec<Api> = nodes.iter().map(|n| Api::new(&n.url)).collect();
    let module = clients[0].upload(echo_wasm()).await.unwrap();
    let hogs = Hogs::start(env("COHORT_SOAK_HOGS", 0));
    // Batches of `BATCH` every `BATCH / rate` seconds, round robin.
    const BATCH: usize = 100;
    let every = Duration::from_secs_f64(BATCH as f64 / rate as f64);
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Submission round trips this minute, in µs.
    let minute_times =
        std::sync::Arc::new(std::sync::Mutex::new(Histogram::<u64>::new(3).unwrap()));
    let started = Instant::now();
    let end = started + Duration::from_secs(secs);
    let submitter = {
        let (clients, module, failed, minute_times) = (
            clients.clone(),
            module.clone(),
            failed.clone(),
            minute_times.clone(),
        );
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(every);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sent = 0usize;
            let mut in_flight = tokio::task::JoinSet::new();
            while Instant::now() < end {
                ticker.tick().await;
                let client = clients[sent % clients.len()].clone();
                let batch = echo_batch(&module, sent, BATCH);
                let (failed, minute_times) = (failed.clone(), minute_times.clone());
                in_flight.spawn(async move {
                    let asked = Instant::now();
                    if client.submit_batch(&batch).await.is_err() {
                        failed.fetch_add(BATCH as u64, std::sync::atomic::Ordering::Relaxed);
                    }
                    let took = asked.elapsed().as_micros() as u64;
                    let _ = minute_times.lock().unwrap().record(took);
                });
                sent += 1;
                while in_flight.try_join_next().is_some() {}
            }
            while in_flight.join_next().await.is_some() {}
            sent * BATCH
        })
    };
    let mut epochs = std::collections::BTreeSet::new();
    let mut masters = std::collections::BTreeSet::new();
    let mut minute = Instant::now();
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let Ok(cluster) = clients[2].cluster().await {
            epochs.insert(cluster.master_epoch);
            masters.insert(cluster.master_node);
        }
        if minute.elapsed() >= Duration::from_secs(60) {
            minute = Instant::now();
            let times = {
                let mut times = minute_times.lock().unwrap();
                let taken = times.clone();
                times.reset();
                taken
            };
            println!(
                "soak: {:>4} s, {} jobs done; submission round trips this minute: p50 {:.1} ms, p99 {:.1} ms, worst {:.1} ms",
                started.elapsed().as_secs(),
                succeeded(&clients[0]).await,
                times.value_at_quantile(0.5) as f64 / 1000.0,
                times.value_at_quantile(0.99) as f64 / 1000.0,
                times.max() as f64 / 1000.0,
            );
            let mut memory = Vec::new();
            for (node, client) in nodes.iter().zip(&clients) {
                let component = metric(client, "cohort_master_memory_bytes").await;
                let hosting = match component {
                    0 => String::new(),
                    bytes => format!(" (master component {} MiB)", bytes >> 20),
                };
                let rss = node.rss() >> 20;
                memory.push(format!("{rss} MiB{hosting}"));
            }
            println!("soak: resident memory of n1, n2, n3: {}", memory.join(", "));
        }
    }
    let submitted = submitter.await.unwrap();
    let failed = failed.load(std::sync::atomic::Ordering::Relaxed);
    let done = started.elapsed();
    println!(
        "soak ({secs} s at {rate} jobs/s asked, 3 nodes, no fault, {} busy loops beside): {submitted} submitted ({:.0} jobs/s held), {failed} failed; epochs seen {epochs:?}, masters seen {masters:?}: {} take-overs",
        hogs.0.len(),
        submitted as f64 / done.as_secs_f64(),
        epochs.len().saturating_sub(1)
    );
}

/// Busy-looping processes, killed when dropped: other work on the machine.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(count: u64) -> Self {
        Self(
            (0..count)
                .map(|_| {
                    Process::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .spawn()
                        .expect("sh starts")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for hog in &mut self.0 {
            let _ = hog.kill();
            let _ = hog.wait();
        }
    }
}

/// Three nodes with the master on n1, a client of n3 (the youngest) and a
/// trivial job it has submitted 200 times, one at a time, to warm up.
async fn warm_three() -> ([NodeProcess; 3], Api, SubmitRequest) {
    let nodes = three_nodes(&[]).await;
    let client = Api::new(&nodes[2].url);
    let module = client.upload(echo_wasm()).await.unwrap();
    let request = SubmitRequest {
        module,
        ..SubmitRequest::default()
    };
    // A joining node decides nothing in its first second; start later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for _ in 0..200 {
        client.submit(&request).await.unwrap();
    }
    (nodes, client, request)
}

async fn handover() {
    let mut pauses = Vec::new();
    for _ in 0..3 {
        let ([mut n1, _n2, n3], client, request) = warm_three().await;
        // Stop n1 while submitting one job at a time.
        let mut normal = Histogram::<u64>::new(3).unwrap();
        for _ in 0..200 {
            let started = Instant::now();
            client.submit(&request).await.unwrap();
            normal.record(started.elapsed().as_micros() as u64).unwrap();
        }
        let _ = Process::new("kill")
            .args(["-TERM", &n1.child.id().to_string()])
            .status();
        let mut longest = Duration::ZERO;
        let sigterm = Instant::now();
        let sigterm_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let until = sigterm + Duration::from_secs(3);
        let mut slow = Vec::new();
        while Instant::now() < until {
            let started = Instant::now();
            client.submit(&request).await.unwrap();
            let took = started.elapsed();
            if took > Duration::from_millis(10) {
                slow.push((started - sigterm, took));
            }
            longest = longest.max(took);
        }
        if std::env::var_os("COHORT_BENCH_VERBOSE").is_some() {
            println!(
                "SIGTERM at {:?} (Unix time); slow submissions (since SIGTERM, took): {slow:?}",
                sigterm_at
            );
        }
        let _ = n1.child.wait();
        let master = client.cluster().await.unwrap().master_node;
        assert_eq!(master, "n2");
        drop(n3);
        println!(
            "handover: longest submission during the hand-over {longest:.1?} (normal p99 {} µs); master now on {master}",
            normal.value_at_quantile(0.99)
        );
        pauses.push(longest);
    }
    let (least, most, median) = spread(&mut pauses);
    println!(
        "handover: over 3 runs, the pause clients saw was {least:.1?} to {most:.1?} (median {median:.1?})"
    );
}

/// A master upgrade to the FIFO example and its rollback on three nodes,
/// while a client of n3 submits one job at a time: what the client sees,
/// next to the hand-over bench's pause.
async fn upgrade() {
    let fifo = std::fs::read(concat!(env!("COHORT_GUESTS_DIR"), "/fifo_master.wasm")).unwrap();
    let mut pauses = Vec::new();
    for _ in 0..3 {
        let (nodes, client, request) = warm_three().await;
        let mut normal = Histogram::<u64>::new(3).unwrap();
        for _ in 0..200 {
            let started = Instant::now();
            client.submit(&request).await.unwrap();
            normal.record(started.elapsed().as_micros() as u64).unwrap();
        }
        let admin = Api::new(&nodes[1].url);
        for rollback in [false, true] {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let submitting = {
                let (stop, url, request) = (stop.clone(), nodes[2].url.clone(), request.clone());
                tokio::spawn(async move {
                    let client = Api::new(&url);
                    let mut longest = Duration::ZERO;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let started = Instant::now();
                        client.submit(&request).await.unwrap();
                        longest = longest.max(started.elapsed());
                    }
                    longest
                })
            };
            let began = Instant::now();
            let report = match rollback {
                false => admin.upgrade_master(fifo.clone()).await.unwrap(),
                true => admin.rollback_master().await.unwrap(),
            };
            let took = began.elapsed();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let longest = submitting.await.unwrap();
            assert!(report.switched);
            println!(
                "upgrade: {} took {took:.2?} ({} events replayed, the master paused {} ms); longest submission meanwhile {longest:.1?} (normal p99 {} µs)",
                if rollback {
                    "rollback"
                } else {
                    "upgrade to the FIFO master"
                },
                report.replayed_events,
                report.pause_ms,
                normal.value_at_quantile(0.99)
            );
            pauses.push(longest);
        }
    }
    let (least, most, median) = spread(&mut pauses);
    println!(
        "upgrade: over 3 upgrades and 3 rollbacks, the pause clients saw was {least:.1?} to {most:.1?} (median {median:.1?})"
    );
}

/// The take-over bench fails rather than wait longer than this.
const TAKEOVER_GIVE_UP: Duration = Duration::from_secs(30);

/// Take-overs measured.
const TAKEOVER_RUNS: usize = 10;

/// Jobs per batch, and clients, of [`fill`].
const FILL_BATCH: usize = 1000;
const FILL_CLIENTS: usize = 4;

/// Submits `jobs` trivial jobs in batches of [`FILL_BATCH`] from
/// [`FILL_CLIENTS`] clients spread over `urls`; every one must be accepted.
async fn fill(urls: &[String], module: &str, jobs: usize) {
    let mut tasks = Vec::new();
    for c in 0..FILL_CLIENTS {
        let client = Api::new(&urls[c % urls.len()]);
        let module = module.to_string();
        tasks.push(tokio::spawn(async move {
            for b in (c..jobs / FILL_BATCH).step_by(FILL_CLIENTS) {
                let batch = echo_batch(&module, b, FILL_BATCH);
                let response = client.submit_batch(&batch).await.unwrap();
                let refused =
                    (response.results.iter()).find(|r| !matches!(r, BatchItem::Accepted(_)));
                assert!(refused.is_none(), "batch {b}: {refused:?}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

/// SIGKILL of `master`'s node, then one submission after another through
/// `client` until one is acknowledged (a submission in flight when the
/// master died waits in the proxy and completes on the new one): the
/// time from the kill.
async fn kill_until_acknowledged(
    master: &mut NodeProcess,
    client: &Api,
    request: &SubmitRequest,
) -> Duration {
    let killed = Instant::now();
    let _ = master.child.kill();
    let _ = master.child.wait();
    loop {
        if client.submit(request).await.is_ok() {
            return killed.elapsed();
        }
        assert!(
            killed.elapsed() < TAKEOVER_GIVE_UP,
            "no submission acknowledged within {TAKEOVER_GIVE_UP:?} of the kill"
        );
    }
}

/// The least, greatest and median of `times`.
fn spread(times: &mut [Duration]) -> (Duration, Duration, Duration) {
    times.sort();
    (times[0], times[times.len() - 1], times[times.len() / 2])
}

/// How long takeover-large's clients go on submitting one at a time after
/// filling the master, before the kill (the standbys apply what was
/// committed last meanwhile, as they would while clients go on).
const TAKEOVER_LARGE_STEADY: Duration = Duration::from_secs(5);

async fn takeover_large() {
    let jobs: usize = std::env::var("COHORT_TAKEOVER_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let mut times: [Vec<Duration>; 2] = Default::default();
    for _ in 0..3 {
        for (standby, times) in ["on", "off"].into_iter().zip(times.iter_mut()) {
            let [mut n1, _n2, n3] = start_three(&[
                "--roles",
                "back-end,front-end",
                "--standby",
                standby,
                "--queue-max",
                "2000000",
            ]);
            let client = Api::new(&n3.url);
            while client
                .cluster()
                .await
                .map_or(true, |c| c.master_node != "n1" || c.voters.len() < 3)
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let module = client.upload(echo_wasm()).await.unwrap();
            let request = SubmitRequest {
                module: module.clone(),
                ..SubmitRequest::default()
            };
            let began = Instant::now();
            fill(&[n1.url.clone(), n3.url.clone()], &module, jobs).await;
            let filled = began.elapsed();
            // The standbys apply what was committed last; a few seconds of
            // one-at-a-time submissions, as clients would go on.
            let until = Instant::now() + TAKEOVER_LARGE_STEADY;
            while Instant::now() < until {
                client.submit(&request).await.unwrap();
            }
            let taken_over = kill_until_acknowledged(&mut n1, &client, &request).await;
            println!(
                "takeover-large: {jobs} queued jobs (submitted in {filled:.1?}), standby {standby}: first submission acknowledged {taken_over:.2?} after kill -9 of the master"
            );
            times.push(taken_over);
        }
    }
    for (standby, times) in ["on", "off"].iter().zip(times.iter_mut()) {
        let (least, most, median) = spread(times);
        println!(
            "takeover-large: standby {standby}: SIGKILL to the first acknowledged submission {least:.2?} to {most:.2?} (median {median:.2?})"
        );
    }
}

async fn takeover() {
    let mut times = Vec::new();
    for _ in 0..TAKEOVER_RUNS {
        let ([mut n1, _n2, _n3], client, request) = warm_three().await;
        let taken_over = kill_until_acknowledged(&mut n1, &client, &request).await;
        let cluster = client.cluster().await.unwrap();
        println!(
            "takeover: first submission acknowledged {taken_over:.2?} after kill -9 of the master; master now on {} (epoch {})",
            cluster.master_node, cluster.master_epoch
        );
        times.push(taken_over);
    }
    let (least, most, median) = spread(&mut times);
    println!(
        "takeover: over {TAKEOVER_RUNS} runs, SIGKILL to the first acknowledged submission took {least:.2?} to {most:.2?} (median {median:.2?})"
    );
}

/// Rounds of the egress section, each 1,000 jobs with no call, 1,000
/// making one GET, then 1,000 making one recorded POST.
const EGRESS_ROUNDS: usize = 3;

/// Longest the egress section waits for a round's jobs to succeed.
const EGRESS_GIVE_UP: Duration = Duration::from_secs(120);

/// Jobs of `fixture_http` by deployment name, each making one GET to a
/// local server it is granted, or one POST (which its grant records: the
/// response is journaled and replicated before the job sees it), on three
/// nodes, against the same jobs with no call.
async fn egress() {
    const JOBS: usize = 1_000;
    const BATCH: usize = 100;
    const NAME: &str = "bench-http";
    let served = Arc::new(AtomicU64::new(0));
    let addr = ok_server(served.clone()).await;
    let nodes = three_nodes(&[]).await;
    let clients: Vec<Api> = nodes.iter().map(|n| Api::new(&n.url)).collect();
    let wasm = std::fs::read(format!("{}/fixture_http.wasm", env!("COHORT_GUESTS_DIR"))).unwrap();
    let digest = clients[2].upload(wasm).await.unwrap();
    clients[2].deploy(NAME, &digest).await.unwrap();
    let grant = cohort::client::HttpGrantBody {
        url: format!("http://{addr}"),
        ..Default::default()
    };
    clients[2].grant(NAME, &[grant]).await.unwrap();
    let one_call = serde_json::json!({ "calls": [{ "url": format!("http://{addr}/") }] });
    let one_post = serde_json::json!({ "calls": [
        { "method": "POST", "url": format!("http://{addr}/"), "body": "event" }
    ] });
    let inputs = [
        ("no call", serde_json::json!({ "calls": [] })),
        ("one GET", one_call),
        ("one recorded POST", one_post),
    ];
    let origin = format!("http://{addr}");

    // Warm-up: every node compiles the module and makes a call.
    let mut done = 0;
    for (_, input) in &inputs {
        let ids = submit_spread(&clients, NAME, input, 300, BATCH).await;
        done += ids.len() as u64;
        until_succeeded(&clients[0], done).await;
    }
    let mut calls = served.load(Ordering::Relaxed);
    for round in 1..=EGRESS_ROUNDS {
        for (kind, input) in &inputs {
            let started = Instant::now();
            let ids = submit_spread(&clients, NAME, input, JOBS, BATCH).await;
            let submitted = started.elapsed();
            done += JOBS as u64;
            until_succeeded(&clients[0], done).await;
            let elapsed = started.elapsed();
            let making = u64::from(*kind != "no call");
            let method = if *kind == "one GET" { "GET" } else { "POST" };
            let now = served.load(Ordering::Relaxed);
            assert_eq!(
                now - calls,
                making * JOBS as u64,
                "the server saw each call once"
            );
            calls = now;
            // A few jobs' records: one attempt, with its call (or none).
            for id in ids.iter().step_by(JOBS / 8).chain(ids.last()) {
                let job = clients[*id as usize % 3].job(*id, 0).await.unwrap();
                assert_eq!(job.state, "succeeded", "{job:?}");
                let attempt = job.attempts.last().expect("an attempt");
                assert_eq!(attempt.calls.len() as u64, making, "{job:?}");
                for call in &attempt.calls {
                    assert_eq!(
                        (call.method.as_str(), call.origin.as_str(), call.status),
                        (method, origin.as_str(), Some(200)),
                        "{job:?}"
                    );
                    assert!(call.error.is_none(), "{job:?}");
                }
            }
            println!(
                "egress round {round}, {kind}: {JOBS} jobs submitted in {submitted:.2?}, all succeeded after {elapsed:.2?}: {:.0} jobs/s submit->result",
                JOBS as f64 / elapsed.as_secs_f64()
            );
        }
    }
}

/// Submits `jobs` jobs of deployment `name` with `input`, in batches of
/// `batch` spread over `clients` (one task each); their ids.
async fn submit_spread(
    clients: &[Api],
    name: &str,
    input: &serde_json::Value,
    jobs: usize,
    batch: usize,
) -> Vec<u64> {
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let client = client.clone();
        let request = BatchRequest {
            jobs: vec![
                SubmitRequest {
                    module: name.to_string(),
                    input_json: Some(input.clone()),
                    ..SubmitRequest::default()
                };
                batch
            ],
        };
        let batches = (c..jobs / batch).step_by(clients.len()).count();
        tasks.push(tokio::spawn(async move {
            let mut ids = Vec::new();
            for _ in 0..batches {
                for item in client.submit_batch(&request).await.unwrap().results {
                    match item {
                        BatchItem::Accepted(accepted) => ids.push(accepted.id),
                        BatchItem::Refused(why) => panic!("refused: {why:?}"),
                    }
                }
            }
            ids
        }));
    }
    let mut ids = Vec::new();
    for task in tasks {
        ids.extend(task.await.unwrap());
    }
    ids
}

/// Waits until the cluster counts `total` jobs succeeded; panics after
/// [`EGRESS_GIVE_UP`], with the failed count.
async fn until_succeeded(client: &Api, total: u64) {
    let started = Instant::now();
    while succeeded(client).await < total {
        if started.elapsed() > EGRESS_GIVE_UP {
            let failed = metric(client, "cohort_jobs{state=\"failed\"}").await;
            panic!("{total} jobs not all succeeded in {EGRESS_GIVE_UP:?} ({failed} failed)");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[path = "support/ok_server.rs"]
mod ok_server;
use ok_server::ok_server;
