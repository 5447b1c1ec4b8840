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
}
