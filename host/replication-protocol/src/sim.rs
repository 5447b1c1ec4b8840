//! The deterministic simulator: many [`Replicator`]s, a master on whichever
//! leads, clients, and faults, in one thread, all from one seed.
//!
//! Everything random comes from one seeded generator and time is a counter,
//! so a seed replays exactly: `simulate --seed N` shows the run that
//! failed. Like FoundationDB's and TigerBeetle's simulators, a seed that
//! once found a bug is kept as a regression test (`tests` below).
//!
//! # What is simulated
//!
//! * **Network**: every message is delayed (mostly a few ms, sometimes
//!   hundreds, which reorders), and may be dropped or duplicated;
//!   partitions cut pairs of nodes both ways for a while.
//! * **Disks**: [`MemStorage`]; a crash keeps only what was synced.
//! * **Nodes**: crash and restart (with a new generation, so the youngest,
//!   as a real restart), pause (messages and ticks wait), clocks skewed by a
//!   fixed offset each.
//! * **Membership**: each node sees the nodes it is not cut off from and
//!   that are up; the oldest visible node takes the master over once it
//!   hears no master, others sometimes try anyway (a failure detector's
//!   mistake). A master sometimes hands over to the next oldest node.
//! * **The master**: on the leader, it turns each client request into a
//!   job, one entry, and answers once the entry is committed. Requests
//!   carry an id the master deduplicates on, so a resent request answers
//!   the job it made. [`Config::request_ids`] off turns that off, to show
//!   the checker catches duplicates.
//! * **Clients** send one request at a time to a random node, whose proxy
//!   forwards it to the master it knows, following the node's own rules
//!   ([`crate::proxy::Call`]: retry, follow a redirect, give up as
//!   unavailable or as indeterminate). Forwarded requests and their
//!   answers travel as over TCP (delayed or lost, never duplicated); a
//!   lost one times out. A client sends an indeterminate request again
//!   with the same id (an idempotency key), and an unavailable one as a
//!   new request; an unanswered one is sent again, with the same id, to
//!   another node. [`Config::indeterminate`] off makes the proxy report a
//!   failure after which the master may have acted as harmless, to show
//!   the checker catches it.
//!
//! # What is checked
//!
//! During the run: one leader per epoch; an index, once committed, always
//! holds the same entry; no [`Effect::Fault`]; no panic. After the faults
//! stop and the network heals: the cluster converges (one master, every
//! journal equal to its journal, every request answered) within a bound,
//! and the final state holds every acknowledged job at the index the client
//! was told, with no request in two jobs and no job for a request the
//! proxy gave up on as unavailable (when the client sent it only once).

use crate::message::Message;
use crate::node::{Effect, Options, Replicator};
use crate::proxy::{Call, Failure, Next, Stop};
use crate::rng::Rng;
use crate::storage::{Entry, MemStorage, NodeId, Payload, Snapshot, Storage};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Config {
    /// Back-end nodes, at least 1.
    pub nodes: usize,
    /// Clients sending requests.
    pub clients: usize,
    /// Simulated milliseconds with faults.
    pub fault_ms: u64,
    /// Simulated milliseconds allowed to converge after the faults.
    pub converge_ms: u64,
    /// Whether the master deduplicates requests by id.
    pub request_ids: bool,
    /// Whether the proxy reports a failure after which the master may have
    /// acted as such (off: as harmless, the defect the checker must see).
    pub indeterminate: bool,
    /// Whether faults are injected at all.
    pub faults: bool,
    /// Keep a trace of faults and role changes in the report.
    pub trace: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            nodes: 3,
            clients: 3,
            fault_ms: 6_000,
            converge_ms: 30_000,
            request_ids: true,
            indeterminate: true,
            faults: true,
            trace: false,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Requests answered.
    pub acked: usize,
    /// Entries committed.
    pub committed: u64,
    /// Epochs that had a leader.
    pub epochs: usize,
    /// Take-overs that failed (and were retried later).
    pub failed_takeovers: usize,
    /// Messages delivered.
    pub delivered: u64,
    /// Crashes, pauses and partitions injected.
    pub faults: usize,
    /// Voter changes.
    pub voter_changes: usize,
    /// Snapshots taken by masters.
    pub snapshots: usize,
    /// Proxy calls answered after more than one try.
    pub retried: usize,
    /// Redirects a proxy followed at once.
    pub redirects: usize,
    /// Proxy calls given up as unavailable.
    pub unavailable: usize,
    /// Proxy calls given up as indeterminate.
    pub indeterminate: usize,
    /// Invariants broken (empty when the run passed).
    pub violations: Vec<String>,
    /// Faults and role changes, in order (with [`Config::trace`]).
    pub trace: Vec<String>,
}

/// Runs one seed; the report lists violations (none means it passed).
pub fn run(seed: u64, config: &Config) -> Report {
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sim = Sim::new(seed, config.clone());
        sim.run();
        sim.report
    }));
    outcome.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Report {
            seed,
            violations: vec![format!("panicked: {message}")],
            ..Report::default()
        }
    })
}

/// The config a seed runs with: node count and fault mix vary by seed.
pub fn config_for(seed: u64) -> Config {
    let mut rng = Rng::new(seed ^ 0x5eed_c0f1_9000_0000);
    Config {
        nodes: [1, 2, 3, 3, 3, 4, 5, 5][rng.below(8) as usize],
        clients: 1 + rng.below(4) as usize,
        ..Config::default()
    }
}

/// What travels over the simulated network.
#[derive(Debug, Clone)]
enum Packet {
    Core(Message),
    /// A client's request to a node's proxy.
    Submit {
        client: usize,
        request: u64,
    },
    /// A proxy's try, to the node it believes hosts the master.
    Forward {
        call: u64,
        attempt: u32,
        request: u64,
    },
    /// The answer to a [`Packet::Forward`].
    Forwarded {
        call: u64,
        attempt: u32,
        reply: Forwarded,
    },
    /// The proxy's answer: the request's job is entry `job`.
    Done {
        request: u64,
        job: u64,
    },
    /// The proxy gave up.
    Refused {
        request: u64,
        indeterminate: bool,
    },
}

/// What the master's node answers a forwarded request.
#[derive(Debug, Clone, Copy)]
enum Forwarded {
    /// Its job.
    Job(u64),
    /// Not here: the master is on that node.
    Moved(usize),
    /// Not here, and no other host known.
    NotHere,
}

impl Packet {
    /// Forwarded requests and their answers travel as over TCP: lost
    /// (which the proxy sees as a timeout), never duplicated.
    fn duplicable(&self) -> bool {
        !matches!(self, Packet::Forward { .. } | Packet::Forwarded { .. })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Address {
    Node(usize),
    Client(usize),
}

#[derive(Debug)]
struct InFlight {
    at: u64,
    seq: u64,
    from: Address,
    to: Address,
    packet: Packet,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for InFlight {}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        // Earliest first out of a max-heap.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The master's state on the leading node: which request made which job.
#[derive(Debug, Default)]
struct Master {
    /// request -> job (entry index).
    jobs: BTreeMap<u64, u64>,
    /// Every job with its request, in index order.
    entries: Vec<(u64, u64)>,
    /// Answers waiting for their entry to commit: the job, and the proxy
    /// call to answer (node, call, attempt).
    waiting: Vec<(u64, usize, u64, u32)>,
}

/// A proxy's call in progress on one node.
#[derive(Debug)]
struct ProxyCall {
    call: Call<usize>,
    client: usize,
    request: u64,
    /// The try on the wire: target, when sent, and whether the view named
    /// it (its exchange is abandoned once the view stops naming it).
    in_flight: Option<(usize, u64, bool)>,
    /// When a waiting call tries again.
    wake_at: u64,
}

fn request_of(payload: &Payload) -> Option<u64> {
    match payload {
        Payload::Data(data) => Some(u64::from_le_bytes(data.as_slice().try_into().ok()?)),
        _ => None,
    }
}

fn encode_jobs(entries: &[(u64, u64)]) -> Vec<u8> {
    entries
        .iter()
        .flat_map(|(request, job)| request.to_le_bytes().into_iter().chain(job.to_le_bytes()))
        .collect()
}

fn decode_jobs(state: &[u8]) -> Vec<(u64, u64)> {
    state
        .chunks_exact(16)
        .map(|c| {
            let request = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let job = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
            (request, job)
        })
        .collect()
}

/// The jobs a journal holds: its snapshot's, then its entries'.
fn jobs_in(storage: &MemStorage) -> Vec<(u64, u64)> {
    let mut jobs = storage
        .snapshot()
        .ok()
        .flatten()
        .map(|s| decode_jobs(&s.state))
        .unwrap_or_default();
    for entry in storage.entries() {
        if let Some(request) = request_of(&entry.payload) {
            jobs.push((request, entry.index));
        }
    }
    jobs
}

struct SimNode {
    replicator: Option<Replicator<MemStorage>>,
    /// The disk while the node is down.
    disk: MemStorage,
    /// Age: lower is older; a restart makes a node the youngest.
    generation: u64,
    paused_until: u64,
    skew: i64,
    master: Option<Master>,
    next_tick: u64,
    /// The proxy's calls in progress (lost in a crash).
    calls: BTreeMap<u64, ProxyCall>,
    next_call: u64,
    /// Where this node handed the master over to, until it leads again
    /// (it answers forwarded requests "moved" there, as a node does).
    moved: Option<usize>,
    /// The master's host and epoch as gossip shows it: replication's
    /// leader as it was when gossip last spread it (it lags).
    gossip: Option<(usize, u64)>,
    next_gossip: u64,
}

#[derive(Debug, Default)]
struct Client {
    /// The request in flight, when it was last sent.
    pending: Option<(u64, u64)>,
    next_send: u64,
}

struct Sim {
    config: Config,
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<InFlight>,
    nodes: Vec<SimNode>,
    clients: Vec<Client>,
    cut: BTreeSet<(usize, usize)>,
    heal_at: u64,
    generations: u64,
    next_request: u64,
    /// Drop and duplicate rates (per million) while faults run.
    drop_rate: u64,
    dup_rate: u64,
    faulting: bool,
    /// Checks.
    leaders: BTreeMap<u64, usize>,
    committed: BTreeMap<u64, (u64, Payload)>,
    acked: BTreeMap<u64, u64>,
    /// Times each request was sent by its client.
    sends: BTreeMap<u64, u32>,
    /// Requests sent once and refused as unavailable: never a job.
    refused: BTreeSet<u64>,
    report: Report,
}

const TICK_MS: u64 = 10;
/// How long a proxy call retries (the node's `PROXY_WAIT`, scaled down).
const PROXY_WAIT_MS: u64 = 1_500;
/// How long a proxy waits for one forwarded request's answer.
const EXCHANGE_MS: u64 = 300;
/// Pause between a proxy's tries while no master answers.
const RETRY_PAUSE_MS: u64 = 20;
/// A client sends a request again after this long without an answer:
/// longer than a proxy call, so a live proxy answers first.
const CLIENT_TIMEOUT_MS: u64 = PROXY_WAIT_MS + EXCHANGE_MS + 1_000;

impl Sim {
    fn new(seed: u64, config: Config) -> Self {
        let mut rng = Rng::new(seed);
        let nodes = (0..config.nodes)
            .map(|i| SimNode {
                replicator: None,
                disk: MemStorage::new(),
                generation: i as u64,
                paused_until: 0,
                skew: if config.faults {
                    rng.between(0, 400) as i64 - 200
                } else {
                    0
                },
                master: None,
                next_tick: rng.below(TICK_MS),
                calls: BTreeMap::new(),
                next_call: 0,
                moved: None,
                gossip: None,
                next_gossip: 0,
            })
            .collect();
        let drop_rate = if config.faults { rng.below(50_000) } else { 0 };
        let dup_rate = if config.faults { rng.below(20_000) } else { 0 };
        let mut sim = Self {
            clients: (0..config.clients).map(|_| Client::default()).collect(),
            generations: config.nodes as u64,
            config,
            rng,
            now: 0,
            seq: 0,
            queue: BinaryHeap::new(),
            nodes,
            cut: BTreeSet::new(),
            heal_at: 0,
            next_request: 1,
            drop_rate,
            dup_rate,
            faulting: true,
            leaders: BTreeMap::new(),
            committed: BTreeMap::new(),
            acked: BTreeMap::new(),
            sends: BTreeMap::new(),
            refused: BTreeSet::new(),
            report: Report {
                seed,
                ..Report::default()
            },
        };
        for node in 0..sim.nodes.len() {
            sim.start(node);
        }
        sim
    }

    fn name(node: usize) -> NodeId {
        format!("n{node}")
    }

    fn index_of(name: &str) -> usize {
        name[1..].parse().expect("a simulated node's name")
    }

    fn options(&self, node: usize) -> Options {
        Options {
            bootstrap: node == 0,
            heartbeat_ms: 50,
            request_timeout_ms: 300,
            lease_ms: 300,
            claim_timeout_ms: 400,
            retry_ms: 200,
            bytes_max: 64,
            voter_timeout_ms: Some(3_000),
            ..Options::new(Self::name(node))
        }
    }

    fn start(&mut self, node: usize) {
        let disk = std::mem::take(&mut self.nodes[node].disk);
        let replicator = Replicator::new(self.options(node), disk);
        self.nodes[node].replicator = Some(replicator);
        self.nodes[node].master = None;
        self.nodes[node].calls.clear();
        self.nodes[node].moved = None;
        self.nodes[node].gossip = None;
    }

    fn crash(&mut self, node: usize) {
        self.trace(|| format!("n{node} crashes"));
        if let Some(replicator) = self.nodes[node].replicator.take() {
            self.nodes[node].disk = replicator.storage().crash();
        }
        self.nodes[node].master = None;
        self.nodes[node].calls.clear();
        self.nodes[node].generation = self.generations;
        self.generations += 1;
    }

    fn up(&self, node: usize) -> bool {
        self.nodes[node].replicator.is_some()
    }

    fn cut_off(&self, a: usize, b: usize) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }

    fn clock(&self, node: usize) -> u64 {
        // Skewed clocks: each node's reading is off by a fixed amount.
        (self.now as i64 + 1_000 + self.nodes[node].skew) as u64
    }

    fn post(&mut self, from: Address, to: Address, packet: Packet) {
        if self.faulting && self.rng.chance(self.drop_rate) {
            return;
        }
        let copies = if self.faulting && packet.duplicable() && self.rng.chance(self.dup_rate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = if self.faulting && self.rng.chance(20_000) {
                self.rng.between(50, 500)
            } else {
                self.rng.between(1, 8)
            };
            self.seq += 1;
            self.queue.push(InFlight {
                at: self.now + delay,
                seq: self.seq,
                from,
                to,
                packet: packet.clone(),
            });
        }
    }

    fn run(&mut self) {
        let end_faults = self.config.fault_ms;
        let deadline = end_faults + self.config.converge_ms;
        while self.now < deadline {
            if self.now >= end_faults && self.faulting {
                self.heal();
            }
            if self.faulting && self.config.faults {
                self.inject();
            }
            self.deliver();
            self.tick_nodes();
            self.tick_proxies();
            self.clients_act();
            if !self.faulting && self.converged() {
                break;
            }
            self.now += 1;
        }
        self.finish();
    }

    fn inject(&mut self) {
        if self.now >= self.heal_at && !self.cut.is_empty() {
            self.cut.clear();
        }
        let n = self.nodes.len();
        // About one fault per 400 ms.
        if !self.rng.chance(2_500) {
            return;
        }
        self.report.faults += 1;
        let node = self.rng.below(n as u64) as usize;
        match self.rng.below(10) {
            0..=2 => {
                if self.up(node) {
                    self.crash(node);
                    let down = self.rng.between(50, 2_000);
                    self.nodes[node].paused_until = self.now + down;
                }
            }
            3..=5 => {
                if self.up(node) {
                    let pause = self.rng.between(50, 1_500);
                    self.nodes[node].paused_until = self.now + pause;
                    self.trace(|| format!("n{node} pauses for {pause} ms"));
                }
            }
            6..=7 => {
                // Cut one side from the other: a random split.
                self.cut.clear();
                let side: Vec<bool> = (0..n).map(|_| self.rng.chance(500_000)).collect();
                for a in 0..n {
                    for b in a + 1..n {
                        if side[a] != side[b] {
                            self.cut.insert((a, b));
                        }
                    }
                }
                self.heal_at = self.now + self.rng.between(100, 2_500);
                let cut = format!("{:?}", self.cut);
                self.trace(|| format!("partition {cut}"));
            }
            _ => {
                // The master hands over to the oldest other visible node.
                if let Some(leader) = self.leader()
                    && let Some(target) = self.oldest_visible(leader, Some(leader))
                {
                    let caught_up = self.nodes[leader]
                        .replicator
                        .as_ref()
                        .is_some_and(|r| r.caught_up(&Self::name(target)));
                    if caught_up {
                        let shapes = format!(
                            "{:?} / {:?}",
                            self.replica(leader).storage().shape(),
                            self.replica(target).storage().shape()
                        );
                        self.trace(|| format!("n{leader} hands over to n{target}: {shapes}"));
                        let name = Self::name(target);
                        if let Ok(output) = self.replicator(leader).hand_over(&name) {
                            self.nodes[leader].moved = Some(target);
                            self.apply(leader, output);
                        }
                    }
                }
            }
        }
    }

    fn heal(&mut self) {
        self.faulting = false;
        self.cut.clear();
        for node in 0..self.nodes.len() {
            if !self.up(node) {
                self.start(node);
            }
            self.nodes[node].paused_until = 0;
        }
    }

    fn replicator(&mut self, node: usize) -> &mut Replicator<MemStorage> {
        self.nodes[node]
            .replicator
            .as_mut()
            .expect("a running node")
    }

    fn replica(&self, node: usize) -> &Replicator<MemStorage> {
        self.nodes[node]
            .replicator
            .as_ref()
            .expect("a running node")
    }

    fn leader(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&node| {
            self.nodes[node]
                .replicator
                .as_ref()
                .is_some_and(|r| r.leading().is_some())
        })
    }

    /// The oldest eligible node `node` can see that is up (other than
    /// `except`): gossip publishes whether a node may host the master.
    fn oldest_visible(&self, node: usize, except: Option<usize>) -> Option<usize> {
        (0..self.nodes.len())
            .filter(|&other| Some(other) != except && self.up(other))
            .filter(|&other| other == node || !self.cut_off(node, other))
            .filter(|&other| self.replica(other).eligible())
            .min_by_key(|&other| self.nodes[other].generation)
    }

    fn deliver(&mut self) {
        while self.queue.peek().is_some_and(|m| m.at <= self.now) {
            let message = self.queue.pop().expect("peeked");
            let (from, to) = (message.from, message.to);
            if let (Address::Node(a), Address::Node(b)) = (from, to)
                && self.cut_off(a, b)
            {
                continue;
            }
            match to {
                Address::Client(client) => match message.packet {
                    Packet::Done { request, job } => self.answered(client, request, job),
                    Packet::Refused {
                        request,
                        indeterminate,
                    } => self.refused(client, request, indeterminate),
                    _ => {}
                },
                Address::Node(node) => {
                    if !self.up(node) {
                        continue;
                    }
                    if self.nodes[node].paused_until > self.now {
                        // Waits in the socket until the pause ends.
                        let at = self.nodes[node].paused_until;
                        self.queue.push(InFlight { at, ..message });
                        continue;
                    }
                    self.report.delivered += 1;
                    self.receive(node, from, message.packet);
                }
            }
        }
    }

    fn receive(&mut self, node: usize, from: Address, packet: Packet) {
        let now = self.clock(node);
        match packet {
            Packet::Core(message) => {
                let Address::Node(sender) = from else {
                    return;
                };
                let output = self
                    .replicator(node)
                    .step(now, &Self::name(sender), message);
                self.apply(node, output);
            }
            Packet::Submit { client, request } => self.submit(node, client, request),
            Packet::Forward {
                call,
                attempt,
                request,
            } => {
                if let Address::Node(proxy) = from {
                    self.serve(node, proxy, call, attempt, request);
                }
            }
            Packet::Forwarded {
                call,
                attempt,
                reply,
            } => self.forwarded(node, call, attempt, reply),
            Packet::Done { .. } | Packet::Refused { .. } => {}
        }
    }

    /// A client's request reaches this node's proxy: a new call.
    fn submit(&mut self, node: usize, client: usize, request: u64) {
        let now = self.clock(node);
        let state = &mut self.nodes[node];
        let id = state.next_call;
        state.next_call += 1;
        let call = ProxyCall {
            call: Call::new(now, PROXY_WAIT_MS, true),
            client,
            request,
            in_flight: None,
            wake_at: now,
        };
        state.calls.insert(id, call);
        self.try_call(node, id);
    }

    /// Replication's leader on `node`, and its epoch.
    fn leader_of(&self, node: usize) -> Option<(usize, u64)> {
        self.nodes[node]
            .replicator
            .as_ref()
            .and_then(|r| r.leader().map(|(id, epoch)| (Self::index_of(id), epoch)))
    }

    /// Where `node`'s proxy sends a try, as the node's `MasterLink::target`
    /// chooses: replication's leader when its epoch is newer than the one
    /// gossip shows (replication hears first), else gossip's host; and
    /// whether gossip named it. Never the node itself.
    fn view_of(&self, node: usize) -> Option<(usize, bool)> {
        let gossip = self.nodes[node].gossip;
        let newer = self
            .leader_of(node)
            .filter(|&(_, epoch)| gossip.is_none_or(|(_, seen)| epoch > seen));
        match newer {
            Some((host, _)) => Some((host, false)),
            None => gossip.map(|(host, _)| (host, true)),
        }
        .filter(|&(host, _)| host != node)
    }

    /// One try of a call: the local master if this node hosts it, else the
    /// node the call's redirect or the view names.
    fn try_call(&mut self, node: usize, id: u64) {
        let now = self.clock(node);
        let named = self.view_of(node);
        let view = named.map(|(host, _)| host);
        let hosting = self.nodes[node].master.is_some();
        let Some(pending) = self.nodes[node].calls.get_mut(&id) else {
            return;
        };
        let there = pending.call.target(view);
        let attempt = pending.call.tries();
        let request = pending.request;
        if hosting {
            pending.in_flight = Some((node, now, false));
            self.serve(node, node, id, attempt, request);
            return;
        }
        match there {
            None => self.proxy_failed(node, id, Failure::NoMaster),
            Some(target) => {
                let from_view = !pending.call.redirected()
                    && named.is_some_and(|(host, gossip)| gossip && host == target);
                pending.in_flight = Some((target, now, from_view));
                let packet = Packet::Forward {
                    call: id,
                    attempt,
                    request,
                };
                self.post(Address::Node(node), Address::Node(target), packet);
            }
        }
    }

    /// A forwarded request at the node it was sent to: the master acts on
    /// it, or the node says where the master is.
    fn serve(&mut self, node: usize, proxy: usize, call: u64, attempt: u32, request: u64) {
        let now = self.clock(node);
        let answer = |sim: &mut Self, reply| {
            let packet = Packet::Forwarded {
                call,
                attempt,
                reply,
            };
            sim.post(Address::Node(node), Address::Node(proxy), packet);
        };
        if self.nodes[node].master.is_none() {
            let reply = match self.nodes[node].moved {
                Some(host) => Forwarded::Moved(host),
                None => Forwarded::NotHere,
            };
            return answer(self, reply);
        }
        let dedup = self.config.request_ids;
        let master = self.nodes[node].master.as_mut().expect("checked");
        if dedup && let Some(&job) = master.jobs.get(&request) {
            master.waiting.push((job, proxy, call, attempt));
            self.release(node);
            return;
        }
        let payload = Payload::Data(request.to_le_bytes().to_vec());
        match self.replicator(node).propose(now, vec![payload]) {
            Ok((range, output)) => {
                let job = range.start;
                let master = self.nodes[node].master.as_mut().expect("checked");
                master.jobs.insert(request, job);
                master.entries.push((request, job));
                master.waiting.push((job, proxy, call, attempt));
                self.apply(node, output);
            }
            // Not leading after all: nothing was proposed.
            Err(_) => answer(self, Forwarded::NotHere),
        }
    }

    /// The answer to one of this node's proxy's tries.
    fn forwarded(&mut self, node: usize, id: u64, attempt: u32, reply: Forwarded) {
        let Some(pending) = self.nodes[node].calls.get(&id) else {
            return;
        };
        // An answer to an earlier try, which already timed out: ignored
        // (the job it names, if any, is the one a later try finds).
        if pending.call.tries() != attempt || pending.in_flight.is_none() {
            return;
        }
        let failure = match reply {
            Forwarded::Job(job) => {
                let pending = self.nodes[node].calls.remove(&id).expect("checked");
                if pending.call.tries() > 1 {
                    self.report.retried += 1;
                }
                let request = pending.request;
                let packet = Packet::Done { request, job };
                self.post(Address::Node(node), Address::Client(pending.client), packet);
                return;
            }
            Forwarded::Moved(host) => Failure::Moved(host),
            Forwarded::NotHere => Failure::NotActed("this node does not host the master".into()),
        };
        self.proxy_failed(node, id, failure);
    }

    /// A try failed: the proxy's rules say what next.
    fn proxy_failed(&mut self, node: usize, id: u64, failure: Failure<usize>) {
        let now = self.clock(node);
        let failure = match failure {
            Failure::MayHaveActed(why) if !self.config.indeterminate => Failure::NotActed(why),
            failure => failure,
        };
        let Some(pending) = self.nodes[node].calls.get_mut(&id) else {
            return;
        };
        pending.in_flight = None;
        match pending.call.failed(now, failure) {
            Next::Now => {
                self.report.redirects += 1;
                self.try_call(node, id);
            }
            Next::Wait => pending.wake_at = now + RETRY_PAUSE_MS,
            Next::Stop(stop) => {
                let pending = self.nodes[node].calls.remove(&id).expect("checked");
                let indeterminate = matches!(stop, Stop::Indeterminate(_));
                let packet = Packet::Refused {
                    request: pending.request,
                    indeterminate,
                };
                self.post(Address::Node(node), Address::Client(pending.client), packet);
            }
        }
    }

    /// Proxies time out their tries and wake their waiting calls.
    fn tick_proxies(&mut self) {
        for node in 0..self.nodes.len() {
            if !self.up(node) || self.nodes[node].paused_until > self.now {
                continue;
            }
            if self.nodes[node].calls.is_empty() {
                continue;
            }
            let now = self.clock(node);
            let gossip = self.nodes[node].gossip.map(|(host, _)| host);
            let ids: Vec<u64> = self.nodes[node].calls.keys().copied().collect();
            for id in ids {
                let Some(pending) = self.nodes[node].calls.get(&id) else {
                    continue;
                };
                match pending.in_flight {
                    Some((_, sent, _)) if now >= sent + EXCHANGE_MS => {
                        let why = format!("no answer within {EXCHANGE_MS} ms");
                        self.proxy_failed(node, id, Failure::MayHaveActed(why));
                    }
                    Some((target, _, true)) if gossip != Some(target) => {
                        let why = format!("n{target} stopped hosting the master mid-request");
                        self.proxy_failed(node, id, Failure::MayHaveActed(why));
                    }
                    None if now >= pending.wake_at => self.try_call(node, id),
                    _ => {}
                }
            }
        }
    }

    /// Answers the requests whose jobs are committed.
    fn release(&mut self, node: usize) {
        let commit = self.replicator(node).commit();
        let Some(master) = self.nodes[node].master.as_mut() else {
            return;
        };
        let (done, waiting): (Vec<_>, Vec<_>) = master
            .waiting
            .drain(..)
            .partition(|(job, ..)| *job < commit);
        master.waiting = waiting;
        for (job, proxy, call, attempt) in done {
            let packet = Packet::Forwarded {
                call,
                attempt,
                reply: Forwarded::Job(job),
            };
            self.post(Address::Node(node), Address::Node(proxy), packet);
        }
    }

    fn apply(&mut self, node: usize, output: crate::node::Output) {
        for (to, message) in output.sends {
            let to = Self::index_of(&to);
            self.post(
                Address::Node(node),
                Address::Node(to),
                Packet::Core(message),
            );
        }
        for effect in output.effects {
            let line = format!("{effect:?}");
            self.trace(|| format!("n{node} {line}"));
            match effect {
                Effect::Leading { epoch, .. } => {
                    if let Some(other) = self.leaders.insert(epoch, node)
                        && other != node
                    {
                        self.violation(format!("n{other} and n{node} both led epoch {epoch}"));
                    }
                    self.report.epochs += 1;
                    self.nodes[node].moved = None;
                    // The master starts from the journal.
                    let storage = self.replicator(node).storage();
                    let mut master = Master::default();
                    for (request, job) in jobs_in(storage) {
                        master.jobs.entry(request).or_insert(job);
                        master.entries.push((request, job));
                    }
                    self.nodes[node].master = Some(master);
                }
                Effect::SteppedDown { .. } => {
                    self.nodes[node].master = None;
                    self.nodes[node].generation = self.generations;
                    self.generations += 1;
                }
                Effect::Committed { index } => {
                    self.record_commit(node, index);
                    self.release(node);
                    self.maybe_compact(node);
                }
                Effect::TakeOverFailed { .. } => self.report.failed_takeovers += 1,
                Effect::Voters { .. } => self.report.voter_changes += 1,
                Effect::HandedOver { .. } => {}
                Effect::Fault { reason } => self.violation(format!("n{node}: {reason}")),
            }
        }
    }

    fn record_commit(&mut self, node: usize, index: u64) {
        let storage = self.replica(node).storage();
        let first = storage.shape().first;
        let from = self
            .committed
            .last_key_value()
            .map_or(0, |(i, _)| i + 1)
            .max(first);
        let entries: Vec<Entry> = storage
            .entries()
            .iter()
            .filter(|e| e.index >= from && e.index < index)
            .cloned()
            .collect();
        // Re-check what this leader holds of what was committed before it.
        let earlier: Vec<(u64, u64, Payload)> = storage
            .entries()
            .iter()
            .filter(|e| e.index < from.min(index))
            .filter_map(|e| {
                let (epoch, payload) = self.committed.get(&e.index)?;
                (*epoch != e.epoch || *payload != e.payload).then(|| {
                    let _ = payload;
                    (e.index, e.epoch, e.payload.clone())
                })
            })
            .collect();
        for (index, epoch, _) in earlier {
            let before = self.committed.get(&index).cloned();
            self.violation(format!(
                "n{node} committed a different entry at {index} (epoch {epoch}; before: {before:?})"
            ));
        }
        for entry in entries {
            self.committed
                .insert(entry.index, (entry.epoch, entry.payload));
        }
        self.report.committed = self.report.committed.max(index);
    }

    /// Masters snapshot now and then, so replicas get snapshots too.
    fn maybe_compact(&mut self, node: usize) {
        let lucky = self.rng.chance(100_000);
        let replicator = self.replica(node);
        let commit = replicator.commit();
        let storage = replicator.storage();
        let shape = storage.shape();
        if commit < shape.first + 40 || !lucky {
            return;
        }
        let index = commit;
        let epoch = shape
            .epoch_at(index - 1)
            .expect("a committed entry is held");
        let mut voters = storage.snapshot().ok().flatten().map(|s| s.voters);
        let mut jobs: Vec<(u64, u64)> = storage
            .snapshot()
            .ok()
            .flatten()
            .map(|s| decode_jobs(&s.state))
            .unwrap_or_default();
        for entry in storage.entries().iter().filter(|e| e.index < index) {
            match &entry.payload {
                Payload::Voters(v) => voters = Some(v.clone()),
                payload => {
                    if let Some(request) = request_of(payload) {
                        jobs.push((request, entry.index));
                    }
                }
            }
        }
        let snapshot = Snapshot {
            index,
            epoch,
            voters: voters.unwrap_or_default(),
            state: encode_jobs(&jobs),
        };
        if let Err(error) = self.replicator(node).compact(snapshot) {
            self.violation(format!("n{node} could not compact: {error}"));
        }
        self.report.snapshots += 1;
    }

    fn tick_nodes(&mut self) {
        for node in 0..self.nodes.len() {
            if self.nodes[node].paused_until > self.now {
                continue;
            }
            if !self.up(node) {
                // Down nodes come back when their downtime ends.
                if self.faulting && self.nodes[node].paused_until <= self.now {
                    self.start(node);
                } else {
                    continue;
                }
            }
            if self.now < self.nodes[node].next_tick {
                continue;
            }
            self.nodes[node].next_tick = self.now + TICK_MS;
            let now = self.clock(node);
            // Gossip spreads the master's host a while after replication
            // knows it.
            if now >= self.nodes[node].next_gossip {
                self.nodes[node].gossip = self.leader_of(node);
                self.nodes[node].next_gossip = now + self.rng.between(100, 500);
            }
            let members: Vec<NodeId> = (0..self.nodes.len())
                .filter(|&other| self.up(other) && (other == node || !self.cut_off(node, other)))
                .map(Self::name)
                .collect();
            let output = self.replicator(node).set_members(now, members);
            self.apply(node, output);
            // The singleton rule: the oldest visible node hosts the
            // master; others try only by mistake, now and then.
            let oldest = self.oldest_visible(node, None) == Some(node);
            let mistaken = self.faulting && self.rng.chance(2_000);
            let replicator = self.replicator(node);
            let idle = replicator.leading().is_none() && !replicator.taking_over();
            if idle
                && (oldest || mistaken)
                && let Ok(output) = self.replicator(node).take_over(now, false)
            {
                self.apply(node, output);
            }
        }
    }

    fn clients_act(&mut self) {
        for client in 0..self.clients.len() {
            let state = &self.clients[client];
            let request = match state.pending {
                Some((request, sent)) if self.now >= sent + CLIENT_TIMEOUT_MS => request,
                Some(_) => continue,
                None if self.faulting && self.now >= state.next_send => {
                    let request = self.next_request;
                    self.next_request += 1;
                    request
                }
                None => continue,
            };
            self.send(client, request);
        }
    }

    /// Sends `request` (new or again, with the same id) to a random node.
    fn send(&mut self, client: usize, request: u64) {
        self.clients[client].pending = Some((request, self.now));
        *self.sends.entry(request).or_default() += 1;
        let node = self.rng.below(self.nodes.len() as u64) as usize;
        let packet = Packet::Submit { client, request };
        self.post(Address::Client(client), Address::Node(node), packet);
    }

    fn answered(&mut self, client: usize, request: u64, job: u64) {
        if let Some(&earlier) = self.acked.get(&request)
            && earlier != job
        {
            self.violation(format!(
                "request {request} answered as job {earlier} and as job {job}"
            ));
        }
        self.acked.insert(request, job);
        let state = &mut self.clients[client];
        if state.pending.is_some_and(|(r, _)| r == request) {
            state.pending = None;
            state.next_send = self.now + self.rng.between(0, 20);
        }
    }

    /// A proxy gave up on `request`. Indeterminate: sent again with the
    /// same id. Unavailable: no master acted on it, so the client moves on
    /// to a new request, and the checker holds the proxy to its word if
    /// this was the request's only send.
    fn refused(&mut self, client: usize, request: u64, indeterminate: bool) {
        if self.clients[client].pending.map(|(r, _)| r) != Some(request) {
            return;
        }
        if indeterminate {
            self.report.indeterminate += 1;
            self.send(client, request);
            return;
        }
        self.report.unavailable += 1;
        if self.sends.get(&request) == Some(&1) {
            self.refused.insert(request);
        }
        let state = &mut self.clients[client];
        state.pending = None;
        state.next_send = self.now + self.rng.between(0, 20);
    }

    /// Whether the healed cluster settled: one master, every journal
    /// equal to its journal, no request unanswered.
    fn converged(&self) -> bool {
        let Some(leader) = self.leader() else {
            return false;
        };
        if self.clients.iter().any(|c| c.pending.is_some()) {
            return false;
        }
        let replicator = self.nodes[leader].replicator.as_ref().expect("leading");
        let shape = replicator.storage().shape();
        if replicator.commit() < shape.next {
            return false;
        }
        self.nodes.iter().all(|node| {
            node.replicator.as_ref().is_some_and(|r| {
                let theirs = r.storage().shape();
                theirs.next == shape.next && shape.divergence(&theirs) == shape.next
            })
        })
    }

    fn trace(&mut self, what: impl FnOnce() -> String) {
        if self.config.trace {
            let line = format!("{:>6} ms {}", self.now, what());
            self.report.trace.push(line);
        }
    }

    fn violation(&mut self, what: String) {
        if self.report.violations.len() < 20 {
            self.report
                .violations
                .push(format!("at {} ms: {what}", self.now));
        }
    }

    fn finish(&mut self) {
        self.report.acked = self.acked.len();
        if !self.converged() {
            let leader = self.leader().map(Self::name);
            let pending = self.clients.iter().filter(|c| c.pending.is_some()).count();
            let shapes: Vec<String> = self
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| {
                    let r = n.replicator.as_ref().expect("healed");
                    format!(
                        "n{i}: {:?} commit {} voters {:?} leader {:?}",
                        r.storage().shape(),
                        r.commit(),
                        r.voters(),
                        r.leader()
                    )
                })
                .collect();
            self.violation(format!(
                "did not converge within {} ms of healing: master {leader:?}, {pending} requests unanswered; {}",
                self.config.converge_ms,
                shapes.join("; ")
            ));
            return;
        }
        let leader = self.leader().expect("converged");
        let storage = self.nodes[leader]
            .replicator
            .as_ref()
            .expect("leading")
            .storage();
        let jobs = jobs_in(storage);
        let mut by_request: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for (request, job) in &jobs {
            by_request.entry(*request).or_default().push(*job);
        }
        let mut problems = Vec::new();
        for (request, jobs) in &by_request {
            if jobs.len() > 1 {
                problems.push(format!(
                    "request {request} made {} jobs: {jobs:?}",
                    jobs.len()
                ));
            }
        }
        for request in &self.refused {
            if let Some(jobs) = by_request.get(request) {
                problems.push(format!(
                    "request {request} was refused as unavailable, yet made jobs {jobs:?}"
                ));
            }
        }
        for (request, job) in &self.acked {
            match by_request.get(request) {
                None => problems.push(format!(
                    "acknowledged request {request} (job {job}) was lost"
                )),
                Some(jobs) if !jobs.contains(job) => problems.push(format!(
                    "request {request} was acknowledged as job {job} but is {jobs:?}"
                )),
                Some(_) => {}
            }
        }
        let first = storage.shape().first;
        for entry in storage.entries() {
            if let Some((epoch, payload)) = self.committed.get(&entry.index)
                && (*epoch, payload) != (entry.epoch, &entry.payload)
                && entry.index >= first
            {
                problems.push(format!("committed entry {} changed", entry.index));
            }
        }
        for problem in problems {
            self.violation(problem);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(seeds: std::ops::Range<u64>) {
        let mut failed = Vec::new();
        for seed in seeds {
            let report = run(seed, &config_for(seed));
            if !report.violations.is_empty() {
                failed.push(format!("seed {seed}: {:#?}", report.violations));
            }
        }
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }

    #[test]
    fn a_quiet_cluster_elects_replicates_and_answers_everything() {
        let config = Config {
            nodes: 3,
            faults: false,
            ..Config::default()
        };
        let report = run(1, &config);
        assert!(report.violations.is_empty(), "{report:#?}");
        assert_eq!(report.epochs, 1, "{report:#?}");
        assert!(report.acked > 100, "{report:#?}");
        assert!(report.voter_changes >= 3, "{report:#?}");
    }

    #[test]
    fn seeds_0_to_250_hold_every_invariant() {
        check(0..250);
    }

    #[test]
    fn a_seed_replays_exactly() {
        let a = run(7, &config_for(7));
        let b = run(7, &config_for(7));
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
    }

    #[test]
    fn the_proxy_retries_redirects_and_gives_up_both_ways() {
        // The node's proxy rules run here: every path of them is taken.
        let mut total = Report::default();
        for seed in 0..60 {
            let report = run(seed, &config_for(seed));
            total.retried += report.retried;
            total.redirects += report.redirects;
            total.unavailable += report.unavailable;
            total.indeterminate += report.indeterminate;
        }
        assert!(total.retried > 0, "{total:?}");
        assert!(total.redirects > 0, "{total:?}");
        assert!(total.unavailable > 0, "{total:?}");
        assert!(total.indeterminate > 0, "{total:?}");
    }

    #[test]
    fn a_proxy_that_calls_a_timeout_harmless_is_caught() {
        // The defect `Stop::Indeterminate` exists for: a request that timed
        // out reached the master, and the proxy then reported "no master
        // acted", so its client sent a new one.
        let found = (0..200).any(|seed| {
            let config = Config {
                indeterminate: false,
                ..config_for(seed)
            };
            run(seed, &config)
                .violations
                .iter()
                .any(|v| v.contains("refused as unavailable"))
        });
        assert!(found, "no seed in 0..200 caught the lying proxy");
    }

    #[test]
    fn without_request_ids_the_checker_finds_requests_made_twice() {
        // The defect the request id fixes: a resent request became a
        // second job. The checker must see it, or it could not fail.
        let found = (0..200).any(|seed| {
            let config = Config {
                request_ids: false,
                ..config_for(seed)
            };
            run(seed, &config)
                .violations
                .iter()
                .any(|v| v.contains("jobs:"))
        });
        assert!(
            found,
            "no seed in 0..200 made a duplicate without request ids"
        );
    }
}
