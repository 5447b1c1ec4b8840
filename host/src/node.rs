//! `cohort node`: one machine's cohort process.
//!
//! A node opens its data directory (one node per directory, enforced with a
//! lock file), joins the cluster, hosts the master if it is the oldest
//! back-end node (recovering it from its journal), starts a worker with its
//! slots and serves the HTTP API. On SIGTERM or Ctrl-C it stops in
//! order: no new connections, running attempts finish within the grace
//! period (the rest are stopped and re-queued), the journal is flushed and
//! a snapshot written, so the next start replays almost nothing.
//!
//! Nodes find each other by gossip (`--seed`); the master runs on the
//! oldest live back-end node (see [`crate::cluster`]); every node reaches it
//! through the singleton proxy. With no seeds a node is a cluster of one.

use crate::api::{self, Api, JobDefaults, NodeInfo};
use crate::cluster::link::MasterLink;
use crate::cluster::module_fetch::ModuleFetcher;
use crate::cluster::singleton;
use crate::events::{self, emit};
use crate::limits::{
    DEPARTED_KEPT_MAX, EVENT_STREAMS_MAX, HANDOVER_WAIT, JOIN_SETTLE,
    MASTER_FAILURE_CHECK_INTERVAL, MASTER_START_RETRY, SLOTS_MIN, SLOTS_PER_CPU,
    SNAPSHOT_EVERY_DEFAULT, STANDBY_CHECK, STANDBY_RETRY, STANDBY_RETRY_MAX, STANDBY_SETTLED,
    TOKEN_REFRESH_EVERY,
};
use crate::master::core::MasterComponent;
use crate::master::{self, CoreKind, MasterOptions, SnapshotSource};
use crate::membership::{self, Membership, MembershipConfig, Roles, keys};
use crate::modules::ModuleStore;
use crate::peer::Peer;
use crate::replication::Replication;
use crate::replication::transport::HttpTransport;
use crate::runtime::job_limits::{self, JobLimits};
use crate::runtime::{Isolation, Runtime, RuntimeConfig};
use crate::worker::{ProgressBoard, Worker, WorkerBlobs, WorkerOptions};
use anyhow::Context;
use cohort_master::Command;
use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{OnceCell, watch};

/// Options of `cohort node`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// Directory for the journal, snapshots, modules and compiled code.
    #[arg(long, env = "COHORT_DATA_DIR", default_value = "cohort-data")]
    pub data_dir: PathBuf,
    /// Directory to cache compiled code in (`DIR/compiled/`; default: the
    /// data directory). Nodes of one machine may share one, so each module
    /// and the master are compiled once on it; it must be this user's and
    /// writable by no one else, since compiled code runs as native code.
    #[arg(long, env = "COHORT_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// HTTP address to listen on (port 0 picks a free port; the address is
    /// printed on stdout).
    #[arg(long, env = "COHORT_LISTEN", default_value = "127.0.0.1:7070")]
    pub listen: SocketAddr,
    /// This node's id in the cluster (default: the host name, a dash and the
    /// HTTP port). Kept in the data directory at first start: later starts
    /// use it, and refuse a different one.
    #[arg(long, env = "COHORT_NODE_ID")]
    pub node_id: Option<String>,
    /// What this node does: any of back-end (may host the master, keeps a
    /// journal), worker (runs jobs), front-end (serves the API).
    #[arg(long, env = "COHORT_ROLES", default_value = "back-end,worker,front-end", value_parser = Roles::parse)]
    pub roles: Roles,
    /// UDP address to gossip on (default: the HTTP address's IP and port).
    #[arg(long, env = "COHORT_GOSSIP")]
    pub gossip: Option<SocketAddr>,
    /// Gossip address other nodes reach this one at (default: --gossip).
    #[arg(long, env = "COHORT_ADVERTISE")]
    pub advertise: Option<SocketAddr>,
    /// Gossip address of a node to join through (repeat for several).
    #[arg(long = "seed", env = "COHORT_SEEDS", value_delimiter = ',')]
    pub seeds: Vec<String>,
    /// Only nodes with the same cluster id form a cluster.
    #[arg(long, env = "COHORT_CLUSTER_ID", default_value = "cohort")]
    pub cluster_id: String,
    /// Jobs this node runs at once; 0 runs none [default: 8 per CPU, at
    /// least 16].
    #[arg(long, env = "COHORT_SLOTS")]
    pub slots: Option<u32>,
    /// Time limit of an attempt when a job does not set one.
    #[arg(long, value_parser = job_limits::parse_duration, default_value = "60s")]
    pub job_timeout: Duration,
    /// Memory limit of an attempt when a job does not set one.
    #[arg(long, value_parser = job_limits::parse_bytes, default_value = "256MiB")]
    pub job_memory: u64,
    /// Largest memory limit a job may ask for on this node: a front-end
    /// refuses a submission asking for more; a worker is given only jobs
    /// asking for at most this.
    #[arg(long, value_parser = job_limits::parse_bytes, default_value = "4GiB")]
    pub job_memory_max: u64,
    /// This worker's labels, e.g. `gpu=a100,zone=eu`: a job that asks for
    /// labels (`cohort submit --labels`) starts only on a worker that has
    /// all of them.
    #[arg(long, env = "COHORT_LABELS", value_parser = crate::labels::parse_labels, default_value = "", value_name = "KEY=VALUE,...")]
    pub labels: crate::labels::Labels,
    /// Where this node's jobs run: `thread` (on the node's threads; compiled
    /// code checks epochs to keep deadlines) or `process` (each running job
    /// in a pooled sandbox process, killed at its deadline; CPU-bound code
    /// runs without those checks).
    #[arg(
        long,
        value_enum,
        env = "COHORT_JOB_ISOLATION",
        default_value = "thread"
    )]
    pub job_isolation: Isolation,
    /// A PEM file of CA certificates that jobs' HTTPS calls trust besides
    /// the system's roots (a private CA of the services they are granted).
    #[arg(long, env = "COHORT_EGRESS_CA", value_name = "FILE")]
    pub egress_ca: Option<PathBuf>,
    /// Largest blob this node takes (`PUT /v1/blobs`, and copies from
    /// other nodes); give every node the same.
    #[arg(long, env = "COHORT_BLOB_BYTES_MAX", value_parser = job_limits::parse_bytes, default_value_t = crate::limits::BLOB_BYTES_MAX_DEFAULT)]
    pub blob_bytes_max: u64,
    /// How long this node keeps its copy of a blob the cluster no longer
    /// keeps, after an upload or copy last stored or found it here: longer
    /// than any upload takes to be copied to a majority. What the cluster
    /// keeps is set by `--retention` (see README, "Large inputs and
    /// outputs").
    /// At least 10 s: the time a copy's receiver may wait for the master
    /// to keep the blob it was sent.
    #[arg(long, env = "COHORT_BLOB_GRACE", value_parser = parse_blob_grace, default_value = "1h")]
    pub blob_grace: Duration,
    /// On a node that runs jobs but is not a back-end node: the most bytes
    /// of blobs its disk keeps as a cache of its jobs' inputs and outputs;
    /// beyond it, the least recently used go (never one a running job
    /// reads). Back-end nodes keep their replicated copies whatever this.
    #[arg(long, env = "COHORT_BLOB_CACHE_BYTES", value_parser = job_limits::parse_bytes, default_value = "10GiB")]
    pub blob_cache_bytes: u64,
    /// Longest a ready job whose input blob another free worker holds is
    /// left for that worker before any worker takes it (`0s`: no
    /// waiting). See README, "Large inputs and outputs".
    #[arg(long, env = "COHORT_LOCALITY_WAIT", value_parser = parse_locality_wait, default_value = "1s")]
    pub locality_wait: Duration,
    /// How long past its timeout a running attempt whose worker has not
    /// reported is presumed lost (on back-end nodes, for the master they
    /// host): the lease's grace. Workers renew the lease while they fetch
    /// an attempt's module and inputs or store its outputs, so the grace
    /// covers a report's way back, not data transfers. 1 s to 1 h.
    #[arg(long, env = "COHORT_LEASE_GRACE", value_parser = parse_lease_grace, default_value = "5s")]
    pub lease_grace: Duration,
    /// Keep blobs in an S3-compatible store, `s3://bucket/prefix`, instead
    /// of on a majority of the back-end nodes (each node's disk then holds
    /// a cache). Configured by the standard `AWS_*` variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, ...); give every node the same.
    #[arg(long, env = "COHORT_BLOB_STORE", value_name = "URL", value_parser = crate::cluster::blob_s3::StoreUrl::parse)]
    pub blob_store: Option<crate::cluster::blob_s3::StoreUrl>,
    /// Attempts of a job that does not set `max_attempts`.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// Most jobs waiting to run; beyond, submissions get 429 `queue_full`.
    #[arg(long, default_value_t = cohort_master::Config::default().queue_max)]
    pub queue_max: u64,
    /// How long finished jobs (and their results) stay queryable.
    #[arg(long, value_parser = job_limits::parse_duration, default_value = "1h")]
    pub retention: Duration,
    /// How long running attempts may take to finish when the node stops.
    #[arg(long, value_parser = job_limits::parse_duration, default_value = "10s")]
    pub shutdown_grace: Duration,
    /// Events between master snapshots.
    #[arg(long, default_value_t = SNAPSHOT_EVERY_DEFAULT)]
    pub snapshot_every: u64,
    /// Where the master's periodic snapshots are taken: `shadow`, a second
    /// instance of the master on its own thread that applies every event
    /// (the master never pauses for a snapshot; costs a second copy of its
    /// state in memory), or `master`, on the master's own thread (it
    /// answers nobody while it serializes, about 1 s per million jobs).
    #[arg(long, value_enum, default_value = "shadow")]
    pub snapshots: SnapshotSource,
    /// Keep a warm standby of the master on this back-end node while
    /// another hosts it: a copy fed every committed entry, which a
    /// take-over starts from (no replay of the journal) and whose
    /// snapshots compact this node's journal. `off` saves its memory (a
    /// copy of the master's state) and CPU.
    #[arg(long, value_parser = clap::builder::BoolishValueParser::new(), action = clap::ArgAction::Set, default_value = "on")]
    pub standby: bool,
    /// Start the cluster's voter set with this node if no back-end node it
    /// reaches has one [default: when started without --seed]. Give it to
    /// exactly one node of a new cluster whose nodes all have seeds.
    #[arg(long, env = "COHORT_BOOTSTRAP")]
    pub bootstrap: bool,
    /// A voter gone from the cluster this long is removed from the voter
    /// set (it is added back once it returns and catches up); `0` never.
    #[arg(long, env = "COHORT_VOTER_TIMEOUT", value_parser = job_limits::parse_duration, default_value = "10m")]
    pub voter_timeout: Duration,
    /// Run the master's logic natively instead of in its Wasm component
    /// (for comparisons).
    #[arg(long, value_enum, default_value = "wasm", hide = true)]
    pub master_core: CoreKind,
    /// The cluster key file (`cohort keygen FILE`), the same on every node:
    /// seals gossip and node-to-node requests, and makes the public API
    /// require tokens. Required to listen beyond loopback.
    #[arg(long, env = "COHORT_CLUSTER_KEY_FILE")]
    pub cluster_key: Option<PathBuf>,
    /// PEM certificate chain: serve the public API over TLS (with --tls-key).
    #[arg(long, env = "COHORT_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "COHORT_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Listen beyond loopback without a cluster key: anyone who can reach
    /// the ports can use, join or disrupt the cluster. Not recommended.
    #[arg(long, env = "COHORT_INSECURE")]
    pub insecure: bool,
    /// Trace export (`--otlp-endpoint`, `--trace-sample`; see
    /// `cohort::telemetry`).
    #[command(flatten)]
    pub traces: crate::telemetry::TraceArgs,
    /// Fault injection for tests: a file listing addresses this node is cut
    /// off from (see `cohort::fault`).
    #[arg(long, hide = true)]
    pub fault_partition: Option<PathBuf>,
}

/// The node's security from its flags; refuses to expose an unprotected
/// node beyond loopback unless `--insecure` says so.
fn security_settings(args: &NodeArgs) -> anyhow::Result<api::Security> {
    let sealer = args
        .cluster_key
        .as_ref()
        .map(|path| {
            crate::security::Keyring::load(path)
                .map(|keys| Arc::new(crate::security::Sealer::new(keys, &args.cluster_id)))
        })
        .transpose()?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(crate::security::tls::server_config(cert, key)?),
        _ => None,
    };
    let exposed: Vec<SocketAddr> = [Some(args.listen), args.gossip, args.advertise]
        .into_iter()
        .flatten()
        .filter(|addr| !addr.ip().is_loopback())
        .collect();
    if sealer.is_none() && !exposed.is_empty() {
        if !args.insecure {
            anyhow::bail!(
                "refusing to listen on {} without a cluster key: anyone who reaches it could join, \
                 read every job and fence the master. Make a key with `cohort keygen cluster.key`, \
                 give every node the same file with --cluster-key cluster.key, and create API \
                 tokens with `cohort token create --cluster-key cluster.key --scope ...`; \
                 or pass --insecure to run unprotected",
                exposed
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        // Printed whatever COHORT_LOG says: an open node must not go unnoticed.
        eprintln!(
            "WARNING: --insecure: listening on {exposed:?} without a cluster key; gossip, \
             node-to-node requests and the API are open to anyone who reaches them"
        );
    }
    Ok(api::Security {
        tokens: sealer
            .is_some()
            .then(|| Arc::new(crate::security::token::TokenTable::default())),
        // Past the check above, exposed without a key means --insecure.
        insecure: sealer.is_none() && !exposed.is_empty(),
        sealer,
        tls,
    })
}

/// Runs a node until SIGTERM/Ctrl-C (clean stop) or a master failure.
///
/// In order: the node's own disk and runtime ([`open_local`]), the HTTP
/// listener and the node's identity, gossip ([`join`]), the proxy to the
/// master, replication on back-end nodes, the worker, the API, then the
/// singleton manager that hosts the master while this is the oldest live
/// back-end node; it then waits for a reason to stop and stops in order
/// ([`stop_in_order`]).
pub async fn run(args: NodeArgs) -> anyhow::Result<()> {
    let data_dir = &args.data_dir;
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data directory {}", data_dir.display()))?;
    // Held for the node's life: one node per data directory.
    let _lock = lock_data_dir(data_dir)?;
    let local = open_local(&args)?;
    let listener = listen(&args).await?;
    let addr = listener.local_addr()?;
    let node_id = node_identity(&args.data_dir, args.node_id.as_deref(), addr)?;
    crate::telemetry::set_node(&node_id);
    let http = format!("http://{addr}");
    let gossip_listen = args.gossip.unwrap_or(addr);
    let membership = join(&args, &node_id, &http, gossip_listen, &local).await?;
    let view = membership.view();
    let (local_master, local_rx) = watch::channel(None);
    let peer = Peer::node(local.security.sealer.clone()).partitioned(local.partition.clone());
    let link = MasterLink::new(local_rx, view.clone(), peer.clone());
    let fetcher = ModuleFetcher::new(view.clone(), peer.clone());
    if let Some(table) = local.security.tokens.clone() {
        spawn_token_refresh(link.clone(), table);
    }
    let replication = args
        .roles
        .back_end
        .then(|| start_replication(&args, &node_id, &peer, &view, &link))
        .transpose()?;
    let blob_store = crate::blobs::BlobStore::open(data_dir, args.blob_bytes_max)
        .with_context(|| format!("cannot open the blob store in {}", data_dir.display()))?;
    let remote = match args.blob_store.clone() {
        Some(url) => {
            let remote = crate::cluster::blob_s3::S3Store::connect(url)
                .await
                .map_err(anyhow::Error::msg)?;
            crate::cluster::blob_s3::spawn_sweeper(link.clone(), remote.clone(), args.blob_grace);
            Some(remote)
        }
        None => None,
    };
    let blobs = crate::cluster::blob_transfer::BlobTransfer::new(
        view.clone(),
        peer.clone(),
        local.security.sealer.clone(),
        blob_store.clone(),
    )
    .with_remote(remote);
    crate::cluster::blob_gc::spawn(link.clone(), blob_store, args.blob_grace);
    let wiring = Wiring {
        node_id: node_id.clone(),
        view: view.clone(),
        link: link.clone(),
        fetcher: fetcher.clone(),
        replication: replication.clone(),
        blobs,
    };
    let leave = Arc::new(tokio::sync::Notify::new());
    let progress = ProgressBoard::default();
    let worker = start_worker(&args, &local, &wiring, &progress)?;
    let (stop_serving, serving) = watch::channel(false);
    let api = build_api(
        &args,
        local,
        &wiring,
        leave.clone(),
        progress,
        serving.clone(),
    );
    let server = tokio::spawn(api::serve(listener, api, serving));
    let roles = args.roles;
    println!("cohort node {node_id} ({roles}) gossiping on {gossip_listen}, listening on {http}");
    std::io::stdout().flush()?;

    let membership = Arc::new(membership);
    spawn_view_publisher(membership.clone(), view.clone(), replication.clone());
    let (stop_singleton, singleton_stopped) = watch::channel(false);
    let singleton = replication.clone().map(|replication| {
        let host = LocalMaster {
            options: master_options(&args),
            handed: replication.handed_over(),
            replication,
            link: link.clone(),
            local: local_master,
            running: None,
            view: view.clone(),
            component: precompile_master(cache_dir(&args)),
            fetcher: fetcher.clone(),
            standby: Arc::default(),
        };
        start_singleton(&args, membership.clone(), host, singleton_stopped)
    });
    let (failure, singleton) = wait_for_stop(&args, &leave, &link, singleton).await;
    let stopping = Stopping {
        membership,
        view,
        link,
        worker,
        singleton,
        stop_singleton,
        stop_serving,
        server,
        grace: args.shutdown_grace,
    };
    stop_in_order(stopping).await;
    if let Some(error) = failure {
        return Err(error);
    }
    emit!(info, events::STOPPED, "stopped cleanly");
    Ok(())
}

/// What a node has of its own before it meets the cluster.
struct Local {
    /// A fault test's partition (`--fault-partition`), which both
    /// transports honour.
    partition: Option<crate::fault::Partition>,
    security: api::Security,
    slots: u32,
    runtime: Runtime,
    modules: Arc<ModuleStore>,
}

/// Where this node caches compiled code: `--cache-dir`, else the data
/// directory.
fn cache_dir(args: &NodeArgs) -> &std::path::Path {
    args.cache_dir.as_deref().unwrap_or(&args.data_dir)
}

/// Checks the settings, and opens the runtime and the module store in the
/// (locked) data directory.
fn open_local(args: &NodeArgs) -> anyhow::Result<Local> {
    let data_dir = &args.data_dir;
    if let Some(dir) = &args.cache_dir {
        crate::runtime::module::private_dir(dir).map_err(|why| {
            anyhow::anyhow!(
                "cannot cache compiled code in {} (--cache-dir): {why}",
                dir.display()
            )
        })?;
    }
    anyhow::ensure!(
        args.retention.as_millis() <= u128::from(cohort_master::limits::CONFIG_DURATION_MS_MAX),
        "--retention is at most 365 days"
    );
    let security = security_settings(args)?;
    let slots = if args.roles.worker {
        args.slots.unwrap_or_else(default_slots)
    } else {
        0
    };
    let runtime = Runtime::new(RuntimeConfig {
        data_dir: Some(cache_dir(args).to_path_buf()),
        concurrent_jobs: slots.max(1),
        memory_bytes_max: args.job_memory_max,
        isolation: args.job_isolation,
        egress_ca: args.egress_ca.clone(),
        ..RuntimeConfig::default()
    })?;
    let modules = Arc::new(
        ModuleStore::open(data_dir, runtime.clone())
            .with_context(|| format!("cannot open the module store in {}", data_dir.display()))?,
    );
    if slots > 0 {
        // Modules stored here compile in the background, before their
        // first job.
        modules.compile_ahead();
    }
    Ok(Local {
        partition: args
            .fault_partition
            .clone()
            .map(crate::fault::Partition::follow),
        security,
        slots,
        runtime,
        modules,
    })
}

/// What the node's parts are wired to.
struct Wiring {
    node_id: String,
    view: watch::Receiver<membership::View>,
    link: MasterLink,
    fetcher: ModuleFetcher,
    replication: Option<Replication>,
    blobs: crate::cluster::blob_transfer::BlobTransfer,
}

/// The worker, on nodes with slots.
fn start_worker(
    args: &NodeArgs,
    local: &Local,
    wiring: &Wiring,
    progress: &ProgressBoard,
) -> anyhow::Result<Option<Worker>> {
    (local.slots > 0)
        .then(|| {
            Worker::start(
                WorkerOptions {
                    id: wiring.node_id.clone(),
                    slots: local.slots,
                    limits: JobLimits {
                        memory_bytes: args.job_memory,
                        ..JobLimits::default()
                    },
                    sealer: local.security.sealer.clone(),
                    pool: cohort_master::WorkerPool {
                        labels: args.labels.0.clone(),
                        memory_max: Some(args.job_memory_max),
                    },
                },
                wiring.link.clone(),
                local.modules.clone(),
                wiring.fetcher.clone(),
                local.runtime.clone(),
                progress.clone(),
                WorkerBlobs {
                    cache_bytes: (!args.roles.back_end).then_some(args.blob_cache_bytes),
                    transfer: wiring.blobs.clone(),
                    voters: {
                        let replication = wiring.replication.clone();
                        Arc::new(move || replication.as_ref().map(|r| r.voter_count()))
                    },
                },
            )
        })
        .transpose()
        .context("cannot start the job threads")
}

/// The API, public and node-to-node, as this node serves it.
fn build_api(
    args: &NodeArgs,
    local: Local,
    wiring: &Wiring,
    leave: Arc<tokio::sync::Notify>,
    progress: ProgressBoard,
    closing: watch::Receiver<bool>,
) -> Arc<Api> {
    Arc::new(Api {
        master: wiring.link.clone(),
        fetcher: wiring.fetcher.clone(),
        view: wiring.view.clone(),
        replication: wiring.replication.clone(),
        internal: Arc::new(crate::api::internal::Internal {
            node_id: wiring.node_id.clone(),
            sealer: local.security.sealer.clone(),
            master: wiring.link.clone(),
            replication: wiring.replication.clone(),
            modules: local.modules.clone(),
            tokens: local.security.tokens.clone(),
            masters: crate::master::upgrade::MasterStore::new(&args.data_dir)
                .caching_in(cache_dir(args)),
        }),
        leave,
        modules: local.modules.clone(),
        progress,
        node: NodeInfo {
            id: wiring.node_id.clone(),
            roles: args.roles,
        },
        defaults: JobDefaults {
            timeout_ms: args.job_timeout.as_millis() as u64,
            max_attempts: args.max_attempts,
            memory_bytes_max: args.job_memory_max,
        },
        responses: Default::default(),
        security: local.security,
        request_ids: Default::default(),
        history: follow_history(&wiring.view),
        event_streams: Arc::new(tokio::sync::Semaphore::new(EVENT_STREAMS_MAX)),
        blobs: wiring.blobs.clone(),
        closing,
    })
}

/// Tries of an HTTP port whose UDP twin is free, with `--listen` on port 0
/// and no `--gossip`.
const LISTEN_TRIES: usize = 16;

/// The HTTP listener. Gossip takes the HTTP port over UDP unless
/// `--gossip` says otherwise; when the port was the system's pick (`:0`),
/// a UDP socket elsewhere may already hold that number, so another port is
/// picked until both are free (a few tries), instead of failing to gossip.
async fn listen(args: &NodeArgs) -> anyhow::Result<TcpListener> {
    let cannot = || format!("cannot listen on {}", args.listen);
    for _ in 1..LISTEN_TRIES {
        let listener = TcpListener::bind(args.listen).await.with_context(cannot)?;
        let picked = args.listen.port() == 0 && args.gossip.is_none();
        let addr = listener.local_addr()?;
        let taken = picked
            && matches!(std::net::UdpSocket::bind(addr),
                Err(error) if error.kind() == std::io::ErrorKind::AddrInUse);
        if !taken {
            return Ok(listener);
        }
    }
    TcpListener::bind(args.listen).await.with_context(cannot)
}

/// Starts gossip, publishing this node's roles, address, slots and version.
async fn join(
    args: &NodeArgs,
    node_id: &str,
    http: &str,
    gossip_listen: SocketAddr,
    local: &Local,
) -> anyhow::Result<Membership> {
    Membership::gossip(
        MembershipConfig {
            node_id: node_id.to_string(),
            cluster_id: args.cluster_id.clone(),
            gossip_listen,
            gossip_advertise: args.advertise.unwrap_or(gossip_listen),
            seeds: args.seeds.clone(),
            keys: vec![
                (keys::ROLES.into(), args.roles.to_string()),
                (keys::HTTP.into(), http.to_string()),
                (keys::SLOTS.into(), local.slots.to_string()),
                (keys::VERSION.into(), env!("CARGO_PKG_VERSION").into()),
            ],
            sealer: local.security.sealer.clone(),
            partition: local.partition.clone(),
        },
        membership::new_generation(),
    )
    .await
    .with_context(|| format!("cannot gossip on {gossip_listen} (UDP)"))
}

/// Keeps the node's copy of the API tokens fresh.
/// `--locality-wait`: a duration of at most
/// [`LOCALITY_WAIT_MS_MAX`](cohort_master::limits::LOCALITY_WAIT_MS_MAX).
fn parse_locality_wait(text: &str) -> Result<Duration, String> {
    let wait = job_limits::parse_duration(text)?;
    let max = cohort_master::limits::LOCALITY_WAIT_MS_MAX;
    if wait.as_millis() > u128::from(max) {
        return Err(format!("at most {}s", max / 1000));
    }
    Ok(wait)
}

/// `--lease-grace`: [`LEASE_GRACE_MIN`] to [`LEASE_GRACE_MAX`].
///
/// [`LEASE_GRACE_MIN`]: crate::limits::LEASE_GRACE_MIN
/// [`LEASE_GRACE_MAX`]: crate::limits::LEASE_GRACE_MAX
fn parse_lease_grace(text: &str) -> Result<Duration, String> {
    use crate::limits::{LEASE_GRACE_MAX, LEASE_GRACE_MIN};
    let grace = job_limits::parse_duration(text)?;
    if !(LEASE_GRACE_MIN..=LEASE_GRACE_MAX).contains(&grace) {
        return Err(format!(
            "`{text}`: the lease grace is {LEASE_GRACE_MIN:?} to {LEASE_GRACE_MAX:?}"
        ));
    }
    Ok(grace)
}

/// `--blob-grace`: a duration of at least
/// [`BLOB_GRACE_MIN`](crate::cluster::blob_gc::BLOB_GRACE_MIN).
fn parse_blob_grace(text: &str) -> Result<Duration, String> {
    let grace = job_limits::parse_duration(text)?;
    let min = crate::cluster::blob_gc::BLOB_GRACE_MIN;
    if grace < min {
        return Err(format!(
            "`{text}` is shorter than {} s: a node receiving a copy of an upload must keep it \
             until the master keeps the blob",
            min.as_secs()
        ));
    }
    Ok(grace)
}

fn spawn_token_refresh(link: MasterLink, table: Arc<crate::security::token::TokenTable>) {
    tokio::spawn(async move {
        loop {
            api::refresh_tokens(&link, &table).await;
            tokio::time::sleep(TOKEN_REFRESH_EVERY).await;
        }
    });
}

/// Back-end nodes replicate the master's journal. The first node of a
/// cluster (started without seeds) may start the voter set.
fn start_replication(
    args: &NodeArgs,
    node_id: &str,
    peer: &Peer,
    view: &watch::Receiver<membership::View>,
    link: &MasterLink,
) -> anyhow::Result<Replication> {
    let transport = HttpTransport::new(node_id.to_string(), peer.clone(), view.clone());
    let voter_timeout = (!args.voter_timeout.is_zero()).then_some(args.voter_timeout);
    let options = crate::replication::options(
        node_id,
        args.bootstrap || args.seeds.is_empty(),
        voter_timeout,
    );
    let replication = Replication::start(options, &args.data_dir, transport)
        .with_context(|| format!("cannot open the journal in {}", args.data_dir.display()))?;
    link.follow_replication(replication.leader());
    Ok(replication)
}

/// What this node saw happen to the cluster lately, kept as the view
/// changes.
fn follow_history(
    view: &watch::Receiver<membership::View>,
) -> Arc<crate::cluster::history::History> {
    let history = Arc::new(crate::cluster::history::History::default());
    tokio::spawn({
        let (history, view) = (history.clone(), view.clone());
        async move { history.follow(view).await }
    });
    history
}

/// Back-end nodes compile the master component once, now, so taking the
/// master over (hand-over or first start) does not wait for the compiler
/// or compile it a second time.
fn precompile_master(cache_dir: &std::path::Path) -> Arc<OnceCell<MasterComponent>> {
    let component = Arc::new(OnceCell::new());
    tokio::spawn({
        let component = component.clone();
        let cache_dir = cache_dir.to_path_buf();
        async move {
            if let Err(error) = master_component(&component, cache_dir).await {
                tracing::warn!("cannot precompile the master component: {error:#}");
            }
        }
    });
    component
}

/// Publishes where this node believes the master runs, as the view
/// changes, and tells replication which back-end nodes are members.
fn spawn_view_publisher(
    membership: Arc<Membership>,
    mut view: watch::Receiver<membership::View>,
    replication: Option<Replication>,
) {
    tokio::spawn(async move {
        let mut published = None;
        let mut back_ends = Vec::new();
        loop {
            let seen = {
                let view = view.borrow_and_update();
                if let Some(replication) = &replication {
                    let now: Vec<String> = view.back_ends().map(|m| m.node_id.clone()).collect();
                    if now != back_ends {
                        replication.set_members(now.clone());
                        back_ends = now;
                    }
                }
                view.master_host()
                    .map(|m| format!("{}@{}", m.node_id, m.master_epoch.unwrap_or(0)))
                    .unwrap_or_default()
            };
            if published.as_ref() != Some(&seen) {
                membership.publish(keys::MASTER_SEEN, Some(&seen)).await;
                published = Some(seen);
            }
            if view.changed().await.is_err() {
                return;
            }
        }
    });
}

/// How this node starts the master when it hosts it.
fn master_options(args: &NodeArgs) -> MasterOptions {
    MasterOptions {
        data_dir: args.data_dir.clone(),
        cache_dir: cache_dir(args).to_path_buf(),
        config: cohort_master::Config {
            queue_max: args.queue_max,
            retention_ms: args.retention.as_millis() as u64,
            locality_wait_ms: args.locality_wait.as_millis() as u64,
            lease_grace_ms: args.lease_grace.as_millis() as u64,
            ..cohort_master::Config::default()
        },
        core: args.master_core,
        snapshot_every: args.snapshot_every,
        live_workers: Vec::new(),
        component: None,
        shadow: args.snapshots == SnapshotSource::Shadow,
    }
}

type SingletonTask = tokio::task::JoinHandle<anyhow::Result<()>>;

/// The singleton manager, on back-end nodes: hosts the master while this
/// is the oldest live back-end node (and keeps a warm standby otherwise).
fn start_singleton(
    args: &NodeArgs,
    membership: Arc<Membership>,
    mut host: LocalMaster,
    stopped: watch::Receiver<bool>,
) -> SingletonTask {
    if args.standby {
        tokio::spawn(keep_standby(
            host.options.clone(),
            host.replication.clone(),
            host.component.clone(),
            host.standby.clone(),
            host.fetcher.clone(),
        ));
    }
    let settle = if args.seeds.is_empty() {
        Duration::ZERO
    } else {
        JOIN_SETTLE
    };
    tokio::spawn(async move {
        let departed = departures(&host.replication, host.view.clone());
        let deposed = deposals(&host.replication);
        singleton::run(&membership, &mut host, settle, departed, deposed, stopped).await
    })
}

/// Waits for a reason to stop: a signal, a leave request, a failed
/// master, or the singleton manager ending. The error, if it is one, and
/// the singleton manager if it still runs.
async fn wait_for_stop(
    args: &NodeArgs,
    leave: &tokio::sync::Notify,
    link: &MasterLink,
    mut singleton: Option<SingletonTask>,
) -> (Option<anyhow::Error>, Option<SingletonTask>) {
    let grace_ms = millis(args.shutdown_grace);
    let failure = tokio::select! {
        signal = stop_signal() => {
            emit!(info, events::STOPPING, cause = %signal, grace_ms = grace_ms,
                "{signal}: stopping (grace {:?} for running jobs)", args.shutdown_grace);
            None
        }
        () = leave.notified() => {
            emit!(info, events::STOPPING, cause = %"leave", grace_ms = grace_ms,
                "asked to leave: stopping (grace {:?} for running jobs)", args.shutdown_grace);
            None
        }
        () = watch_failure(link) => Some(anyhow::anyhow!(
            "the master failed (see the log above); restart the node to recover from its journal"
        )),
        result = async { singleton.as_mut().expect("guarded").await }, if singleton.is_some() => {
            singleton = None;
            Some(match result {
                Ok(Ok(())) => anyhow::anyhow!("the singleton manager stopped"),
                Ok(Err(error)) => error.context("cannot run the master"),
                Err(error) => anyhow::anyhow!("the singleton manager failed: {error}"),
            })
        }
    };
    (failure, singleton)
}

/// What a stopping node still has running.
struct Stopping {
    membership: Arc<Membership>,
    view: watch::Receiver<membership::View>,
    link: MasterLink,
    worker: Option<Worker>,
    singleton: Option<SingletonTask>,
    stop_singleton: watch::Sender<bool>,
    stop_serving: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    grace: Duration,
}

/// Stops in order. Announces the leave. If this node hosts the master and
/// another back-end node can take it, hands it over first (flush,
/// snapshot, send), so the cluster keeps a master while this node drains
/// its worker; with no successor, drains first so the running attempts'
/// outcomes still reach the master here. Then stops serving and leaves.
async fn stop_in_order(stopping: Stopping) {
    let Stopping {
        membership,
        view,
        link,
        mut worker,
        singleton,
        stop_singleton,
        stop_serving,
        server,
        grace,
    } = stopping;
    membership.publish(keys::STATUS, Some("leaving")).await;
    let successor = view.borrow().successor().is_some();
    if link.local().is_some()
        && !successor
        && let Some(worker) = worker.take()
    {
        worker.shutdown(grace).await;
    }
    let _ = stop_singleton.send(true);
    if let Some(singleton) = singleton {
        let _ = singleton.await;
    }
    if let Some(worker) = worker {
        worker.shutdown(grace).await;
    }
    let _ = stop_serving.send(true);
    let _ = server.await;
    if let Ok(membership) = Arc::try_unwrap(membership) {
        membership.leave().await;
    }
}

/// `duration` in whole milliseconds, as event fields give durations.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The node's master component: compiled (or loaded from the compile cache
/// in `cache_dir`) by the first caller, shared by every later one.
async fn master_component(
    cell: &OnceCell<MasterComponent>,
    cache_dir: PathBuf,
) -> anyhow::Result<&MasterComponent> {
    cell.get_or_try_init(|| async move {
        tokio::task::spawn_blocking(move || MasterComponent::load(Some(&cache_dir)))
            .await
            .context("the compiler thread failed")?
    })
    .await
}

/// The node that handed the master over to this one, as the singleton
/// wants it: `(node id, generation)` of departed hosts, treated as leaving
/// at once (without waiting for gossip).
///
/// A master that replication finds silent counts as departed while it is
/// silent, and for good once another master leads: its heartbeats stopped
/// for longer than every follower's lease, so the next host starts taking
/// over at once instead of waiting for gossip to declare it dead. Should it
/// be alive after all (cut off from this node only), the followers that
/// still hear it decline the claim; once it is heard again it no longer
/// counts as departed.
fn departures(
    replication: &Replication,
    view: watch::Receiver<membership::View>,
) -> watch::Receiver<BTreeSet<(String, u64)>> {
    let (tx, rx) = watch::channel(BTreeSet::new());
    let mut handed = replication.handed_over();
    let mut leader = replication.leader();
    tokio::spawn(async move {
        let mut handed_over = BTreeSet::new();
        let mut silent = None;
        loop {
            tokio::select! {
                changed = handed.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let Some(from) = handed.borrow_and_update().clone() else {
                        continue;
                    };
                    let generation = view.borrow().member(&from).map(|m| m.generation);
                    if let Some(generation) = generation {
                        if handed_over.len() >= DEPARTED_KEPT_MAX {
                            handed_over.pop_first();
                        }
                        handed_over.insert((from, generation));
                    }
                }
                changed = leader.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let now = leader.borrow_and_update().clone();
                    match (now.silent, silent.take()) {
                        (Some(node), _) => {
                            let generation = view.borrow().member(&node).map(|m| m.generation);
                            silent = generation.map(|generation| (node, generation));
                        }
                        // Another master leads now (this node, perhaps):
                        // the silent one stays departed, or the singleton
                        // would see it as the oldest again until gossip
                        // declares it dead.
                        (None, Some(was)) => match &now.node {
                            Some((node, _)) if *node != was.0 => {
                                if handed_over.len() >= DEPARTED_KEPT_MAX {
                                    handed_over.pop_first();
                                }
                                handed_over.insert(was);
                            }
                            // It was heard again: it is alive.
                            Some(_) => {}
                            // A take-over is under way: no one leads yet.
                            None => silent = Some(was),
                        },
                        (None, None) => {}
                    }
                }
            }
            let mut departed = handed_over.clone();
            departed.extend(silent.clone());
            tx.send_if_modified(|seen| {
                let changed = *seen != departed;
                if changed {
                    *seen = departed;
                }
                changed
            });
        }
    });
    rx
}

/// The epoch that superseded this node's master, for the singleton (0:
/// none).
fn deposals(replication: &Replication) -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0);
    let mut superseded = replication.superseded();
    tokio::spawn(async move {
        while superseded.changed().await.is_ok() {
            let newer = superseded.borrow_and_update().unwrap_or(0);
            tx.send_if_modified(|seen| {
                let newer_than_seen = newer > *seen;
                *seen = (*seen).max(newer);
                newer_than_seen
            });
        }
    });
    rx
}

/// The master on this node, started and stopped by the singleton manager.
struct LocalMaster {
    options: MasterOptions,
    replication: Replication,
    /// This node's proxy: told where the master went after a hand-over.
    link: MasterLink,
    local: watch::Sender<Option<master::MasterHandle>>,
    running: Option<master::MasterHandle>,
    view: watch::Receiver<membership::View>,
    /// Hand-overs to this node; one not seen yet means the master is on
    /// its way here.
    handed: watch::Receiver<Option<String>>,
    /// The master component, compiled once per node.
    component: Arc<OnceCell<MasterComponent>>,
    /// Fetches uploaded master builds this node lacks.
    fetcher: ModuleFetcher,
    /// The warm standby ([`keep_standby`]).
    standby: Arc<std::sync::Mutex<StandbySlot>>,
}

/// This node's warm standby, and whether its master runs (or starts),
/// when it has none.
#[derive(Default)]
struct StandbySlot {
    standby: Option<master::standby::Standby>,
    hosting: bool,
}

impl LocalMaster {
    fn standby(&self) -> std::sync::MutexGuard<'_, StandbySlot> {
        self.standby.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the master from what replication read once this node
    /// claimed it: the builds it runs fetched, and from the warm standby's
    /// state when replication read only the entries after it.
    async fn start_claimed(
        &self,
        started: crate::replication::Started,
        standby: Option<master::standby::Standby>,
        live_workers: Vec<String>,
    ) -> anyhow::Result<(master::MasterHandle, master::RecoveryReport)> {
        self.fetch_builds(started.snapshot.as_ref()).await?;
        let warm =
            match (started.warm, standby) {
                (Some(at), Some(standby)) => Some(standby.promote(at).await.map_err(|e| {
                    anyhow::anyhow!("the warm standby cannot start the master: {e}")
                })?),
                (Some(at), None) => anyhow::bail!(
                    "the journal was read from the standby's index {at}, but the standby is gone"
                ),
                (None, _) => None,
            };
        let mut options = self.options.clone();
        options.live_workers = live_workers;
        if options.core == CoreKind::Wasm {
            let cache_dir = options.cache_dir.clone();
            options.component = Some(master_component(&self.component, cache_dir).await?.clone());
        }
        let replication = self.replication.clone();
        // The builds a chunk of events switches to, fetched before it is
        // replayed (on the blocking thread the recovery runs on).
        let (fetcher, data_dir) = (self.fetcher.clone(), self.options.data_dir.clone());
        let runtime = tokio::runtime::Handle::current();
        let prepare = move |chunk: &[Vec<u8>]| {
            let needed = master::upgrade::builds_needed(None, chunk);
            if needed.is_empty() {
                return Ok(());
            }
            (runtime.block_on(fetch_master_builds(&fetcher, &data_dir, needed)))
                .map_err(|e| format!("{e:#}"))
        };
        tokio::task::spawn_blocking(move || {
            master::start_warm(options, replication, started, warm, prepare)
        })
        .await
        .context("the recovery thread failed")?
        .context("cannot start the master")
    }
}

/// Fetches each of the master builds `needed` that this node lacks from
/// the other back-end nodes, into its store in `data_dir`.
async fn fetch_master_builds(
    fetcher: &ModuleFetcher,
    data_dir: &std::path::Path,
    needed: Vec<[u8; 32]>,
) -> anyhow::Result<()> {
    let store = master::upgrade::MasterStore::new(data_dir);
    for digest in needed {
        if store.contains(&digest) {
            continue;
        }
        let name = crate::runtime::Digest::from(digest);
        let wasm = fetcher
            .fetch(crate::cluster::module_fetch::MASTER_FETCH_PATH, &name)
            .await
            .map_err(|e| anyhow::anyhow!("master {e}"))?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "the journal runs master sha256:{name}, which no live back-end node has"
                )
            })?;
        let store = store.clone();
        tokio::task::spawn_blocking(move || store.put(&wasm))
            .await
            .context("the store thread failed")??;
    }
    Ok(())
}

/// Keeps a warm standby ([`master::standby`]) running on this back-end
/// node while another node leads the journal. One that ended for lack of
/// an uploaded master build (this node joined after an upgrade) is
/// restarted at once after fetching it from the other back-end nodes.
async fn keep_standby(
    options: MasterOptions,
    replication: Replication,
    component: Arc<OnceCell<MasterComponent>>,
    slot: Arc<std::sync::Mutex<StandbySlot>>,
    fetcher: ModuleFetcher,
) {
    let lock = || slot.lock().unwrap_or_else(|e| e.into_inner());
    let mut last_start: Option<tokio::time::Instant> = None;
    let mut retry = STANDBY_RETRY;
    loop {
        tokio::time::sleep(STANDBY_CHECK).await;
        let led_elsewhere = replication
            .leader()
            .borrow()
            .node
            .as_ref()
            .is_some_and(|(node, _)| node != replication.id());
        if !led_elsewhere {
            continue;
        }
        // The standby that ended since the last look (taken, so it is
        // counted once), if there is no running one.
        let ended = {
            let mut slot = lock();
            if slot.hosting || slot.standby.as_ref().is_some_and(|s| s.running()) {
                continue;
            }
            slot.standby.take()
        };
        let mut at_once = false;
        if let Some(ended) = ended {
            retry = if last_start.is_some_and(|at| at.elapsed() < STANDBY_SETTLED) {
                (retry * 2).min(STANDBY_RETRY_MAX)
            } else {
                STANDBY_RETRY
            };
            let missing = ended.missing_builds();
            if !missing.is_empty() {
                match fetch_master_builds(&fetcher, &options.data_dir, missing).await {
                    Ok(()) => at_once = true,
                    Err(error) => {
                        tracing::warn!("cannot fetch a master build for the standby: {error:#}")
                    }
                }
            }
        }
        if !at_once && last_start.is_some_and(|at| at.elapsed() < retry) {
            continue;
        }
        let mut options = options.clone();
        if options.core == CoreKind::Wasm {
            match master_component(&component, options.cache_dir.clone()).await {
                Ok(compiled) => options.component = Some(compiled.clone()),
                Err(error) => {
                    tracing::warn!("cannot compile the master for a standby: {error:#}");
                    last_start = Some(tokio::time::Instant::now());
                    continue;
                }
            }
        }
        let mut slot = lock();
        if slot.hosting {
            continue;
        }
        last_start = Some(tokio::time::Instant::now());
        slot.standby = Some(master::standby::Standby::start(
            options,
            replication.clone(),
        ));
    }
}

impl LocalMaster {
    /// Fetches every uploaded master build the snapshot the recovery starts
    /// from runs that this node lacks (see `master::upgrade`), from the
    /// other back-end nodes; those the events switch to are fetched as
    /// the events are read, before they are replayed.
    async fn fetch_builds(
        &self,
        snapshot: Option<&crate::journal::durable::Snapshot>,
    ) -> anyhow::Result<()> {
        let snapshot = snapshot.map(|s| s.state.as_slice());
        let needed = master::upgrade::builds_needed(snapshot, &[]);
        fetch_master_builds(&self.fetcher, &self.options.data_dir, needed).await
    }

    /// If another node still advertises the master, waits (bounded) for its
    /// hand-over, or for it to vanish (a crash).
    async fn await_handover(&mut self) {
        let other_host = |view: &membership::View| {
            view.master_host()
                .filter(|host| host.node_id != view.me)
                .map(|host| host.node_id.clone())
        };
        // A hand-over to this node arrived since the last start: the
        // take-over is under way (or done) in replication; no need to
        // wait for gossip to show the old host gone. (The first version
        // waited for that here: hand-overs paused clients ~100 ms.)
        if self.handed.has_changed().unwrap_or(false) {
            self.handed.borrow_and_update();
            return;
        }
        let mut view = self.view.clone();
        let Some(old) = other_host(&view.borrow_and_update()) else {
            return;
        };
        // Replication finds it silent: it is not going to hand anything over.
        if self.replication.leader().borrow().silent.as_ref() == Some(&old) {
            emit!(info, events::HANDOVER_MISSED, from = %old, reason = %"silent",
                "{old} fell silent without a hand-over; taking the master over");
            return;
        }
        emit!(info, events::HANDOVER_AWAITED, from = %old, "waiting for {old} to hand the master over");
        let deadline = tokio::time::Instant::now() + HANDOVER_WAIT;
        loop {
            tokio::select! {
                _ = self.handed.changed() => {
                    self.handed.borrow_and_update();
                    return;
                }
                changed = view.changed() => {
                    if changed.is_err() || other_host(&view.borrow_and_update()).is_none() {
                        emit!(info, events::HANDOVER_MISSED, from = %old, reason = %"not_advertised",
                            "{old} stopped advertising the master without a hand-over; taking it over");
                        return;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    emit!(info, events::HANDOVER_MISSED, from = %old, reason = %"timeout",
                        "no hand-over from {old} within {HANDOVER_WAIT:?}; taking the master over");
                    return;
                }
            }
        }
    }

    /// Hands the master over to the back-end node that should host it
    /// next, once its journal caught up; without one, just lets go.
    async fn hand_over(&self, epoch: u64) {
        let target = {
            let view = self.view.borrow();
            view.successor()
                .map(|m| (m.node_id.clone(), m.http.clone()))
        };
        let Some((node, url)) = target else {
            self.replication.step_down().await;
            return;
        };
        let started = std::time::Instant::now();
        match self.replication.hand_over(node.clone()).await {
            Ok(()) => {
                self.link.set_moved(Some(url.clone()));
                emit!(
                    info,
                    events::HANDED_OVER,
                    to = %node,
                    epoch,
                    took_ms = millis(started.elapsed()),
                    "handed the master over"
                );
            }
            Err(error) => {
                emit!(
                    warn,
                    events::HANDOVER_FAILED,
                    to = %node,
                    error = error.to_string().as_str(),
                    "hand-over failed; stepping down instead"
                );
                self.replication.step_down().await;
            }
        }
    }
}

impl singleton::Host for LocalMaster {
    async fn start(&mut self, live_workers: Vec<String>) -> anyhow::Result<Option<u64>> {
        self.await_handover().await;
        let began = std::time::Instant::now();
        let standby = {
            let mut slot = self.standby();
            slot.hosting = true;
            slot.standby.take()
        };
        let started = match self.replication.take_over().await {
            Ok(started) => started,
            Err(reason) => {
                let mut slot = self.standby();
                slot.hosting = false;
                slot.standby = standby;
                drop(slot);
                emit!(
                    info,
                    events::TAKEOVER_DEFERRED,
                    reason = reason.to_string().as_str(),
                    retry_ms = millis(MASTER_START_RETRY),
                    "cannot take the master over yet"
                );
                return Ok(None);
            }
        };
        let claimed_in = began.elapsed();
        let result = self.start_claimed(started, standby, live_workers).await;
        let (handle, report) = match result {
            Ok(started) => started,
            Err(error) => {
                self.standby().hosting = false;
                self.replication.step_down().await;
                return Err(error);
            }
        };
        let status = self.replication.status();
        emit!(
            info,
            events::HOSTING,
            epoch = handle.epoch(),
            voters = ?status.voters,
            snapshot = %report
                .snapshot_index
                .map_or("none".to_string(), |i| i.to_string()),
            warm = %report.warm.map_or("none".to_string(), |i| i.to_string()),
            events_replayed = report.events_replayed,
            took_ms = millis(began.elapsed()),
            claim_ms = millis(claimed_in),
            recovery_ms = millis(report.duration),
            "hosting the master"
        );
        let epoch = handle.epoch();
        self.link.set_moved(None);
        self.local.send_replace(Some(handle.clone()));
        self.running = Some(handle);
        Ok(Some(epoch))
    }

    async fn stop(&mut self) {
        self.local.send_replace(None);
        self.standby().hosting = false;
        if let Some(handle) = self.running.take() {
            let epoch = handle.epoch();
            let started = std::time::Instant::now();
            handle.shutdown().await;
            handle.stopped().await;
            emit!(
                info,
                events::STOPPED_HOSTING,
                epoch,
                took_ms = millis(started.elapsed()),
                "stopped hosting the master (flushed and snapshotted)"
            );
            self.hand_over(epoch).await;
        }
    }

    async fn step_down(&mut self) {
        self.local.send_replace(None);
        self.standby().hosting = false;
        if let Some(handle) = self.running.take() {
            handle.shutdown().await;
            handle.stopped().await;
        }
        self.replication.step_down().await;
    }

    async fn workers_gone(&mut self, workers: Vec<String>) {
        let Some(handle) = &self.running else { return };
        for worker in workers {
            emit!(info, events::WORKER_GONE, worker = %worker, "a worker left the cluster; its attempts are re-queued");
            if let Err(error) = handle.command(Command::WorkerGone { worker }).await {
                tracing::warn!("could not re-queue a lost worker's attempts: {error}");
            }
        }
    }
}

/// Slots when none are given. Jobs run on the async runtime's threads (one
/// per CPU), so CPU use is bounded by the CPUs whatever the slot count; more
/// slots than CPUs keep short jobs flowing while others wait on the master
/// (each handoff waits for a journal sync), at the price of more memory in
/// use at once. Measured on 2 CPUs with 50,000 trivial jobs: 2 slots ran
/// 3.1k jobs/s, 8 ran 9.5k, 16 ran 14k, 32 ran 19k (BENCHMARKS.md; measured
/// while jobs still shared the control plane's threads).
fn default_slots() -> u32 {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    (cpus * SLOTS_PER_CPU).max(SLOTS_MIN)
}

/// Holds `<data>/LOCK` locked for the node's lifetime.
fn lock_data_dir(dir: &std::path::Path) -> anyhow::Result<std::fs::File> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => anyhow::bail!(
            "another cohort node is using {}; give each node its own --data-dir",
            dir.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            Err(error).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// The file in the data directory that keeps the node's id.
const NODE_ID_FILE: &str = "node-id";

/// The node's id if it is known before the node listens (kept in its
/// data directory, or given): what its exported traces name it by
/// (`service.instance.id`).
pub fn known_node_id(args: &NodeArgs) -> Option<String> {
    std::fs::read_to_string(args.data_dir.join(NODE_ID_FILE))
        .ok()
        .map(|stored| stored.trim().to_string())
        .or_else(|| args.node_id.clone())
}

/// The node's id: the one its data directory was first used with (the
/// voter set in the journal names nodes by id, so a data directory keeps
/// its identity across restarts, whatever port it listens on next), else
/// `--node-id`, else the default. A different `--node-id` for a data
/// directory that has one is refused.
fn node_identity(
    data_dir: &std::path::Path,
    given: Option<&str>,
    addr: SocketAddr,
) -> anyhow::Result<String> {
    let path = data_dir.join(NODE_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(stored) => {
            let stored = stored.trim().to_string();
            if let Some(given) = given
                && given != stored
            {
                anyhow::bail!(
                    "the data directory {} belongs to node {stored:?}, not {given:?}: start it with --node-id {stored} or use another data directory",
                    data_dir.display()
                );
            }
            Ok(stored)
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let id = given.map_or_else(|| default_node_id(addr), str::to_string);
            let mut file = tempfile::NamedTempFile::new_in(data_dir)?;
            file.write_all(id.as_bytes())?;
            file.as_file().sync_all()?;
            file.persist(&path).map_err(|e| e.error)?;
            Ok(id)
        }
        Err(error) => Err(error).with_context(|| format!("cannot read {}", path.display())),
    }
}

fn default_node_id(addr: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    format!("{host}-{}", addr.port())
}

async fn stop_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => tokio::select! {
                _ = terminate.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "interrupt",
            },
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                "interrupt"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "interrupt"
    }
}

async fn watch_failure(link: &MasterLink) {
    while !link.local().is_some_and(|m| m.has_failed()) {
        tokio::time::sleep(MASTER_FAILURE_CHECK_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_grace_under_a_second_or_over_an_hour_is_refused() {
        assert_eq!(parse_lease_grace("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_lease_grace("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_lease_grace("999ms").is_err());
        assert!(parse_lease_grace("3601s").is_err());
        assert!(parse_lease_grace("later").is_err());
    }

    #[test]
    fn a_locality_wait_over_a_minute_is_refused() {
        assert_eq!(parse_locality_wait("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_locality_wait("60s"), Ok(Duration::from_secs(60)));
        assert!(
            parse_locality_wait("61s")
                .unwrap_err()
                .contains("at most 60s")
        );
        assert!(parse_locality_wait("soon").is_err());
    }

    #[test]
    fn a_blob_grace_under_ten_seconds_is_refused() {
        assert_eq!(parse_blob_grace("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_blob_grace("1h"), Ok(Duration::from_secs(3600)));
        for short in ["0s", "1s", "9999ms"] {
            let error = parse_blob_grace(short).unwrap_err();
            assert!(error.contains("shorter than 10 s"), "{short}: {error}");
        }
        assert!(parse_blob_grace("soon").is_err());
    }
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        node: NodeArgs,
    }

    #[test]
    fn defaults_match_the_runtime_constants() {
        let args = Cli::parse_from(["node"]).node;
        assert_eq!(
            args.job_timeout.as_millis() as u64,
            crate::limits::TIMEOUT_MS_DEFAULT
        );
        assert_eq!(args.job_memory, crate::limits::MEMORY_BYTES_DEFAULT);
        assert_eq!(args.listen.to_string(), "127.0.0.1:7070");
        assert_eq!(args.data_dir, PathBuf::from("cohort-data"));
    }
}
