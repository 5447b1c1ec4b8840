//! Job modules: content addresses, validation against the job world, and the
//! two-level cache of compiled components.
//!
//! A module is named by the sha256 of its bytes ([`Digest`]), so the same
//! bytes are the same module on every machine. Compiling is the expensive
//! step (tens of milliseconds to seconds); it happens once per module per
//! engine configuration:
//!
//! * in memory, an LRU of ready-to-instantiate modules ([`Module`], holding
//!   an `InstancePre` that already resolved every import);
//! * on disk, `<data-dir>/compiled/<engine-fingerprint>/<digest>.cwasm`,
//!   written atomically (temp file + rename), so a restarted node or a second
//!   runtime on the same data dir skips compilation. The fingerprint covers
//!   the wasmtime version and every codegen setting, so an upgraded binary
//!   never loads an artifact it cannot run.
//!
//! Invariant: the on-disk cache holds only files this process family wrote
//! (deserializing compiled code is `unsafe` in wasmtime for that reason); a
//! file that fails to load is deleted and recompiled, never trusted.

use super::job::JobState;
use super::job_world::JobPre;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

/// The sha256 of a module's bytes: its name everywhere in cohort.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The raw 32 bytes.
    pub fn to_bytes(self) -> [u8; 32] {
        self.0
    }
}

impl From<[u8; 32]> for Digest {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

/// A string that is not 64 lowercase or uppercase hex digits.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("a module digest is 64 hex digits (a sha256), got `{0}`")]
pub struct DigestParseError(String);

impl FromStr for Digest {
    type Err = DigestParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.strip_prefix("sha256:").unwrap_or(text);
        let bad = || DigestParseError(text.chars().take(80).collect());
        // Hex digits only: `from_str_radix` alone takes a sign (`+e`).
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(out))
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.to_string()
    }
}

impl TryFrom<String> for Digest {
    type Error = DigestParseError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// Why a module was refused. Every variant has a stable [`code`](Self::code).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ModuleError {
    /// Larger than [`MODULE_BYTES_MAX`].
    ///
    /// [`MODULE_BYTES_MAX`]: crate::limits::MODULE_BYTES_MAX
    #[error("module is {size} bytes; the limit is {limit} bytes")]
    TooLarge {
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Not a WebAssembly component: garbage, a core module, or a component
    /// that does not validate or compile.
    #[error("invalid module: {0}")]
    Invalid(String),
    /// A valid component, but not of the `cohort:job/job` world.
    #[error("module is not a cohort job: {0}")]
    WrongWorld(String),
    /// Built against another version of the `cohort:job` package than the
    /// one this node implements.
    #[error(
        "module was built for {found}, but this node runs cohort:job@{JOB_PACKAGE_VERSION} \
         (and still runs jobs built for 0.1.0): rebuild it with this cohort's SDK (`cohort build`)"
    )]
    JobVersion {
        /// The import or export naming the other version, e.g.
        /// `cohort:job/host@0.3.0` (or naming a second version).
        found: String,
    },
    /// Imports an interface the sandbox does not provide.
    #[error(
        "module imports `{name}`, which cohort does not provide (a job may import \
         cohort:job/host@{JOB_PACKAGE_VERSION}, cohort:job/blobs@{JOB_PACKAGE_VERSION} and the \
         WASI 0.2 interfaces; details: {detail})"
    )]
    UnsupportedImport {
        /// The import's name.
        name: String,
        /// wasmtime's explanation.
        detail: String,
    },
    /// The host failed while compiling or caching (disk, threads).
    #[error("internal error while loading the module: {0}")]
    Internal(String),
}

/// The version of the `cohort:job` WIT package this host implements.
pub const JOB_PACKAGE_VERSION: &str = "0.2.0";

/// Every version of the `cohort:job` package a module may be built
/// against: this one, and the ones before it that nodes still run.
pub const JOB_PACKAGE_VERSIONS: &[&str] = &[JOB_PACKAGE_VERSION, "0.1.0"];

impl ModuleError {
    /// The stable, machine-readable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ModuleError::TooLarge { .. } => "module_too_large",
            ModuleError::Invalid(_) => "module_invalid",
            ModuleError::WrongWorld(_) => "module_wrong_world",
            ModuleError::JobVersion { .. } => "module_job_version",
            ModuleError::UnsupportedImport { .. } => "module_unsupported_import",
            ModuleError::Internal(_) => "internal",
        }
    }
}

/// A compiled job module, validated against the job world and ready to be
/// instantiated. Cheap to clone.
#[derive(Clone)]
pub struct Module {
    pub(crate) inner: Arc<ModuleInner>,
}

pub(crate) struct ModuleInner {
    pub(crate) digest: Digest,
    pub(crate) pre: JobPre<JobState>,
}

impl Module {
    /// The module's content address.
    pub fn digest(&self) -> Digest {
        self.inner.digest
    }
}

impl fmt::Debug for Module {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Module")
            .field("digest", &self.inner.digest)
            .finish()
    }
}

/// Refuses a component that names a version of the `cohort:job` package
/// this node does not run, or two versions, among `names` (its imports and
/// exports): the message then says "rebuild", not merely "cannot link".
/// The upload check and the runtime both ask it.
pub(crate) fn check_job_versions<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<(), ModuleError> {
    let mut seen: Option<&str> = None;
    for name in names {
        let Some(rest) = name.strip_prefix("cohort:job/") else {
            continue;
        };
        let version = rest.split_once('@').map(|(_, version)| version);
        let known = version.filter(|v| JOB_PACKAGE_VERSIONS.contains(v));
        match (known, seen) {
            (Some(version), None) => seen = Some(version),
            (Some(version), Some(first)) if version == first => {}
            _ => {
                return Err(ModuleError::JobVersion {
                    found: name.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// Checks the 8-byte preamble, so that garbage and core modules get a clear
/// message instead of a parser error deep inside the component.
pub(crate) fn check_preamble(bytes: &[u8]) -> Result<(), ModuleError> {
    const MAGIC: &[u8; 4] = b"\0asm";
    const CORE_VERSION: [u8; 4] = [1, 0, 0, 0];
    const COMPONENT_VERSION: [u8; 4] = [0x0d, 0, 1, 0];
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(ModuleError::Invalid(
            "not a WebAssembly binary (it does not start with \\0asm)".into(),
        ));
    }
    match bytes[4..8].try_into().expect("4 bytes") {
        COMPONENT_VERSION => Ok(()),
        CORE_VERSION => Err(ModuleError::Invalid(
            "this is a core WebAssembly module, not a component; build the job for the \
             wasm32-wasip2 target (cargo build --target wasm32-wasip2) so it is a component"
                .into(),
        )),
        other => Err(ModuleError::Invalid(format!(
            "unsupported WebAssembly version/layer {other:02x?}"
        ))),
    }
}

/// The on-disk cache of compiled components for one engine configuration.
///
/// Each file is the artifact followed by a trailer ([`TRAILER_MAGIC`],
/// the artifact's CRC-32 and its length): a file cut short or damaged on
/// disk fails [`load`](Self::load) and is recompiled, never handed to
/// wasmtime's `deserialize` (whose input must be an artifact it wrote).
/// What keeps a *foreign* artifact out is the directory's owner: the node's
/// own data directory, or a directory named by `--cache-dir` (a node's, or
/// `cohort exec`'s per-user one) checked by [`private_dir`] to be the
/// user's and writable by nobody else.
///
/// Several processes may share one cache (the nodes of one machine, runs
/// of `cohort exec`): [`compiling`](Self::compiling) takes a lock per
/// module across processes, so a module is compiled once on the machine
/// and the others load its artifact instead of compiling it too.
/// With a byte bound, the least recently used artifacts (of every engine
/// fingerprint under `compiled/`) are removed after a store that went over
/// it; a load marks an artifact used.
#[derive(Debug)]
pub(crate) struct DiskCache {
    dir: PathBuf,
    /// `<data-dir>/compiled`, whose fingerprint directories the bound
    /// covers.
    root: PathBuf,
    bytes_max: Option<u64>,
}

/// Longest a compile waits for another process compiling the same module
/// into a shared cache: far above a language runtime's compile on a busy
/// machine, short enough that a stopped holder costs a minute, not a hang.
const COMPILE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often a waiting compile looks at the lock again.
const COMPILE_LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// The first bytes of a cache file's trailer.
const TRAILER_MAGIC: &[u8; 4] = b"CWC1";
/// Magic, CRC-32 (LE) and artifact length (LE).
const TRAILER_BYTES: usize = 4 + 4 + 8;

impl DiskCache {
    /// A cache under `data_dir/compiled/<fingerprint>/`, created if
    /// missing; `bytes_max` bounds the artifacts under `compiled/`.
    pub(crate) fn open(
        data_dir: &Path,
        fingerprint: &str,
        bytes_max: Option<u64>,
    ) -> std::io::Result<Self> {
        let root = data_dir.join("compiled");
        let dir = root.join(fingerprint);
        std::fs::create_dir_all(&dir)?;
        Ok(Self {
            dir,
            root,
            bytes_max,
        })
    }

    pub(crate) fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(format!("{digest}.cwasm"))
    }

    /// Waits for, then holds until dropped, the lock on compiling `digest`
    /// into this cache, across every process sharing it. The holder checks
    /// the cache again before compiling: another process may have stored
    /// the artifact while this one waited. `None` after [`COMPILE_LOCK_WAIT`]
    /// (a holder stopped, say, with SIGSTOP): the caller compiles anyway.
    pub(crate) fn compiling(&self, digest: &Digest) -> std::io::Result<Option<std::fs::File>> {
        self.compiling_within(digest, COMPILE_LOCK_WAIT)
    }

    fn compiling_within(
        &self,
        digest: &Digest,
        wait: std::time::Duration,
    ) -> std::io::Result<Option<std::fs::File>> {
        let file = std::fs::File::options()
            .create(true)
            .write(true)
            .truncate(false)
            .open(lock_path(&self.path(digest)))?;
        let started = std::time::Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(Some(file)),
                Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                    std::thread::sleep(COMPILE_LOCK_POLL);
                }
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(error)) => return Err(error),
            }
        }
    }

    /// Writes `artifact` for `digest` atomically (readers see the whole
    /// file or none), then applies the bound.
    pub(crate) fn store(&self, digest: &Digest, artifact: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut file = tempfile::NamedTempFile::new_in(&self.dir)?;
        file.write_all(artifact)?;
        file.write_all(&trailer(artifact))?;
        file.as_file().sync_data()?;
        file.persist(self.path(digest)).map_err(|e| e.error)?;
        if let Some(bytes_max) = self.bytes_max {
            prune(&self.root, bytes_max, &self.path(digest));
        }
        Ok(())
    }

    /// The artifact stored for `digest`: `Ok(None)` if there is none,
    /// `Err` if the file is damaged (the caller removes it and compiles
    /// again). Marks it used, for the bound.
    pub(crate) fn load(&self, digest: &Digest) -> std::io::Result<Option<Vec<u8>>> {
        let path = self.path(digest);
        let mut bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let len = checked_len(&bytes).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: not a whole compiled module", path.display()),
            )
        })?;
        bytes.truncate(len);
        if self.bytes_max.is_some() {
            // Best effort: a cache that cannot be touched only evicts
            // less well.
            let _ = std::fs::File::options()
                .append(true)
                .open(&path)
                .and_then(|file| file.set_modified(std::time::SystemTime::now()));
        }
        Ok(Some(bytes))
    }
}

fn trailer(artifact: &[u8]) -> [u8; TRAILER_BYTES] {
    let mut trailer = [0; TRAILER_BYTES];
    trailer[..4].copy_from_slice(TRAILER_MAGIC);
    trailer[4..8].copy_from_slice(&crc32fast::hash(artifact).to_le_bytes());
    trailer[8..].copy_from_slice(&(artifact.len() as u64).to_le_bytes());
    trailer
}

/// The artifact's length if `file` is an artifact followed by its
/// trailer, intact.
fn checked_len(file: &[u8]) -> Option<usize> {
    let len = file.len().checked_sub(TRAILER_BYTES)?;
    let (artifact, trailer) = file.split_at(len);
    (*trailer == self::trailer(artifact)).then_some(len)
}

/// Removes the least recently used artifacts under `root` (every
/// fingerprint's) until they total at most `bytes_max`, never `keep` (the
/// one just stored). Best effort: what cannot be read or removed stays.
fn prune(root: &Path, bytes_max: u64, keep: &Path) {
    let mut files = Vec::new();
    let dirs = std::fs::read_dir(root).into_iter().flatten().flatten();
    for dir in dirs {
        for entry in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "cwasm") {
                continue;
            }
            if let Ok(meta) = entry.metadata() {
                let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                files.push((used, meta.len(), path));
            }
        }
    }
    let mut total: u64 = files.iter().map(|(_, len, _)| len).sum();
    files.sort();
    for (_, len, path) in files {
        if total <= bytes_max {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            let _ = std::fs::remove_file(lock_path(&path));
            total -= len;
        }
    }
}

/// The lock file of the artifact at `artifact` ([`DiskCache::compiling`]).
fn lock_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("lock")
}

/// Creates `dir` (mode 0700) if missing; refuses one that is not a
/// directory of this user's, or that others may write to: compiled code
/// loaded from it runs as native code.
pub(crate) fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| e.to_string())?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err("it is not a directory (or is a symbolic link)".into());
    }
    if meta.uid() != me {
        return Err(format!("it belongs to user {}, not to {me}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "others may write to it (mode {:o}); chmod go-w it",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_cache_hands_back_only_whole_artifacts() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), "fp", None).unwrap();
        let digest = Digest::of(b"module");
        assert!(cache.load(&digest).unwrap().is_none());
        let artifact: Vec<u8> = (0..10_000u32).map(|n| n as u8).collect();
        cache.store(&digest, &artifact).unwrap();
        assert_eq!(cache.load(&digest).unwrap().unwrap(), artifact);
        let file = std::fs::read(cache.path(&digest)).unwrap();
        // One byte flipped anywhere, a file cut short, or a bare artifact
        // (no trailer) is refused.
        for at in [0, 5_000, file.len() - 10, file.len() - 1] {
            let mut damaged = file.clone();
            damaged[at] ^= 1;
            std::fs::write(cache.path(&digest), &damaged).unwrap();
            assert!(cache.load(&digest).is_err(), "flipped at {at}");
        }
        for bytes in [&file[..file.len() - 1], &file[..3], &artifact[..]] {
            std::fs::write(cache.path(&digest), bytes).unwrap();
            assert!(cache.load(&digest).is_err());
        }
    }

    #[test]
    fn one_process_at_a_time_compiles_a_module_into_a_shared_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::open(dir.path(), "fp", None).unwrap();
        let (digest, other) = (Digest::of(b"module"), Digest::of(b"other"));
        let held = cache.compiling(&digest).unwrap().expect("free");
        // Another open of the lock file (as another process makes) waits,
        // and gives up after its wait.
        let elsewhere = std::fs::File::open(lock_path(&cache.path(&digest))).unwrap();
        assert!(matches!(
            elsewhere.try_lock(),
            Err(std::fs::TryLockError::WouldBlock)
        ));
        let short = std::time::Duration::from_millis(50);
        assert!(cache.compiling_within(&digest, short).unwrap().is_none());
        // Another module's compile does not wait.
        assert!(cache.compiling_within(&other, short).unwrap().is_some());
        drop(held);
        elsewhere.try_lock().unwrap();
    }

    #[test]
    fn a_bounded_disk_cache_drops_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        // Another engine fingerprint's artifacts count against the bound too.
        let other = DiskCache::open(dir.path(), "old", None).unwrap();
        let cache = DiskCache::open(dir.path(), "fp", Some(25_000)).unwrap();
        let artifact = vec![7u8; 10_000];
        let digests: Vec<Digest> = (0..3u8).map(|n| Digest::of(&[n])).collect();
        other.store(&digests[0], &artifact).unwrap();
        let age = |cache: &DiskCache, digest: &Digest, secs: u64| {
            let at = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
            let file = std::fs::File::options()
                .append(true)
                .open(cache.path(digest))
                .unwrap();
            file.set_modified(at).unwrap();
        };
        age(&other, &digests[0], 300);
        cache.store(&digests[1], &artifact).unwrap();
        age(&cache, &digests[1], 200);
        // Two stored: 20 KiB and a bit, within the bound.
        assert!(other.path(&digests[0]).exists());
        // A third goes over: the oldest (the other fingerprint's) leaves.
        cache.store(&digests[2], &artifact).unwrap();
        assert!(!other.path(&digests[0]).exists());
        assert!(cache.path(&digests[1]).exists() && cache.path(&digests[2]).exists());
        // A load marks an artifact used: the next one over the bound
        // evicts the one not loaded.
        age(&cache, &digests[2], 100);
        cache.load(&digests[1]).unwrap().unwrap();
        let fourth = Digest::of(b"fourth");
        cache.store(&fourth, &artifact).unwrap();
        assert!(cache.path(&digests[1]).exists(), "loaded lately: kept");
        assert!(
            !cache.path(&digests[2]).exists(),
            "least recently used: gone"
        );
        assert!(cache.path(&fourth).exists(), "just stored: kept");
    }

    #[test]
    fn digest_round_trips_through_hex() {
        let d = Digest::of(b"hello");
        let hex = d.to_string();
        assert_eq!(
            hex,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(hex.parse::<Digest>().unwrap(), d);
        assert_eq!(format!("sha256:{hex}").parse::<Digest>().unwrap(), d);
        assert_eq!(hex.to_uppercase().parse::<Digest>().unwrap(), d);
    }

    #[test]
    fn bad_digests_are_rejected() {
        let signed = format!("+e{}", "a".repeat(62));
        for bad in [
            "",
            "abc",
            &"g".repeat(64),
            &"é".repeat(32),
            &"a".repeat(65),
            &signed,
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }

    #[test]
    fn preamble_tells_garbage_core_and_component_apart() {
        assert_eq!(
            check_preamble(b"garbage!").unwrap_err().code(),
            "module_invalid"
        );
        let core = check_preamble(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            core.to_string().contains("core WebAssembly module"),
            "{core}"
        );
        check_preamble(b"\0asm\x0d\0\x01\0").unwrap();
    }
}
