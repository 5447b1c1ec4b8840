//! Uploaded job modules, stored content-addressed on the node's disk.
//!
//! `<data>/modules/<sha256>.wasm`. A module is checked against the job
//! world without compiling it (`runtime::module_check`: validated by
//! wasmtime's own parser and features, its imports and `run` export
//! checked) before it is stored, so a stored digest names a component of
//! the job world. Files are written to a temporary name, synced and
//! renamed: a crash leaves a whole module or none. Reading back checks the
//! sha256, so a damaged file is reported instead of run.
//!
//! # Compiling
//!
//! Compiling (seconds for a language runtime's component) is not part of
//! storing. On a node that runs jobs, [`compile_ahead`] starts one task
//! that compiles each module newly stored here, one at a time, into the
//! runtime's caches: the upload's node and every node the upload is sent
//! to compile it in the background, after the upload was answered, so its
//! first job finds it compiled. [`get`] compiles a module not compiled yet
//! (a node that was not sent it: it joined later, or the queue was full);
//! at most one compile of a digest runs at a time, and a job that finds
//! one running waits for it instead of compiling again. A module that does
//! not compile or link (what the check cannot see) is remembered with its
//! error, so its later jobs fail at once, with its code.
//!
//! [`compile_ahead`]: ModuleStore::compile_ahead
//! [`get`]: ModuleStore::get

use crate::events::{self, emit};
use crate::limits::{COMPILE_AHEAD_QUEUE_MAX, UNUSABLE_MODULES_MAX};
use crate::runtime::{Digest, Module, ModuleError, Runtime};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::mpsc;

/// A stored module's listing entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Content address.
    pub digest: Digest,
    /// Size in bytes.
    pub bytes: u64,
}

/// The node's module store.
#[derive(Debug)]
pub struct ModuleStore {
    dir: PathBuf,
    runtime: Runtime,
    index: Mutex<BTreeMap<Digest, ModuleInfo>>,
    /// [`Details`] already read, so a module is read and parsed for them
    /// once, not at every listing.
    described: Mutex<BTreeMap<Digest, Details>>,
    /// One turn per digest being compiled: whoever holds it compiles, the
    /// others wait and then find it compiled.
    compiling: Mutex<BTreeMap<Digest, Arc<tokio::sync::Mutex<()>>>>,
    /// Modules that did not compile or link here, with why.
    unusable: Mutex<BTreeMap<Digest, ModuleError>>,
    /// The queue of modules to compile ahead of their first job (only on
    /// a node that runs jobs: see [`compile_ahead`](Self::compile_ahead)).
    ahead: OnceLock<mpsc::Sender<Digest>>,
}

impl ModuleStore {
    /// Opens (creating) `<data_dir>/modules` and indexes what is there.
    pub fn open(data_dir: &Path, runtime: Runtime) -> std::io::Result<Self> {
        let dir = data_dir.join("modules");
        std::fs::create_dir_all(&dir)?;
        let mut index = BTreeMap::new();
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(digest) = name
                .to_str()
                .and_then(|n| n.strip_suffix(".wasm"))
                .and_then(|n| n.parse::<Digest>().ok())
            else {
                continue;
            };
            let bytes = entry.metadata()?.len();
            index.insert(digest, ModuleInfo { digest, bytes });
        }
        Ok(Self {
            dir,
            runtime,
            index: Mutex::new(index),
            described: Mutex::default(),
            compiling: Mutex::default(),
            unusable: Mutex::default(),
            ahead: OnceLock::new(),
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{digest}.wasm"))
    }

    /// Checks and stores `wasm` (durably: synced before this returns);
    /// returns its digest and whether it was new. A new module is queued
    /// to compile ahead of its first job when this node runs jobs.
    pub async fn put(&self, wasm: &[u8]) -> Result<(Digest, bool), ModuleError> {
        if wasm.len() > crate::limits::MODULE_BYTES_MAX {
            return Err(ModuleError::TooLarge {
                size: wasm.len(),
                limit: crate::limits::MODULE_BYTES_MAX,
            });
        }
        let bytes = Arc::new(wasm.to_vec());
        let hashed = bytes.clone();
        let digest = blocking("hash", move || Digest::of(&hashed)).await?;
        if self.contains(&digest) {
            return Ok((digest, false));
        }
        let path = self.path(&digest);
        let dir = self.dir.clone();
        let size = bytes.len() as u64;
        blocking("store", move || -> Result<(), ModuleError> {
            crate::runtime::module_check::check(&bytes)?;
            let stored = (|| -> std::io::Result<()> {
                let mut file = tempfile::NamedTempFile::new_in(&dir)?;
                file.write_all(&bytes)?;
                file.as_file().sync_all()?;
                file.persist(&path).map_err(|e| e.error)?;
                std::fs::File::open(&dir)?.sync_all()
            })();
            stored.map_err(|e| ModuleError::Internal(format!("cannot store the module: {e}")))
        })
        .await??;
        let info = ModuleInfo {
            digest,
            bytes: size,
        };
        self.lock().insert(digest, info);
        self.announce(digest);
        Ok((digest, true))
    }

    /// Starts compiling, one at a time, every module stored here from now
    /// on, ahead of its first job (a node that runs jobs calls this once).
    pub fn compile_ahead(self: &Arc<Self>) {
        let (queue, mut queued) = mpsc::channel(COMPILE_AHEAD_QUEUE_MAX);
        if self.ahead.set(queue).is_err() {
            return;
        }
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(digest) = queued.recv().await {
                let Some(store) = store.upgrade() else {
                    return;
                };
                // Failures are told by `compile` (an event) and again to
                // each job of the module.
                let _ = store.compile(&digest, CompiledWhen::Announced).await;
            }
        });
    }

    /// Queues a newly stored module to compile ahead (when this node does).
    fn announce(&self, digest: Digest) {
        let Some(queue) = self.ahead.get() else {
            return;
        };
        if queue.try_send(digest).is_err() {
            tracing::debug!(%digest, "compile queue full: the module compiles at its first job");
        }
    }

    /// Whether the module is stored here.
    pub fn contains(&self, digest: &Digest) -> bool {
        self.lock().contains_key(digest)
    }

    /// Every stored module, by digest.
    pub fn list(&self) -> Vec<ModuleInfo> {
        self.lock().values().copied().collect()
    }

    /// What the module says about itself, and when it was stored here
    /// (read from the module the first time it is asked for).
    pub async fn details(&self, digest: &Digest) -> Result<Details, ModuleError> {
        if let Some(details) = self.described().get(digest) {
            return Ok(details.clone());
        }
        let path = self.path(digest);
        let first_seen = tokio::fs::metadata(&path)
            .await
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_millis() as u64);
        let wasm = self.read(digest).await?;
        let (language, world) = tokio::task::spawn_blocking(move || describe(&wasm))
            .await
            .map_err(|e| ModuleError::Internal(format!("describe thread failed: {e}")))?;
        let details = Details {
            first_seen,
            language,
            world,
        };
        self.described().insert(*digest, details.clone());
        Ok(details)
    }

    /// The module's bytes, checked against its digest.
    pub async fn read(&self, digest: &Digest) -> Result<Vec<u8>, ModuleError> {
        let path = self.path(digest);
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| ModuleError::Internal(format!("module {digest} is not stored: {e}")))?;
        if Digest::of(&bytes) != *digest {
            return Err(ModuleError::Internal(format!(
                "{} is damaged: its sha256 does not match",
                path.display()
            )));
        }
        Ok(bytes)
    }

    /// The module compiled and ready to run: from the runtime's caches, or
    /// compiled now (waiting for a compile of it already running).
    pub async fn get(&self, digest: &Digest) -> Result<Module, ModuleError> {
        self.compile(digest, CompiledWhen::FirstJob).await
    }

    /// Compiles the stored module `digest` unless it is compiled, once at a
    /// time per digest.
    async fn compile(&self, digest: &Digest, when: CompiledWhen) -> Result<Module, ModuleError> {
        if let Some(module) = self.runtime.cached(digest).await {
            return Ok(module);
        }
        if let Some(error) = self.unusable().get(digest) {
            return Err(error.clone());
        }
        let turn = self.compiling().entry(*digest).or_default().clone();
        let _turn = turn.lock().await;
        // Compiled, or found unusable, while this waited for its turn.
        if let Some(module) = self.runtime.cached(digest).await {
            return Ok(module);
        }
        if let Some(error) = self.unusable().get(digest) {
            return Err(error.clone());
        }
        let started = std::time::Instant::now();
        let loaded = match self.read(digest).await {
            Ok(bytes) => self.runtime.load(&bytes).await,
            Err(error) => Err(error),
        };
        match &loaded {
            Ok(_) => {
                count_module_compiled(when);
                emit!(
                    info,
                    events::MODULE_COMPILED,
                    %digest,
                    when = when.name(),
                    took_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    "compiled a job module"
                );
            }
            // The disk or a thread failed, not the module: try again later.
            Err(ModuleError::Internal(error)) => {
                tracing::warn!(%digest, %error, "cannot compile the module now");
            }
            Err(error) => {
                emit!(
                    warn,
                    events::MODULE_UNUSABLE,
                    %digest,
                    code = error.code(),
                    error = %error,
                    "a stored module does not compile here; its jobs fail"
                );
                let mut unusable = self.unusable();
                if unusable.len() >= UNUSABLE_MODULES_MAX {
                    unusable.clear();
                }
                unusable.insert(*digest, error.clone());
            }
        }
        self.compiling().remove(digest);
        loaded
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, ModuleInfo>> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn described(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, Details>> {
        self.described.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn compiling(
        &self,
    ) -> std::sync::MutexGuard<'_, BTreeMap<Digest, Arc<tokio::sync::Mutex<()>>>> {
        self.compiling.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn unusable(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, ModuleError>> {
        self.unusable.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs `work` on a blocking thread (`what` names it in the error).
async fn blocking<T: Send + 'static>(
    what: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ModuleError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ModuleError::Internal(format!("the module {what} thread failed: {e}")))
}

/// A module's description in the dashboard's list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Details {
    /// When this node stored it (ms since the Unix epoch).
    pub first_seen: u64,
    /// `rust`, `python`, `javascript` or `unknown`.
    pub language: &'static str,
    /// `cohort:job/job`, with the package version when the module imports
    /// the host interface (`cohort:job/job@0.1.0`).
    pub world: Option<String>,
}

/// The source language (from the `producers` sections of the component
/// and its core modules, which toolchains fill in) and the world: a
/// component exporting `run` is a `cohort:job/job`, whose package version
/// shows when it imports the host interface (`cohort:job/host@0.1.0`).
/// Stored modules were validated, but this reads them as any input: a
/// section it cannot parse ends the reading.
pub fn describe(wasm: &[u8]) -> (&'static str, Option<String>) {
    use wasmparser::{Parser, Payload};
    let mut names: Vec<String> = Vec::new();
    let (mut exports_run, mut version) = (false, None);
    for payload in Parser::new(0).parse_all(wasm) {
        let Ok(payload) = payload else { break };
        match payload {
            Payload::CustomSection(section) => match section.as_known() {
                wasmparser::KnownCustom::Producers(reader) => {
                    for field in reader.into_iter().flatten() {
                        for value in field.values.into_iter().flatten() {
                            names.push(value.name.to_ascii_lowercase());
                        }
                    }
                }
                // componentize-py links CPython as shared libraries whose
                // module names say so (`libpython3.12.so`); its producers
                // name only the Rust runtime around them.
                wasmparser::KnownCustom::Name(reader) => {
                    for name in reader.into_iter().flatten() {
                        if let wasmparser::Name::Module { name, .. } = name {
                            names.push(name.to_ascii_lowercase());
                        }
                    }
                }
                _ => {}
            },
            Payload::ComponentExportSection(exports) => {
                exports_run |= exports.into_iter().flatten().any(|e| e.name.name == "run");
            }
            Payload::ComponentImportSection(imports) if version.is_none() => {
                version = imports
                    .into_iter()
                    .flatten()
                    .filter_map(|i| i.name.name.strip_prefix("cohort:job/")?.split_once('@'))
                    .map(|(_, version)| version.to_string())
                    .next();
            }
            _ => {}
        }
    }
    let any = |needle: &str| names.iter().any(|n| n.contains(needle));
    let language = if any("componentize-py") || any("libpython") {
        "python"
    } else if any("componentize-js") || any("componentizejs") || any("starlingmonkey") {
        "javascript"
    } else if any("rust") {
        "rust"
    } else {
        "unknown"
    };
    let world = exports_run.then(|| match version {
        Some(version) => format!("cohort:job/job@{version}"),
        None => "cohort:job/job".to_string(),
    });
    (language, world)
}

/// Job modules this node compiled, ahead of their first job here
/// (`announced`) and for a job (`first_job`).
pub(crate) static MODULES_COMPILED: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// When a module was compiled, for `cohort_modules_compiled_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompiledWhen {
    /// When it was stored on (or sent to) this node, before any job.
    Announced,
    /// For a job, which waited for it.
    FirstJob,
}

impl CompiledWhen {
    /// The label value (and the `module_compiled` event's `when`).
    pub fn name(self) -> &'static str {
        match self {
            CompiledWhen::Announced => "announced",
            CompiledWhen::FirstJob => "first_job",
        }
    }
}

/// Counts a module compiled on this node.
pub fn count_module_compiled(when: CompiledWhen) {
    MODULES_COMPILED[when as usize].fetch_add(1, Ordering::Relaxed);
}
