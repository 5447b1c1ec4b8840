//! Where journal segments live: a directory of files, or memory.
//!
//! The journal only ever appends to its newest segment, syncs it, cuts a torn
//! tail off it during recovery, and deletes whole old segments after a
//! snapshot. [`Storage`] is exactly that, so the journal can run on
//! [`FsStorage`] in production and on [`MemStorage`] in tests, where
//! [`MemStorage::crash`] throws away everything not yet synced, as a power
//! loss would.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Segment files of one journal, named by ascending ids.
pub trait Storage: Send + 'static {
    /// Ids of the existing segments, ascending.
    fn segments(&self) -> io::Result<Vec<u64>>;
    /// The whole content of segment `id`.
    fn read(&self, id: u64) -> io::Result<Vec<u8>>;
    /// Appends `bytes` to segment `id`, creating it if needed. Not durable
    /// until [`sync`](Self::sync).
    fn append(&mut self, id: u64, bytes: &[u8]) -> io::Result<()>;
    /// Makes every append to segment `id` so far durable.
    fn sync(&mut self, id: u64) -> io::Result<()>;
    /// Cuts segment `id` down to `len` bytes, durably.
    fn truncate(&mut self, id: u64, len: u64) -> io::Result<()>;
    /// Deletes segment `id`.
    fn remove(&mut self, id: u64) -> io::Result<()>;
}

/// Segments as files `<dir>/<id:020>.seg`.
#[derive(Debug)]
pub struct FsStorage {
    dir: PathBuf,
    /// The segment being appended to, kept open between appends.
    open: Option<(u64, File)>,
}

impl FsStorage {
    /// Segments in `dir`, which is created if missing.
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
            open: None,
        })
    }

    fn path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id:020}.seg"))
    }

    fn file(&mut self, id: u64) -> io::Result<&mut File> {
        if self.open.as_ref().is_none_or(|(open_id, _)| *open_id != id) {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.path(id))?;
            // A new segment's directory entry must be durable too.
            File::open(&self.dir)?.sync_all()?;
            self.open = Some((id, file));
        }
        Ok(&mut self.open.as_mut().expect("just opened").1)
    }
}

impl Storage for FsStorage {
    fn segments(&self) -> io::Result<Vec<u64>> {
        let mut ids = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            // Only the exact name `path` gives: `5.seg` or `+5.seg` would
            // parse too, and then not be found by `read`.
            if let Some(id) = name.strip_suffix(".seg").and_then(|id| id.parse().ok())
                && self.path(id).file_name() == Some(std::ffi::OsStr::new(name.as_ref()))
            {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn read(&self, id: u64) -> io::Result<Vec<u8>> {
        std::fs::read(self.path(id))
    }

    fn append(&mut self, id: u64, bytes: &[u8]) -> io::Result<()> {
        self.file(id)?.write_all(bytes)
    }

    fn sync(&mut self, id: u64) -> io::Result<()> {
        self.file(id)?.sync_data()
    }

    fn truncate(&mut self, id: u64, len: u64) -> io::Result<()> {
        let file = self.file(id)?;
        file.set_len(len)?;
        file.sync_all()
    }

    fn remove(&mut self, id: u64) -> io::Result<()> {
        if self
            .open
            .as_ref()
            .is_some_and(|(open_id, _)| *open_id == id)
        {
            self.open = None;
        }
        std::fs::remove_file(self.path(id))?;
        File::open(&self.dir)?.sync_all()
    }
}

/// Segments in memory, remembering how much of each is durable.
#[derive(Debug, Default, Clone)]
pub struct MemStorage {
    segments: BTreeMap<u64, MemSegment>,
}

#[derive(Debug, Default, Clone)]
struct MemSegment {
    bytes: Vec<u8>,
    synced_len: usize,
}

impl MemStorage {
    /// Empty storage.
    pub fn new() -> Self {
        Self::default()
    }

    /// Simulates a power loss: every byte not yet synced is lost, except
    /// that the first `torn_bytes` unsynced bytes of each segment survive
    /// (a write that half reached the disk).
    pub fn crash(&mut self, torn_bytes: usize) {
        for segment in self.segments.values_mut() {
            let keep = (segment.synced_len + torn_bytes).min(segment.bytes.len());
            segment.bytes.truncate(keep);
            segment.synced_len = keep;
        }
    }

    /// Flips one bit of segment `id` at `offset`, as a bad disk would.
    pub fn corrupt(&mut self, id: u64, offset: usize) {
        let segment = self.segments.get_mut(&id).expect("segment exists");
        segment.bytes[offset] ^= 0x01;
    }
}

fn not_found(id: u64) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("no segment {id}"))
}

impl Storage for MemStorage {
    fn segments(&self) -> io::Result<Vec<u64>> {
        Ok(self.segments.keys().copied().collect())
    }

    fn read(&self, id: u64) -> io::Result<Vec<u8>> {
        self.segments
            .get(&id)
            .map(|s| s.bytes.clone())
            .ok_or_else(|| not_found(id))
    }

    fn append(&mut self, id: u64, bytes: &[u8]) -> io::Result<()> {
        self.segments
            .entry(id)
            .or_default()
            .bytes
            .extend_from_slice(bytes);
        Ok(())
    }

    fn sync(&mut self, id: u64) -> io::Result<()> {
        let segment = self.segments.entry(id).or_default();
        segment.synced_len = segment.bytes.len();
        Ok(())
    }

    fn truncate(&mut self, id: u64, len: u64) -> io::Result<()> {
        let segment = self.segments.get_mut(&id).ok_or_else(|| not_found(id))?;
        segment.bytes.truncate(len as usize);
        segment.synced_len = segment.synced_len.min(segment.bytes.len());
        Ok(())
    }

    fn remove(&mut self, id: u64) -> io::Result<()> {
        self.segments
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| not_found(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same script against both implementations gives the same result.
    fn exercise(storage: &mut dyn Storage) {
        storage.append(3, b"hello ").unwrap();
        storage.append(3, b"world").unwrap();
        storage.sync(3).unwrap();
        storage.append(7, b"second").unwrap();
        storage.sync(7).unwrap();
        assert_eq!(storage.segments().unwrap(), vec![3, 7]);
        assert_eq!(storage.read(3).unwrap(), b"hello world");
        storage.truncate(3, 5).unwrap();
        assert_eq!(storage.read(3).unwrap(), b"hello");
        storage.remove(3).unwrap();
        assert_eq!(storage.segments().unwrap(), vec![7]);
        assert!(storage.read(3).is_err());
    }

    #[test]
    fn fs_and_mem_storage_agree() {
        let dir = tempfile::tempdir().unwrap();
        exercise(&mut FsStorage::open(dir.path()).unwrap());
        exercise(&mut MemStorage::new());
        // Segments survive reopening the directory.
        let reopened = FsStorage::open(dir.path()).unwrap();
        assert_eq!(reopened.read(7).unwrap(), b"second");
    }

    #[test]
    fn a_crash_loses_unsynced_bytes_only() {
        let mut storage = MemStorage::new();
        storage.append(0, b"durable").unwrap();
        storage.sync(0).unwrap();
        storage.append(0, b"+lost").unwrap();
        let mut torn = storage.clone();
        storage.crash(0);
        assert_eq!(storage.read(0).unwrap(), b"durable");
        torn.crash(2);
        assert_eq!(torn.read(0).unwrap(), b"durable+l");
    }
}

#[cfg(test)]
mod properties {
    //! A journal directory may hold files cohort did not write (copies,
    //! editors' backups, a hand-renamed segment): `segments` lists exactly
    //! the files `read` can open, so a stray name is ignored instead of
    //! failing recovery with "no such file". Long run:
    //! `PROPTEST_CASES=100000 cargo test -p cohort --lib journal::storage`.
    use super::*;
    use proptest::prelude::*;

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            (0..30u64).prop_map(|id| format!("{id:020}.seg")),
            (0..30u64).prop_map(|id| format!("{id}.seg")),
            (0..30u64).prop_map(|id| format!("+{id:019}.seg")),
            Just(format!("{}.seg", u64::MAX)),
            Just("18446744073709551616.seg".to_string()),
            "[0-9+a-z. -]{0,24}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_listed_segment_can_be_read(
            names in proptest::collection::btree_set(name(), 0..8),
        ) {
            let dir = tempfile::tempdir()?;
            for name in &names {
                if name.is_empty() || name == "." || name == ".." {
                    continue;
                }
                std::fs::write(dir.path().join(name), name.as_bytes())?;
            }
            let storage = FsStorage::open(dir.path())?;
            let ids = storage.segments()?;
            for &id in &ids {
                prop_assert!(storage.read(id).is_ok(), "segment {id} is listed but unreadable");
            }
            let mut sorted = ids.clone();
            sorted.dedup();
            prop_assert_eq!(sorted, ids);
        }
    }

    /// Found by `every_listed_segment_can_be_read`: `0.seg` was listed as
    /// segment 0, whose file is `00000000000000000000.seg`.
    #[test]
    fn a_segment_named_without_its_zeros_is_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("0.seg"), b"stray").unwrap();
        std::fs::write(dir.path().join(format!("{:020}.seg", 3)), b"").unwrap();
        let storage = FsStorage::open(dir.path()).unwrap();
        assert_eq!(storage.segments().unwrap(), vec![3]);
    }
}
