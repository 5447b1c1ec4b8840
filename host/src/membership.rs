//! Who is in the cluster: chitchat gossip behind a small interface.
//!
//! Every node publishes a few keys about itself (roles, HTTP address, slots,
//! version, whether it hosts the master and at which epoch, whether it is
//! leaving); membership turns chitchat's live-node map into a [`View`]: the
//! live members in **age order**, oldest first. A node's age is
//! `(generation, node_id)` where the generation is its start time in
//! nanoseconds, so a restarted node is always the youngest.
//!
//! The rest of cohort only sees a `watch::Receiver<View>` and
//! [`Membership::publish`]. [`MemCluster`] is the in-memory twin used by
//! unit tests: members join, change and vanish at the test's command.
//!
//! # Failure detection
//!
//! Gossip every [`GOSSIP_INTERVAL`] (100 ms) with a phi-accrual detector
//! whose prior is the same 100 ms and threshold [`PHI_THRESHOLD`] (8): a
//! killed node leaves the live set after about a second on a LAN
//! (BENCHMARKS.md has the measured time). Dead nodes are forgotten after
//! [`DEAD_NODE_GRACE`]. A node that stops cleanly first publishes
//! `status=leaving` and gossips it for a few rounds, so the others stop
//! counting on it before the detector would notice.
//!
//! [`GOSSIP_INTERVAL`]: crate::limits::GOSSIP_INTERVAL
//! [`PHI_THRESHOLD`]: crate::limits::PHI_THRESHOLD
//! [`DEAD_NODE_GRACE`]: crate::limits::DEAD_NODE_GRACE

use crate::limits::{
    DEAD_NODE_GRACE, DELETED_KEY_GRACE, GOSSIP_HEARTBEAT_INTERVAL_MAX, GOSSIP_HEARTBEAT_SAMPLES,
    GOSSIP_INTERVAL, LEAVE_ROUNDS, PHI_THRESHOLD,
};
use crate::security::gossip::GossipTransport;
use chitchat::{
    ChitchatConfig, ChitchatHandle, ChitchatId, FailureDetectorConfig, NodeState, ProtocolVersion,
    spawn_chitchat,
};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// Keys each node publishes.
pub mod keys {
    /// Comma-separated roles.
    pub const ROLES: &str = "roles";
    /// HTTP base URL.
    pub const HTTP: &str = "http";
    /// Worker slots.
    pub const SLOTS: &str = "slots";
    /// cohort version.
    pub const VERSION: &str = "version";
    /// Present while the node hosts the master: its epoch.
    pub const MASTER_EPOCH: &str = "master_epoch";
    /// `ready` or `leaving`.
    pub const STATUS: &str = "status";
    /// Where this node believes the master runs: `<node>@<epoch>` (empty
    /// when it knows of none), so disagreements are visible in gossip.
    pub const MASTER_SEEN: &str = "master_seen";
}

/// What a node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Roles {
    /// May host the master and keeps a journal.
    pub back_end: bool,
    /// Runs jobs.
    pub worker: bool,
    /// Serves the public API.
    pub front_end: bool,
}

impl Roles {
    /// Every role.
    pub const ALL: Roles = Roles {
        back_end: true,
        worker: true,
        front_end: true,
    };

    /// Parses `back-end,worker,front-end` (any subset, any order).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut roles = Roles::default();
        for role in text.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            match role {
                "back-end" => roles.back_end = true,
                "worker" => roles.worker = true,
                "front-end" => roles.front_end = true,
                other => {
                    return Err(format!(
                        "unknown role `{other}` (use back-end, worker, front-end)"
                    ));
                }
            }
        }
        if roles == Roles::default() {
            return Err("give at least one role".into());
        }
        Ok(roles)
    }

    /// The role names.
    pub fn names(self) -> Vec<&'static str> {
        [
            (self.back_end, "back-end"),
            (self.worker, "worker"),
            (self.front_end, "front-end"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

impl std::fmt::Display for Roles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.names().join(","))
    }
}

/// One live member as its gossip describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Unique node id.
    pub node_id: String,
    /// Start time in ns: orders members by age.
    pub generation: u64,
    /// Gossip address.
    pub gossip: SocketAddr,
    /// Roles.
    pub roles: Roles,
    /// HTTP base URL.
    pub http: String,
    /// Worker slots.
    pub slots: u32,
    /// cohort version.
    pub version: String,
    /// The master epoch, while this node hosts the master.
    pub master_epoch: Option<u64>,
    /// True once it announced it is leaving.
    pub leaving: bool,
    /// Where this member believes the master runs (`node@epoch`).
    pub master_seen: String,
}

impl Member {
    /// The age order key: smaller is older.
    pub fn age(&self) -> (u64, &str) {
        (self.generation, &self.node_id)
    }

    fn from_state(id: &ChitchatId, state: &NodeState) -> Option<Member> {
        Some(Member {
            node_id: id.node_id.to_string(),
            generation: id.generation_id,
            gossip: id.gossip_advertise_addr,
            roles: Roles::parse(state.get(keys::ROLES)?).ok()?,
            http: state.get(keys::HTTP)?.to_string(),
            slots: state.get(keys::SLOTS)?.parse().ok()?,
            version: state.get(keys::VERSION).unwrap_or("").to_string(),
            master_epoch: state.get(keys::MASTER_EPOCH).and_then(|e| e.parse().ok()),
            leaving: state.get(keys::STATUS) == Some("leaving"),
            master_seen: state.get(keys::MASTER_SEEN).unwrap_or("").to_string(),
        })
    }
}

/// The cluster as one node sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// This node's id.
    pub me: String,
    /// Live members, oldest first.
    pub members: Vec<Member>,
    /// Ids of members recently declared dead.
    pub dead: Vec<String>,
}

impl View {
    /// The oldest live back-end member that is not leaving: where the
    /// master belongs. A member still advertising a master epoch below the
    /// newest advertised one was superseded and is about to rejoin as the
    /// youngest: it does not count.
    pub fn oldest_back_end(&self) -> Option<&Member> {
        let newest = self.members.iter().filter_map(|m| m.master_epoch).max();
        self.members
            .iter()
            .filter(|m| m.roles.back_end && !m.leaving)
            .filter(|m| m.master_epoch.is_none_or(|epoch| Some(epoch) >= newest))
            .min_by(|a, b| a.age().cmp(&b.age()))
    }

    /// Where the master goes when this node gives it up: the oldest live
    /// back-end member other than this node that is not leaving.
    pub fn successor(&self) -> Option<&Member> {
        self.members
            .iter()
            .filter(|m| m.roles.back_end && !m.leaving && m.node_id != self.me)
            .min_by(|a, b| a.age().cmp(&b.age()))
    }

    /// The member that says it hosts the master (the highest epoch if,
    /// briefly, two do).
    pub fn master_host(&self) -> Option<&Member> {
        self.members
            .iter()
            .filter(|m| m.master_epoch.is_some())
            .max_by_key(|m| (m.master_epoch, std::cmp::Reverse(m.age())))
    }

    /// A member by id.
    pub fn member(&self, node_id: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.node_id == node_id)
    }

    /// Live back-end members, oldest first.
    pub fn back_ends(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.roles.back_end)
    }

    fn sorted(mut self) -> Self {
        self.members
            .sort_by(|a, b| a.age().cmp(&b.age()).then(a.gossip.cmp(&b.gossip)));
        self
    }
}

/// How this node joins the cluster.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    /// Unique node id.
    pub node_id: String,
    /// Nodes with the same cluster id gossip together.
    pub cluster_id: String,
    /// UDP address to gossip on.
    pub gossip_listen: SocketAddr,
    /// Address the others reach this node's gossip at.
    pub gossip_advertise: SocketAddr,
    /// Gossip addresses of nodes to join through.
    pub seeds: Vec<String>,
    /// This node's published keys (roles, http, slots, version...).
    pub keys: Vec<(String, String)>,
    /// Seals gossip with the cluster key (`None`: plain gossip).
    pub sealer: Option<std::sync::Arc<crate::security::Sealer>>,
    /// A fault test's partition: gossip with the addresses it lists is
    /// dropped (`None`: none).
    pub partition: Option<crate::fault::Partition>,
}

struct Gossip {
    config: MembershipConfig,
    transport: GossipTransport,
    /// Every key this node publishes now (restored after a rejoin).
    keys: std::sync::Mutex<BTreeMap<String, String>>,
    handle: tokio::sync::Mutex<Option<ChitchatHandle>>,
    view: Arc<watch::Sender<View>>,
}

enum Backend {
    Gossip(Box<Gossip>),
    Memory(Arc<MemCluster>),
}

/// This node's membership: its view of the cluster and its published keys.
pub struct Membership {
    me: String,
    view: watch::Receiver<View>,
    backend: Backend,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// Nanoseconds since the Unix epoch: a fresh node's generation.
pub fn new_generation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Starts chitchat as `generation` with `keys`, feeding `view`.
async fn spawn_gossip(
    config: &MembershipConfig,
    transport: &GossipTransport,
    generation: u64,
    keys: Vec<(String, String)>,
    view: Arc<watch::Sender<View>>,
) -> anyhow::Result<ChitchatHandle> {
    let id = ChitchatId::new(config.node_id.clone(), generation, config.gossip_advertise);
    let chitchat_config = ChitchatConfig {
        chitchat_id: id,
        cluster_id: config.cluster_id.clone(),
        gossip_interval: GOSSIP_INTERVAL,
        listen_addr: config.gossip_listen,
        seed_nodes: config.seeds.clone(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: PHI_THRESHOLD,
            sampling_window_size: GOSSIP_HEARTBEAT_SAMPLES,
            max_interval: GOSSIP_HEARTBEAT_INTERVAL_MAX,
            initial_interval: GOSSIP_INTERVAL,
            dead_node_grace_period: DEAD_NODE_GRACE,
        },
        marked_for_deletion_grace_period: DELETED_KEY_GRACE,
        catchup_callback: None,
        extra_liveness_predicate: None,
        protocol_version: ProtocolVersion::V0,
    };
    let handle = spawn_chitchat(chitchat_config, keys, transport).await?;
    let chitchat = handle.chitchat();
    let mut live = chitchat.lock().await.live_nodes_watcher();
    let me = config.node_id.clone();
    tokio::spawn(async move {
        loop {
            let members: Vec<Member> = live
                .borrow_and_update()
                .iter()
                .filter_map(|(id, state)| Member::from_state(id, state))
                .collect();
            let dead = chitchat
                .lock()
                .await
                .dead_nodes()
                .map(|id| id.node_id.to_string())
                .collect();
            let next = View {
                me: me.clone(),
                members,
                dead,
            }
            .sorted();
            view.send_if_modified(|old| {
                let changed = *old != next;
                *old = next;
                changed
            });
            // Ends when this chitchat instance stops (leave or rejoin).
            if live.changed().await.is_err() {
                return;
            }
        }
    });
    Ok(handle)
}

impl Membership {
    /// Joins the cluster over UDP gossip.
    pub async fn gossip(config: MembershipConfig, generation: u64) -> anyhow::Result<Self> {
        let mut keys: BTreeMap<String, String> = config.keys.iter().cloned().collect();
        keys.insert(keys::STATUS.into(), "ready".into());
        let me = config.node_id.clone();
        let (tx, view) = watch::channel(View {
            me: me.clone(),
            ..View::default()
        });
        let tx = Arc::new(tx);
        // One transport for every join, so a rejoin's open finds the
        // socket it replaces (see `GossipTransport`).
        let transport = GossipTransport::new(config.sealer.clone(), config.partition.clone());
        let handle = spawn_gossip(
            &config,
            &transport,
            generation,
            keys.clone().into_iter().collect(),
            tx.clone(),
        )
        .await?;
        Ok(Self {
            me,
            view,
            backend: Backend::Gossip(Box::new(Gossip {
                config,
                transport,
                keys: std::sync::Mutex::new(keys),
                handle: tokio::sync::Mutex::new(Some(handle)),
                view: tx,
            })),
        })
    }

    /// The live view, updated as the cluster changes.
    pub fn view(&self) -> watch::Receiver<View> {
        self.view.clone()
    }

    /// Sets (or with `None` deletes) one of this node's keys.
    pub async fn publish(&self, key: &str, value: Option<&str>) {
        match &self.backend {
            Backend::Gossip(gossip) => {
                {
                    let mut keys = gossip.keys.lock().unwrap_or_else(|e| e.into_inner());
                    match value {
                        Some(value) => keys.insert(key.into(), value.into()),
                        None => keys.remove(key),
                    };
                }
                if let Some(handle) = gossip.handle.lock().await.as_ref() {
                    handle
                        .with_chitchat(|chitchat| {
                            let state = chitchat.self_node_state();
                            match value {
                                Some(value) => state.set(key, value),
                                None => state.delete(key),
                            }
                        })
                        .await;
                }
            }
            Backend::Memory(cluster) => cluster.publish(&self.me, key, value),
        }
    }

    /// Leaves and joins again with a new generation, so this node becomes
    /// the youngest member (a master that was superseded does this, so the
    /// master does not move back to it). Keys are kept, except
    /// `master_epoch`.
    pub async fn rejoin(&self) -> anyhow::Result<()> {
        let generation = new_generation();
        match &self.backend {
            Backend::Gossip(gossip) => {
                let mut handle = gossip.handle.lock().await;
                if let Some(old) = handle.take()
                    && let Err(error) = old.shutdown().await
                {
                    tracing::debug!("gossip stopped: {error}");
                }
                let keys: Vec<(String, String)> = {
                    let mut keys = gossip.keys.lock().unwrap_or_else(|e| e.into_inner());
                    keys.remove(keys::MASTER_EPOCH);
                    keys.clone().into_iter().collect()
                };
                // Rejoin through every member known now, not only the
                // configured seeds (the first node of a cluster has none).
                let mut config = gossip.config.clone();
                let known = self.view.borrow().members.clone();
                config.seeds.extend(
                    known
                        .iter()
                        .filter(|m| m.node_id != self.me)
                        .map(|m| m.gossip.to_string()),
                );
                let view = gossip.view.clone();
                *handle =
                    Some(spawn_gossip(&config, &gossip.transport, generation, keys, view).await?);
            }
            Backend::Memory(cluster) => cluster.rejoin(&self.me, generation),
        }
        Ok(())
    }

    /// Announces that this node is leaving, gives gossip a few rounds to
    /// spread it, then stops gossiping.
    pub async fn leave(self) {
        self.publish(keys::STATUS, Some("leaving")).await;
        match self.backend {
            Backend::Gossip(gossip) => {
                tokio::time::sleep(GOSSIP_INTERVAL * LEAVE_ROUNDS).await;
                if let Some(handle) = gossip.handle.into_inner()
                    && let Err(error) = handle.shutdown().await
                {
                    tracing::debug!("gossip stopped: {error}");
                }
            }
            Backend::Memory(cluster) => cluster.remove(&self.me),
        }
    }
}

/// The in-memory twin of gossip: one shared member table, every node's view
/// derived from it at once. Tests join, change and remove members directly.
#[derive(Debug, Default)]
pub struct MemCluster {
    members: Mutex<BTreeMap<String, Member>>,
    views: Mutex<Vec<watch::Sender<View>>>,
}

impl MemCluster {
    /// An empty cluster.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds (or replaces) a member and returns its membership.
    pub fn join(self: &Arc<Self>, member: Member) -> Membership {
        let me = member.node_id.clone();
        self.lock().insert(me.clone(), member);
        let (tx, view) = watch::channel(View {
            me: me.clone(),
            ..View::default()
        });
        self.views.lock().unwrap().push(tx);
        self.broadcast();
        Membership {
            me,
            view,
            backend: Backend::Memory(self.clone()),
        }
    }

    /// Gives a member a new generation, as a rejoin does.
    pub fn rejoin(&self, node_id: &str, generation: u64) {
        if let Some(member) = self.lock().get_mut(node_id) {
            member.generation = generation;
            member.master_epoch = None;
        }
        self.broadcast();
    }

    /// Removes a member, as a crash detected by the failure detector would.
    pub fn remove(&self, node_id: &str) {
        self.lock().remove(node_id);
        self.broadcast();
    }

    pub(crate) fn publish(&self, node_id: &str, key: &str, value: Option<&str>) {
        if let Some(member) = self.lock().get_mut(node_id) {
            match key {
                keys::MASTER_EPOCH => member.master_epoch = value.and_then(|v| v.parse().ok()),
                keys::STATUS => member.leaving = value == Some("leaving"),
                keys::MASTER_SEEN => member.master_seen = value.unwrap_or("").into(),
                _ => {}
            }
        }
        self.broadcast();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Member>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn broadcast(&self) {
        let members: Vec<Member> = self.lock().values().cloned().collect();
        for tx in self.views.lock().unwrap().iter() {
            tx.send_modify(|view| {
                view.members = members.clone();
                *view = std::mem::take(view).sorted();
            });
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A member for tests: `roles` like "back-end,worker".
    pub fn member(node_id: &str, generation: u64, roles: &str) -> Member {
        Member {
            node_id: node_id.into(),
            generation,
            gossip: "127.0.0.1:1".parse().unwrap(),
            roles: Roles::parse(roles).unwrap(),
            http: format!("http://{node_id}"),
            slots: 4,
            version: "test".into(),
            master_epoch: None,
            leaving: false,
            master_seen: String::new(),
        }
    }

    fn view(members: Vec<Member>) -> View {
        View {
            me: "a".into(),
            members,
            dead: vec![],
        }
        .sorted()
    }

    #[test]
    fn age_orders_by_generation_then_id() {
        let v = view(vec![
            member("c", 30, "back-end"),
            member("b", 10, "worker"),
            member("a", 20, "back-end"),
            member("d", 20, "back-end"),
        ]);
        let order: Vec<&str> = v.members.iter().map(|m| m.node_id.as_str()).collect();
        assert_eq!(order, ["b", "a", "d", "c"]);
        // b is older but not a back-end.
        assert_eq!(v.oldest_back_end().unwrap().node_id, "a");
    }

    #[test]
    fn a_leaving_node_is_not_where_the_master_belongs() {
        let mut a = member("a", 1, "back-end");
        a.leaving = true;
        let v = view(vec![a, member("b", 2, "back-end")]);
        assert_eq!(v.oldest_back_end().unwrap().node_id, "b");
    }

    #[test]
    fn the_master_host_is_who_claims_the_highest_epoch() {
        let mut a = member("a", 1, "back-end");
        a.master_epoch = Some(3);
        let mut b = member("b", 2, "back-end");
        b.master_epoch = Some(4);
        let v = view(vec![a, b, member("c", 3, "worker")]);
        assert_eq!(v.master_host().unwrap().node_id, "b");
    }

    #[test]
    fn the_successor_is_the_oldest_other_back_end_not_leaving() {
        let mut b = member("b", 2, "back-end");
        b.leaving = true;
        let v = view(vec![
            member("a", 1, "back-end"),
            b,
            member("w", 0, "worker"),
            member("c", 3, "back-end"),
        ]);
        assert_eq!(v.me, "a");
        assert_eq!(v.successor().unwrap().node_id, "c");
    }

    #[test]
    fn roles_parse_and_print() {
        assert_eq!(
            Roles::parse("worker,back-end").unwrap().to_string(),
            "back-end,worker"
        );
        assert!(Roles::parse("boss").is_err());
        assert!(Roles::parse("").is_err());
    }

    #[tokio::test]
    async fn the_memory_twin_tells_every_member() {
        let cluster = MemCluster::new();
        let a = cluster.join(member("a", 1, "back-end"));
        let b = cluster.join(member("b", 2, "worker"));
        let mut view_b = b.view();
        assert_eq!(view_b.borrow_and_update().members.len(), 2);
        a.publish(keys::MASTER_EPOCH, Some("1")).await;
        assert_eq!(
            view_b.borrow_and_update().master_host().unwrap().node_id,
            "a"
        );
        cluster.remove("a");
        assert!(view_b.borrow().master_host().is_none());
        assert_eq!(a.view().borrow().members.len(), 1);
    }
}

#[cfg(test)]
#[path = "membership_tests.rs"]
mod decode_tests;
