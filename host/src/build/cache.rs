//! Built Python components, kept by what they were built from: a build
//! whose sources, lock and toolchain are those of an earlier one answers
//! that build's bytes instead of running componentize-py again.
//!
//! * **The sources are copied first.** The build reads the project from a
//!   copy in a scratch directory ([`copy_sources`]): componentize-py's
//!   interpreter writes `__pycache__` where it imports from, and that is
//!   never the user's project. The copy leaves out what is not source:
//!   `dist/`, `__pycache__/`, `node_modules/` and hidden entries (`.git`,
//!   `.venv`); it digests each file as it copies it.
//! * **The key is every input.** A build's key ([`key`]) is the SHA-256 of
//!   the copied files (paths and contents), the dependencies pinned, the
//!   toolchain's pins, the SDK and the build's options: a change to any of
//!   them is another key.
//! * **An entry is checked before it is used.** Each entry is the
//!   component and its SHA-256 ([`Cache::get`]): one that does not match
//!   (a torn write, a disk error, a hand edit) is deleted and built anew.
//!   The cache keeps the [`KEPT`] newest entries; it lives in the
//!   toolchains directory and is safe to delete.
//! * **Why.** componentize-py takes 10-20 s and does not give the same
//!   bytes twice for the same inputs (its build-time interpreter draws
//!   random numbers). With the cache, rebuilding an unchanged job is a
//!   copy, and gives the digest the cluster already has, so a redeploy is
//!   no new module to compile on every node.

use anyhow::{Context, bail};
use sha2::{Digest as _, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The newest entries kept (a Python component is some 20 MB).
pub const KEPT: usize = 16;

/// The newest marks kept ([`Cache::mark`]: empty files).
pub const MARKS_KEPT: usize = 256;

/// The most files a project's copy holds: more is a virtualenv or a data
/// set inside the project, not job sources.
pub const SOURCE_FILES_MAX: usize = 10_000;

/// The most bytes a project's copy holds.
pub const SOURCE_BYTES_MAX: u64 = 256 << 20;

/// What the copy leaves out, by name (and every name starting with `.`).
const SKIPPED: &[&str] = &["dist", "__pycache__", "node_modules"];

/// Copies the project's sources from `project` into `into` (a new
/// directory); answers each file's path (relative, `/`-separated) and
/// SHA-256, by path.
pub fn copy_sources(project: &Path, into: &Path) -> anyhow::Result<Vec<(String, [u8; 32])>> {
    fs::create_dir_all(into).with_context(|| format!("cannot create {}", into.display()))?;
    sources(project, Some(into))
}

/// The project's sources' paths and SHA-256 digests, as [`copy_sources`]
/// answers them, without a copy.
pub fn digest_sources(project: &Path) -> anyhow::Result<Vec<(String, [u8; 32])>> {
    sources(project, None)
}

/// The sources of `project`, copied into `into` when given.
fn sources(project: &Path, into: Option<&Path>) -> anyhow::Result<Vec<(String, [u8; 32])>> {
    let mut files = Vec::new();
    let mut bytes = 0u64;
    let into = into.map(Path::to_path_buf);
    let mut pending = vec![(project.to_path_buf(), into, String::new())];
    while let Some((from, to, relative)) = pending.pop() {
        let entries =
            fs::read_dir(&from).with_context(|| format!("cannot read {}", from.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("cannot read {}", from.display()))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                bail!(
                    "{}: a file name that is not UTF-8 ({:?})",
                    from.display(),
                    entry.file_name()
                );
            };
            if name.starts_with('.') || SKIPPED.contains(&name) {
                continue;
            }
            let path = entry.path();
            let inner = match relative.as_str() {
                "" => name.to_string(),
                parent => format!("{parent}/{name}"),
            };
            // A link is followed to what it names (a link to a directory
            // only as a file's: no loops).
            let kind =
                fs::metadata(&path).with_context(|| format!("cannot read {}", path.display()))?;
            if kind.is_dir() {
                if entry.file_type()?.is_symlink() {
                    continue;
                }
                let target = to.as_ref().map(|to| to.join(name));
                if let Some(target) = &target {
                    fs::create_dir(target)
                        .with_context(|| format!("cannot create {}", target.display()))?;
                }
                pending.push((path, target, inner));
            } else if kind.is_file() {
                bytes += kind.len();
                if files.len() >= SOURCE_FILES_MAX || bytes > SOURCE_BYTES_MAX {
                    bail!(
                        "{} holds more than {SOURCE_FILES_MAX} files or {} MiB besides dist/, \
                         __pycache__/, node_modules/ and hidden entries: keep data sets and \
                         environments outside the job's project",
                        project.display(),
                        SOURCE_BYTES_MAX >> 20
                    );
                }
                let contents =
                    fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
                if let Some(to) = &to {
                    fs::write(to.join(name), &contents)
                        .with_context(|| format!("cannot copy {}", path.display()))?;
                }
                files.push((inner, Sha256::digest(&contents).into()));
            }
        }
    }
    files.sort_unstable();
    Ok(files)
}

/// A build's key: the SHA-256 (hex) of its `files` and every other input
/// named in `inputs`.
pub fn key(files: &[(String, [u8; 32])], inputs: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for input in inputs {
        hasher.update((input.len() as u64).to_le_bytes());
        hasher.update(input.as_bytes());
    }
    hasher.update((files.len() as u64).to_le_bytes());
    for (path, digest) in files {
        hasher.update((path.len() as u64).to_le_bytes());
        hasher.update(path.as_bytes());
        hasher.update(digest);
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cache of built components, in a directory of the toolchains.
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: PathBuf) -> Self {
        Cache { dir }
    }

    fn paths(&self, key: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{key}.wasm")),
            self.dir.join(format!("{key}.sha256")),
        )
    }

    /// The component built for `key`, copied to `out`, when the cache holds
    /// it whole; an entry whose bytes do not match its digest is removed.
    pub fn get(&self, key: &str, out: &Path) -> bool {
        let (wasm, digest) = self.paths(key);
        let (Ok(bytes), Ok(expected)) = (fs::read(&wasm), fs::read_to_string(&digest)) else {
            return false;
        };
        if hex(&Sha256::digest(&bytes)) != expected.trim() {
            let _ = fs::remove_file(&wasm);
            let _ = fs::remove_file(&digest);
            return false;
        }
        // Touched, so the eviction keeps what is used.
        let _ = fs::File::options()
            .append(true)
            .open(&digest)
            .and_then(|file| file.set_modified(std::time::SystemTime::now()));
        fs::write(out, &bytes).is_ok()
    }

    /// Keeps the component at `built` under `key` (written aside and
    /// renamed, the digest last), then drops the oldest entries past
    /// [`KEPT`]. A cache that cannot be written costs the next build its
    /// time, never this one: errors are only reported.
    pub fn put(&self, key: &str, built: &Path) {
        let kept = (|| -> std::io::Result<()> {
            fs::create_dir_all(&self.dir)?;
            let bytes = fs::read(built)?;
            let (wasm, digest) = self.paths(key);
            let scratch = self.dir.join(format!(".{key}.writing"));
            fs::write(&scratch, &bytes)?;
            fs::rename(&scratch, &wasm)?;
            fs::write(&scratch, hex(&Sha256::digest(&bytes)))?;
            fs::rename(&scratch, &digest)?;
            self.evict()
        })();
        if let Err(error) = kept {
            eprintln!(
                "cohort build: warning: cannot keep the component in {}: {error}",
                self.dir.display()
            );
        }
    }

    /// Whether [`Cache::mark`] marked `key`: a step (a type check) that
    /// passed for these inputs before.
    pub fn marked(&self, key: &str) -> bool {
        let mark = self.dir.join(format!("{key}.ok"));
        mark.is_file()
            && fs::File::options()
                .append(true)
                .open(&mark)
                .and_then(|file| file.set_modified(std::time::SystemTime::now()))
                .is_ok()
    }

    /// Marks `key` as passed, keeping the [`MARKS_KEPT`] newest marks.
    pub fn mark(&self, key: &str) {
        let marked = (|| -> std::io::Result<()> {
            fs::create_dir_all(&self.dir)?;
            fs::write(self.dir.join(format!("{key}.ok")), b"")?;
            self.drop_oldest("ok", MARKS_KEPT, &[])
        })();
        if let Err(error) = marked {
            eprintln!(
                "cohort build: warning: cannot keep a mark in {}: {error}",
                self.dir.display()
            );
        }
    }

    fn evict(&self) -> std::io::Result<()> {
        self.drop_oldest("sha256", KEPT, &["wasm"])
    }

    /// Removes the files with extension `ext` past the `kept` newest, each
    /// with its siblings of the extensions `with`.
    fn drop_oldest(&self, ext: &str, kept: usize, with: &[&str]) -> std::io::Result<()> {
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == ext) {
                entries.push((fs::metadata(&path)?.modified()?, path));
            }
        }
        entries.sort_unstable_by_key(|(modified, _)| std::cmp::Reverse(*modified));
        for (_, path) in entries.into_iter().skip(kept) {
            for sibling in with {
                let _ = fs::remove_file(path.with_extension(sibling));
            }
            let _ = fs::remove_file(path);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_leaves_out_what_is_not_source_and_the_key_follows_every_input() {
        let project = tempfile::tempdir().unwrap();
        let p = project.path();
        for dir in ["pkg", "dist", "__pycache__", ".git", "pkg/__pycache__"] {
            fs::create_dir_all(p.join(dir)).unwrap();
        }
        for file in [
            "app.py",
            "pkg/__init__.py",
            "dist/old.wasm",
            "__pycache__/app.pyc",
            ".git/HEAD",
            "pkg/__pycache__/x.pyc",
            ".env",
        ] {
            fs::write(p.join(file), file).unwrap();
        }
        let into = tempfile::tempdir().unwrap();
        let files = copy_sources(p, &into.path().join("src")).unwrap();
        let paths: Vec<&str> = files.iter().map(|(path, _)| path.as_str()).collect();
        assert_eq!(paths, ["app.py", "pkg/__init__.py"]);
        assert_eq!(
            fs::read_to_string(into.path().join("src/pkg/__init__.py")).unwrap(),
            "pkg/__init__.py"
        );
        assert!(!into.path().join("src/dist").exists());
        let base = key(&files, &["pins"]);
        assert_eq!(base, key(&files, &["pins"]));
        assert_ne!(base, key(&files, &["other pins"]));
        fs::write(p.join("app.py"), "changed").unwrap();
        let again = tempfile::tempdir().unwrap();
        let changed = copy_sources(p, &again.path().join("src")).unwrap();
        assert_ne!(base, key(&changed, &["pins"]));
    }

    #[test]
    fn an_entry_is_used_only_whole_and_the_newest_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("cache"));
        let built = dir.path().join("built.wasm");
        let out = dir.path().join("out.wasm");
        fs::write(&built, b"component").unwrap();
        assert!(!cache.get("k", &out));
        cache.put("k", &built);
        assert!(cache.get("k", &out));
        assert_eq!(fs::read(&out).unwrap(), b"component");
        // A torn entry is dropped, not used.
        fs::write(dir.path().join("cache/k.wasm"), b"compo").unwrap();
        assert!(!cache.get("k", &out));
        assert!(!dir.path().join("cache/k.wasm").exists());
        for n in 0..KEPT + 3 {
            cache.put(&format!("e{n}"), &built);
        }
        let kept = fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "wasm")
            })
            .count();
        assert_eq!(kept, KEPT);
        assert!(!cache.marked("checked"));
        cache.mark("checked");
        assert!(cache.marked("checked"));
    }
}
