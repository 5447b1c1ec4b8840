//! The job runtime: one wasmtime engine per process, shared by every job.
//!
//! # Design
//!
//! * **One engine, one linker, one ticker.** The [`Runtime`] owns a single
//!   `Engine` (component model, epoch interruption, pooling allocator), a
//!   `Linker` holding WASI p2 (with `wasi:http`, whose requests go out only
//!   as the job's egress grants allow: see [`super::egress`]) plus
//!   cohort's `host` interface, and one thread
//!   that advances the engine's epoch every [`EPOCH_TICK`]. Creating these is
//!   expensive; running a job is not.
//! * **Validate before accept.** [`Runtime::load`] checks the preamble,
//!   compiles the component and pre-instantiates it against the linker and
//!   the job world's exports; a module that would not run is refused here,
//!   with [`ModuleError::code`] saying why, and never reaches a worker slot.
//! * **Compile once.** Loaded modules are cached in memory (bounded LRU) and
//!   on disk (see [`super::module`]); a job instantiates from a
//!   pre-linked `InstancePre` into a pooled slot, which takes microseconds.
//! * **Isolation.** Each attempt gets its own `Store`; the pooling allocator
//!   hands it a fresh memory slot; the job's limits are enforced by a
//!   resource limiter and deadlines (see [`super::job`]). A guest can
//!   trap, loop, allocate or print without bound and the worst outcome is its
//!   own failure: the runtime and other jobs carry on.
//! * **Two ways to keep time** ([`Isolation`]). In-thread (the default),
//!   compiled code checks epochs; with [`Isolation::Process`] it does not,
//!   and each attempt runs in a pooled sandbox process that is killed at its
//!   deadline (see [`super::sandbox`]). The engine settings differ, so each
//!   way has its own disk-cache directory.
//! * **Egress set up once per process.** The operator's extra CA file is
//!   read and checked when the runtime is built (a bad one stops it from
//!   starting); the TLS client configuration is built at the first `https`
//!   call and shared by the process's jobs. With process isolation each
//!   sandbox process is a runtime of its own, so it reads the file and
//!   builds its configuration again (a CA file removed after the node
//!   started fails that process's attempts, `internal`).
//! * **Bounded concurrency.** A semaphore sized to the instance pool keeps
//!   jobs from failing on pool exhaustion: excess jobs wait for a slot.
//!
//! # Not here
//!
//! Fetching modules from other nodes, queueing, retries and where a job runs
//! belong to the worker and the master; this module runs what it is given.
//!
//! [`EPOCH_TICK`]: crate::limits::EPOCH_TICK

use super::egress::{CallSink, Egress, EgressLimits};
use super::job::{self, JobReport, JobRequest, JobState};
use super::job_limits::JobLimits;
use super::job_world::JobPre;
use super::module::{
    self, Digest, DiskCache, Module, ModuleError, ModuleInner, check_job_versions,
};
use super::sandbox::Sandboxes;
use crate::limits::{
    COMPILES_CONCURRENT_MAX, CONCURRENT_JOBS_DEFAULT, CONCURRENT_JOBS_MAX,
    CORE_INSTANCES_PER_COMPONENT_MAX, EPOCH_TICK, INSTANCE_METADATA_BYTES_MAX,
    MEMORIES_PER_COMPONENT_MAX, MEMORY_BYTES_CEILING, MEMORY_KEEP_RESIDENT_BYTES,
    MEMORY_KEEP_RESIDENT_SCANNED_BYTES, MODULE_BYTES_MAX, MODULE_CACHE_LEN_DEFAULT,
    SANDBOX_IDLE_MAX_DEFAULT, SANDBOX_MODULE_CACHE_LEN, TABLE_ELEMENTS_MAX,
    TABLES_PER_COMPONENT_MAX,
};
use lru::LruCache;
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Where a job's code runs, and so how its deadline is kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// On the node's threads. Compiled code checks the engine's epoch at
    /// every loop back-edge and function entry, which stops a job at its
    /// deadline and yields the thread every tick; on tight loops the checks
    /// cost up to as much as the loop's own work.
    #[default]
    Thread,
    /// Each running job in a sandbox process of its own (pooled, see
    /// [`super::sandbox`]), killed at its deadline. Compiled without epoch
    /// checks, so CPU-bound code runs at the speed of its own instructions;
    /// each job pays a round trip to its process, and each process its own
    /// memory.
    Process,
}

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled modules are cached on disk (`<dir>/compiled/...`);
    /// `None` keeps them in memory only.
    pub data_dir: Option<PathBuf>,
    /// Jobs that may run at once; more wait for a free slot. Also sizes the
    /// instance pool.
    pub concurrent_jobs: u32,
    /// Compiled modules kept in memory.
    pub module_cache_len: usize,
    /// The largest memory limit any job may be given.
    pub memory_bytes_max: u64,
    /// Where jobs run.
    pub isolation: Isolation,
    /// The `cohort` binary that sandbox processes run
    /// ([`Isolation::Process`]); `None` is this process's own executable.
    pub sandbox_program: Option<PathBuf>,
    /// How long a sandbox process may wait for a job before it is stopped.
    pub sandbox_idle_max: Duration,
    /// Most bytes of compiled modules kept on disk (least recently used
    /// first out); `None` keeps every one.
    pub disk_cache_bytes_max: Option<u64>,
    /// A PEM file of CA certificates that jobs' `https` calls trust besides
    /// the system's roots; `None`: the system's only.
    pub egress_ca: Option<PathBuf>,
    /// The bounds of jobs' outbound calls.
    pub egress_limits: EgressLimits,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            data_dir: None,
            concurrent_jobs: CONCURRENT_JOBS_DEFAULT,
            module_cache_len: MODULE_CACHE_LEN_DEFAULT,
            memory_bytes_max: MEMORY_BYTES_CEILING,
            isolation: Isolation::Thread,
            sandbox_program: None,
            sandbox_idle_max: SANDBOX_IDLE_MAX_DEFAULT,
            disk_cache_bytes_max: None,
            egress_ca: None,
            egress_limits: EgressLimits::default(),
        }
    }
}

/// The runtime could not be created.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The configuration is out of range.
    #[error("invalid runtime configuration: {0}")]
    Config(String),
    /// wasmtime refused the engine configuration or the linker setup.
    #[error("cannot create the WebAssembly engine: {0}")]
    Engine(String),
    /// The egress CA file cannot be read or holds no usable certificate.
    #[error("cannot use the egress CA file: {0}")]
    EgressCa(String),
    /// The compiled-module cache directory cannot be created.
    #[error("cannot create the module cache under {path}: {source}")]
    Cache {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs job modules. Cheap to clone; all clones share one engine.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    engine: Engine,
    linker: Linker<JobState>,
    memory_cache: Mutex<LruCache<Digest, Module>>,
    disk_cache: Option<DiskCache>,
    /// One permit per pooled instance slot.
    slots: Semaphore,
    /// Bounds compilations in flight (see [`COMPILES_CONCURRENT_MAX`]).
    compiles: Semaphore,
    memory_bytes_max: u64,
    ticker_stop: Arc<AtomicBool>,
    /// With [`Isolation::Process`], the children jobs run in; `None` runs
    /// them here (in-thread, or inside a sandbox process itself).
    sandboxes: Option<Sandboxes>,
    /// Whether compiled code checks epochs (in-thread isolation).
    epochs: bool,
    /// How jobs' `wasi:http` requests go out.
    egress: Egress,
    /// The disk cache's directory when the configuration gave none and
    /// sandbox processes need one; deleted with the runtime.
    _own_data_dir: Option<tempfile::TempDir>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// Builds the engine, linker, caches and epoch ticker (or, with
    /// [`Isolation::Process`], the pool of sandbox processes).
    pub fn new(config: RuntimeConfig) -> Result<Self, RuntimeError> {
        Self::build(config, false)
    }

    /// The runtime inside a sandbox process: the node's engine settings for
    /// [`Isolation::Process`] (so it reads the artifacts the node compiled),
    /// running one job at a time on its own thread.
    pub(crate) fn sandbox_child(
        data_dir: PathBuf,
        memory_bytes_max: u64,
        egress_ca: Option<PathBuf>,
    ) -> Result<Self, RuntimeError> {
        let config = RuntimeConfig {
            data_dir: Some(data_dir),
            concurrent_jobs: 1,
            module_cache_len: SANDBOX_MODULE_CACHE_LEN,
            memory_bytes_max,
            isolation: Isolation::Process,
            egress_ca,
            ..RuntimeConfig::default()
        };
        Self::build(config, true)
    }

    fn build(mut config: RuntimeConfig, in_sandbox: bool) -> Result<Self, RuntimeError> {
        if config.concurrent_jobs == 0 || config.concurrent_jobs > CONCURRENT_JOBS_MAX {
            return Err(RuntimeError::Config(format!(
                "concurrent_jobs must be 1..={CONCURRENT_JOBS_MAX}"
            )));
        }
        if config.memory_bytes_max == 0 || config.memory_bytes_max > MEMORY_BYTES_CEILING {
            return Err(RuntimeError::Config(format!(
                "memory_bytes_max must be 1..={MEMORY_BYTES_CEILING}"
            )));
        }
        let egress = Egress::new(config.egress_ca.as_deref(), config.egress_limits)
            .map_err(RuntimeError::EgressCa)?;
        let engine = build_engine(&config).map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        let mut linker = Linker::<JobState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker)
            .map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;
        // The job world's own interfaces (its `wasi:io` is wasmtime-wasi's,
        // linked above), and the `host` of modules built against
        // `cohort:job@0.1.0`.
        let linked = (super::job_world::cohort::job::types::add_to_linker::<_, HasSelf<JobState>>(
            &mut linker,
            |state| state,
        ))
        .and_then(|()| {
            super::job_world::cohort::job::host::add_to_linker::<_, HasSelf<JobState>>(
                &mut linker,
                |state| state,
            )
        })
        .and_then(|()| {
            super::job_world::cohort::job::blobs::add_to_linker::<_, HasSelf<JobState>>(
                &mut linker,
                |state| state,
            )
        })
        .and_then(|()| {
            super::job_world::legacy::cohort::job::types::add_to_linker::<_, HasSelf<JobState>>(
                &mut linker,
                |state| state,
            )
        })
        .and_then(|()| {
            super::job_world::legacy::cohort::job::host::add_to_linker::<_, HasSelf<JobState>>(
                &mut linker,
                |state| state,
            )
        });
        linked.map_err(|e| RuntimeError::Engine(format!("{e:#}")))?;

        // Sandbox processes read what this runtime compiles from the disk
        // cache, so a runtime that starts them has one (its own if need be).
        let mut own_data_dir = None;
        let sandboxes = if config.isolation == Isolation::Process && !in_sandbox {
            let data_dir = match &config.data_dir {
                Some(dir) => dir.clone(),
                None => {
                    let dir = tempfile::Builder::new()
                        .prefix("cohort-runtime-")
                        .tempdir()
                        .map_err(|source| RuntimeError::Cache {
                            path: std::env::temp_dir(),
                            source,
                        })?;
                    let path = dir.path().to_path_buf();
                    own_data_dir = Some(dir);
                    config.data_dir = Some(path.clone());
                    path
                }
            };
            let program = match &config.sandbox_program {
                Some(program) => program.clone(),
                None => std::env::current_exe().map_err(|e| {
                    RuntimeError::Config(format!(
                        "cannot find this program to run sandbox processes: {e}"
                    ))
                })?,
            };
            Some(Sandboxes::new(
                program,
                data_dir,
                config.memory_bytes_max,
                config.sandbox_idle_max,
                config.egress_ca.clone(),
            ))
        } else {
            None
        };
        let disk_cache = match &config.data_dir {
            None => None,
            Some(dir) => {
                let fingerprint = engine_fingerprint(&engine);
                Some(
                    DiskCache::open(dir, &fingerprint, config.disk_cache_bytes_max).map_err(
                        |source| RuntimeError::Cache {
                            path: dir.clone(),
                            source,
                        },
                    )?,
                )
            }
        };
        let cache_len = NonZeroUsize::new(config.module_cache_len.max(1)).expect("at least 1");
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let epochs = config.isolation == Isolation::Thread;
        if epochs {
            spawn_epoch_ticker(engine.weak(), ticker_stop.clone());
        }
        Ok(Self {
            inner: Arc::new(Inner {
                engine,
                linker,
                memory_cache: Mutex::new(LruCache::new(cache_len)),
                disk_cache,
                slots: Semaphore::new(config.concurrent_jobs as usize),
                compiles: Semaphore::new(COMPILES_CONCURRENT_MAX),
                memory_bytes_max: config.memory_bytes_max,
                ticker_stop,
                sandboxes,
                epochs,
                egress,
                _own_data_dir: own_data_dir,
            }),
        })
    }

    /// The largest memory limit a job may be given on this runtime.
    pub fn memory_bytes_max(&self) -> u64 {
        self.inner.memory_bytes_max
    }

    /// Validates and compiles `wasm` (or finds it in a cache) and returns it
    /// ready to run.
    pub async fn load(&self, wasm: &[u8]) -> Result<Module, ModuleError> {
        if wasm.len() > MODULE_BYTES_MAX {
            return Err(ModuleError::TooLarge {
                size: wasm.len(),
                limit: MODULE_BYTES_MAX,
            });
        }
        let digest = Digest::of(wasm);
        if let Some(module) = self.cached(&digest).await {
            return Ok(module);
        }
        module::check_preamble(wasm)?;
        let _compiling = self
            .inner
            .compiles
            .acquire()
            .await
            .expect("the compile semaphore is never closed");
        // Someone may have compiled it while this load waited.
        if let Some(module) = self.cached(&digest).await {
            return Ok(module);
        }
        let this = self.clone();
        let wasm = wasm.to_vec();
        tokio::task::spawn_blocking(move || this.compile(digest, &wasm))
            .await
            .map_err(|e| ModuleError::Internal(format!("compiler thread failed: {e}")))?
    }

    /// The module with this digest if it was loaded before (in memory or in
    /// the disk cache), without its bytes.
    pub async fn cached(&self, digest: &Digest) -> Option<Module> {
        if let Some(module) = self.lock_cache().get(digest) {
            return Some(module.clone());
        }
        let disk = self.inner.disk_cache.as_ref()?;
        if !disk.path(digest).exists() {
            return None;
        }
        let this = self.clone();
        let digest = *digest;
        tokio::task::spawn_blocking(move || this.load_artifact(digest))
            .await
            .ok()
            .flatten()
    }

    /// Runs one attempt of `module` on `request`, waiting for a free slot if
    /// all are busy. The job's limits are clamped to this runtime's ceilings.
    pub async fn run(&self, module: &Module, request: JobRequest) -> JobReport {
        self.run_with(module, request, None, None).await
    }

    /// [`run`](Self::run), with the egress bounds of `egress_limits` rather
    /// than this runtime's and `on_call` told of each recorded call: how a
    /// sandbox process runs the node's jobs.
    pub(crate) async fn run_with(
        &self,
        module: &Module,
        mut request: JobRequest,
        egress_limits: Option<EgressLimits>,
        on_call: Option<CallSink>,
    ) -> JobReport {
        request.limits.memory_bytes = request.limits.memory_bytes.min(self.inner.memory_bytes_max);
        let _slot = self
            .inner
            .slots
            .acquire()
            .await
            .expect("the slot semaphore is never closed");
        let egress = match egress_limits {
            Some(limits) => self.inner.egress.with_limits(limits),
            None => self.inner.egress.clone(),
        };
        match &self.inner.sandboxes {
            Some(sandboxes) => {
                sandboxes
                    .run(module.digest(), request, egress.limits())
                    .await
            }
            None => {
                job::execute(
                    &self.inner.engine,
                    &module.inner.pre,
                    request,
                    self.inner.epochs,
                    &egress,
                    on_call,
                )
                .await
            }
        }
    }

    /// Runs `module` with default limits on `input`; a convenience for tests
    /// and tools.
    pub async fn run_input(&self, module: &Module, input: Vec<u8>) -> JobReport {
        let request = JobRequest {
            input,
            limits: JobLimits::default(),
            ..JobRequest::default()
        };
        self.run(module, request).await
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, LruCache<Digest, Module>> {
        self.inner
            .memory_cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Compiles, links and caches. Runs on a blocking thread.
    fn compile(&self, digest: Digest, wasm: &[u8]) -> Result<Module, ModuleError> {
        // Processes sharing the disk cache compile a module once: wait for
        // one compiling it, then load what it stored. Best effort: a lock
        // that cannot be taken costs a second compile, nothing more.
        let _machine = self.inner.disk_cache.as_ref().and_then(|disk| {
            let locked = disk.compiling(&digest);
            match &locked {
                Err(error) => {
                    tracing::debug!(%digest, %error, "compiling without the disk cache's lock")
                }
                Ok(None) => tracing::warn!(
                    %digest,
                    "another process has held the lock on compiling this module for a minute; compiling it here too"
                ),
                Ok(Some(_)) => {}
            }
            locked.ok().flatten()
        });
        let stored =
            (self.inner.disk_cache.as_ref()).is_some_and(|disk| disk.path(&digest).exists());
        if let Some(module) = stored.then(|| self.load_artifact(digest)).flatten() {
            return Ok(module);
        }
        let component = Component::new(&self.inner.engine, wasm)
            .map_err(|e| ModuleError::Invalid(format!("{e:#}")))?;
        let module = self.link(digest, &component)?;
        if let Some(disk) = &self.inner.disk_cache {
            // In-thread, a cache write failure costs a recompile later,
            // nothing more; sandbox processes read their modules from it.
            let stored = component
                .serialize()
                .map_err(|error| format!("cannot serialize compiled module: {error:#}"))
                .and_then(|artifact| {
                    disk.store(&digest, &artifact).map_err(|error| {
                        format!("cannot write compiled module to the disk cache: {error}")
                    })
                });
            match stored {
                Ok(()) => {}
                Err(error) if self.inner.sandboxes.is_some() => {
                    return Err(ModuleError::Internal(error));
                }
                Err(error) => tracing::warn!(%digest, %error, "compiled module not cached on disk"),
            }
        }
        self.lock_cache().put(digest, module.clone());
        Ok(module)
    }

    /// Loads a compiled artifact from the disk cache; deletes it if it does
    /// not load or link (it will be recompiled from the module's bytes).
    fn load_artifact(&self, digest: Digest) -> Option<Module> {
        let disk = self.inner.disk_cache.as_ref()?;
        let path = disk.path(&digest);
        // Read into memory rather than `deserialize_file`, which maps the
        // file: anything truncating a mapped file would crash the process.
        let module = disk
            .load(&digest)
            .map_err(|e| ModuleError::Internal(e.to_string()))
            .and_then(|artifact| {
                artifact.ok_or_else(|| ModuleError::Internal("removed while being read".into()))
            })
            .and_then(|artifact| {
                // SAFETY: files in the disk cache are written only by
                // `DiskCache::store` from `Component::serialize` of this engine
                // configuration (the directory name is the engine's
                // fingerprint), atomically, in a directory only this user
                // writes; `load` checked the file whole (its trailer's
                // length and CRC-32), and wasmtime also checks the header.
                unsafe { Component::deserialize(&self.inner.engine, &artifact) }
                    .map_err(|e| ModuleError::Internal(format!("{e:#}")))
            })
            .and_then(|component| self.link(digest, &component));
        match module {
            Ok(module) => {
                self.lock_cache().put(digest, module.clone());
                Some(module)
            }
            Err(error) => {
                tracing::warn!(%digest, %error, "discarding unusable compiled module from the disk cache");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Resolves the component's imports and checks its exports against the
    /// job world.
    fn link(&self, digest: Digest, component: &Component) -> Result<Module, ModuleError> {
        check_job_version(&self.inner.engine, component)?;
        let instance_pre = self
            .inner
            .linker
            .instantiate_pre(component)
            .map_err(|e| unsupported_import(&format!("{e:#}")))?;
        let pre = JobPre::new(instance_pre).map_err(|e| {
            ModuleError::WrongWorld(format!("it does not export the job world's `run`: {e:#}"))
        })?;
        Ok(Module {
            inner: Arc::new(ModuleInner { digest, pre }),
        })
    }
}

/// The `cohort:job` versions `component` names, checked
/// ([`check_job_versions`]).
fn check_job_version(engine: &Engine, component: &Component) -> Result<(), ModuleError> {
    let ty = component.component_type();
    let names = ty
        .imports(engine)
        .map(|(name, _)| name)
        .chain(ty.exports(engine).map(|(name, _)| name));
    check_job_versions(names)
}

/// The error for a component the linker cannot satisfy, naming the import
/// when wasmtime's message does (``... import `name` ...``).
fn unsupported_import(detail: &str) -> ModuleError {
    let name = detail
        .split('`')
        .nth(1)
        .filter(|name| name.contains(':') || name.contains('/'))
        .map(str::to_string);
    match name {
        Some(name) => ModuleError::UnsupportedImport {
            name,
            detail: detail.to_string(),
        },
        None => ModuleError::WrongWorld(format!(
            "it imports something cohort does not provide: {detail}"
        )),
    }
}

fn build_engine(config: &RuntimeConfig) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    let slots = config.concurrent_jobs;
    pool.total_component_instances(slots)
        .total_core_instances(slots * CORE_INSTANCES_PER_COMPONENT_MAX)
        .total_memories(slots * MEMORIES_PER_COMPONENT_MAX)
        .total_tables(slots * TABLES_PER_COMPONENT_MAX)
        .total_stacks(slots)
        .max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT_MAX)
        .max_memories_per_component(MEMORIES_PER_COMPONENT_MAX)
        .max_tables_per_component(TABLES_PER_COMPONENT_MAX)
        .max_memories_per_module(1)
        .max_tables_per_module(TABLES_PER_COMPONENT_MAX)
        .max_component_instance_size(INSTANCE_METADATA_BYTES_MAX)
        .max_core_instance_size(INSTANCE_METADATA_BYTES_MAX)
        .table_elements(TABLE_ELEMENTS_MAX)
        .max_memory_size(usize::try_from(config.memory_bytes_max).unwrap_or(usize::MAX))
        .pagemap_scan(wasmtime::Enabled::Auto);
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT_SCANNED_BYTES)
            .table_keep_resident(MEMORY_KEEP_RESIDENT_SCANNED_BYTES);
    } else {
        pool.linear_memory_keep_resident(MEMORY_KEEP_RESIDENT_BYTES);
    }

    let mut wasm = Config::new();
    // Exactly the features an upload is checked with (`module_check`).
    wasm.wasm_features(wasmtime::WasmFeatures::all(), false)
        .wasm_features(super::module_check::job_wasm_features(), true);
    wasm.wasm_component_model(true)
        .epoch_interruption(config.isolation == Isolation::Thread)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&wasm)
}

/// A stable name for the engine's code-generation settings: compiled
/// artifacts are only reused by an engine with the same fingerprint.
pub(crate) fn engine_fingerprint(engine: &Engine) -> String {
    struct Sha256Hasher(sha2::Sha256);
    impl Hasher for Sha256Hasher {
        fn write(&mut self, bytes: &[u8]) {
            sha2::Digest::update(&mut self.0, bytes);
        }
        fn finish(&self) -> u64 {
            unreachable!("only the full digest is read")
        }
    }
    let mut hasher = Sha256Hasher(<sha2::Sha256 as sha2::Digest>::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    let digest = sha2::Digest::finalize(hasher.0);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// Advances the engine's epoch every tick until the runtime is dropped.
fn spawn_epoch_ticker(engine: wasmtime::EngineWeak, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("cohort-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                match engine.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .expect("can spawn the epoch ticker thread");
}
