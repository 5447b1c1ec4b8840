//! Uploaded job modules, stored content-addressed on the node's disk.
//!
//! `<data>/modules/<sha256>.wasm`. A module is validated against the job
//! world (and compiled, which warms the runtime's caches) before it is
//! stored, so a digest the store knows is always runnable. Files are
//! written to a temporary name, synced and renamed: a crash leaves a whole
//! module or none. Reading back checks the sha256, so a damaged file is
//! reported instead of run.

use crate::runtime::{Digest, Module, ModuleError, Runtime};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        })
    }

    fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{digest}.wasm"))
    }

    /// Validates and stores `wasm`; returns its digest and whether it was new.
    pub async fn put(&self, wasm: &[u8]) -> Result<(Digest, bool), ModuleError> {
        let module = self.runtime.load(wasm).await?;
        let digest = module.digest();
        if self.contains(&digest) {
            return Ok((digest, false));
        }
        let path = self.path(&digest);
        let dir = self.dir.clone();
        let bytes = wasm.to_vec();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let mut file = tempfile::NamedTempFile::new_in(&dir)?;
            file.write_all(&bytes)?;
            file.as_file().sync_all()?;
            file.persist(&path).map_err(|e| e.error)?;
            std::fs::File::open(&dir)?.sync_all()
        })
        .await
        .map_err(|e| ModuleError::Internal(format!("store thread failed: {e}")))?
        .map_err(|e| ModuleError::Internal(format!("cannot store the module: {e}")))?;
        let info = ModuleInfo {
            digest,
            bytes: wasm.len() as u64,
        };
        self.lock().insert(digest, info);
        Ok((digest, true))
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

    /// The module compiled and ready to run (from the runtime's caches when
    /// it was loaded before).
    pub async fn get(&self, digest: &Digest) -> Result<Module, ModuleError> {
        if let Some(module) = self.runtime.cached(digest).await {
            return Ok(module);
        }
        let bytes = self.read(digest).await?;
        self.runtime.load(&bytes).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, ModuleInfo>> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn described(&self) -> std::sync::MutexGuard<'_, BTreeMap<Digest, Details>> {
        self.described.lock().unwrap_or_else(|e| e.into_inner())
    }
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
