//! Reading a snapshot back, whole or in parts.
//!
//! [`Restoring`] reads the layout `snapshot` writes, one item at a time,
//! from parts of any size: an item split across parts is kept until its
//! bytes are all there. Nothing is trusted: every item is decoded and
//! checked as it arrives (jobs in ascending id order, no bytes after the
//! end from version 2 on), finished jobs are packed as they are read, and
//! the index is rebuilt at the end ([`Master::rebuild_index`]), dropping
//! references to jobs the snapshot does not hold.
//!
//! Invariant: restoring the same bytes gives the same master whatever the
//! parts' sizes, and the same refusal code. Older versions read as far as
//! they go; what they did not hold starts empty.

use std::collections::BTreeMap;

use crate::blobs::{Kept, Registry};
use crate::done::Done;
use crate::index::Index;
use crate::master::{Job, Master};
use crate::protocol::*;
use crate::requests::Request;
use crate::snapshot::{Head, SNAPSHOT_VERSION, Tail};

/// A master being restored from a snapshot given in parts, in order
/// ([`feed`](Restoring::feed) each, then [`finish`](Restoring::finish)):
/// what [`Master::restore`] does with the whole, without ever holding the
/// whole. Each job and request id is decoded as soon as its bytes are
/// all there; a part that ends within one keeps those bytes for the next.
///
/// The snapshot's layout is `Master::write_part`'s: the version, the
/// state's head and job count, the jobs (each its id and record; finished
/// ones are packed as they are read, so each is decoded once and a
/// snapshot is checked whole), the tail, then, by version, the tokens (2),
/// the request ids (3: their count, then each), the keys (4), the
/// schedules and DAGs (5), the deployments and the jobs submitted by a
/// module name (6), the egress grants and calls (7), the recorded calls
/// and the secrets jobs may read (8), the jobs' blobs (9), the blobs the
/// cluster keeps (10; before it, those the jobs and schedules name), what
/// workers hold and when blob jobs joined the line (11; before it,
/// nothing, and a [`Config`] without `locality_wait_ms`), the workers'
/// pools (12), the jobs' namespaces (14; before it, every job is in the
/// default one), the namespaces' quotas and shares (15; before it, no
/// quotas, every weight 1 and every virtual time 0).
/// The registry's counts of names are rebuilt at the end.
#[derive(Debug, Default)]
pub struct Restoring {
    stage: Stage,
    version: u8,
    master: Master,
    /// The index entries of the finished jobs read so far.
    done: Index,
    last: Option<JobId>,
    /// The blobs the snapshot keeps (the registry is rebuilt from them
    /// and the names at the end).
    kept: BTreeMap<Digest, Kept>,
    /// The start of an item the parts so far end within.
    pending: Vec<u8>,
    /// `pending` is decoded again once it is this long: twice what it was
    /// when it last fell short, so an item as large as many parts (a big
    /// map of keys) costs a few decodings, not one per part.
    retry_at: usize,
}

/// What [`Restoring`] reads next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Stage {
    #[default]
    Version,
    Head,
    Jobs(usize),
    Tail,
    Tokens,
    RequestCount,
    Requests(usize),
    Keyed,
    Schedules,
    Dags,
    Deployments,
    Egress,
    Tapes,
    Blobs,
    Kept,
    Locality,
    Pools,
    Namespaces,
    Quotas,
    Shares,
    End,
}

/// The stage after an item and the bytes after it, or `None` if the
/// bytes end within the item.
type Read<'a> = Result<Option<(Stage, &'a [u8])>, Rejection>;

fn undecodable(error: postcard::Error) -> Rejection {
    Rejection::new(codes::UNDECODABLE, format!("cannot decode: {error}"))
}

/// The value `bytes` start with and the bytes after it; `None` if they
/// end within it.
fn take<'a, T: serde::Deserialize<'a>>(
    bytes: &'a [u8],
) -> Result<Option<(T, &'a [u8])>, Rejection> {
    match postcard::take_from_bytes(bytes) {
        Ok(taken) => Ok(Some(taken)),
        Err(postcard::Error::DeserializeUnexpectedEnd) => Ok(None),
        Err(error) => Err(undecodable(error)),
    }
}

/// The value taken, or `Ok(None)` when `bytes` end within it.
macro_rules! taken {
    ($take:expr) => {
        match $take? {
            Some(taken) => taken,
            None => return Ok(None),
        }
    };
}

impl Master {
    /// A master from [`snapshot`](Self::snapshot) bytes, or from a snapshot
    /// of an older version (see [`SNAPSHOT_VERSION`]): what it did not hold
    /// starts empty. The same as [`Restoring`] given the bytes as one
    /// part.
    pub fn restore(bytes: &[u8]) -> Result<Self, Rejection> {
        let mut restoring = Restoring::default();
        restoring.feed(bytes)?;
        restoring.finish()
    }
}

impl Restoring {
    /// Reads the next part.
    pub fn feed(&mut self, part: &[u8]) -> Result<(), Rejection> {
        if self.pending.is_empty() {
            let used = self.decode(part)?;
            self.keep(&part[used..]);
            return Ok(());
        }
        self.pending.extend_from_slice(part);
        if self.pending.len() >= self.retry_at {
            self.decode_pending()?;
        }
        Ok(())
    }

    fn decode_pending(&mut self) -> Result<(), Rejection> {
        let pending = std::mem::take(&mut self.pending);
        let used = self.decode(&pending)?;
        self.keep(&pending[used..]);
        Ok(())
    }

    /// Keeps `rest`, the start of an item, for the next part.
    fn keep(&mut self, rest: &[u8]) {
        self.pending = rest.to_vec();
        self.retry_at = rest.len().saturating_mul(2);
    }

    /// The master the parts fed make up.
    pub fn finish(mut self) -> Result<Master, Rejection> {
        if !self.pending.is_empty() {
            self.decode_pending()?;
        }
        if self.stage != Stage::End {
            return Err(match self.stage {
                Stage::Version => Rejection::new(codes::UNDECODABLE, "an empty snapshot"),
                _ => undecodable(postcard::Error::DeserializeUnexpectedEnd),
            });
        }
        self.master.rebuild_index(self.done);
        let named: Vec<_> = self.master.named_blobs().collect();
        self.master.registry = Registry::rebuilt(self.kept, named.into_iter());
        Ok(self.master)
    }

    /// Decodes what `bytes` hold whole; how many bytes that took.
    fn decode(&mut self, bytes: &[u8]) -> Result<usize, Rejection> {
        let mut used = 0;
        while self.stage != Stage::End {
            match self.step(&bytes[used..])? {
                Some(rest) => used = bytes.len() - rest.len(),
                None => return Ok(used),
            }
        }
        let after = bytes.len() - used;
        // Version 1 was written by `encode`, which ignores trailing bytes.
        if self.version >= 2 && after > 0 {
            return Err(Rejection::new(
                codes::UNDECODABLE,
                format!("{after} bytes after the snapshot"),
            ));
        }
        Ok(bytes.len())
    }

    /// Decodes the next item from `bytes`: the bytes after it, or `None`
    /// if they end within it. [`JobOptions`] (in the keys and schedules)
    /// have no `module` before version 6, no `egress` before 7 and no
    /// `input_blob` before 9, no `trace` before 11 and no `labels` before
    /// 12, grants no `record` before 8, and attempts no `usage` before
    /// 13.
    fn step<'a>(&mut self, bytes: &'a [u8]) -> Result<Option<&'a [u8]>, Rejection> {
        let fields = match self.version {
            ..6 => 2,
            6 => 3,
            7 => 4,
            8 => 5,
            9 | 10 => 6,
            11 => 7,
            12 => 8,
            13 => 9,
            _ => crate::protocol::legacy::FIELDS_NOW,
        };
        let locality = self.version >= 11;
        crate::protocol::legacy::config(locality, || {
            crate::protocol::legacy::options(fields, || self.read_item(bytes))
        })
    }

    /// [`step`](Self::step) in the format of the snapshot's version.
    fn read_item<'a>(&mut self, bytes: &'a [u8]) -> Result<Option<&'a [u8]>, Rejection> {
        let read = match self.stage {
            Stage::Version => self.read_version(bytes),
            Stage::Head => self.read_head(bytes),
            Stage::Jobs(0) => Ok(Some((Stage::Tail, bytes))),
            Stage::Jobs(left) => self.read_job(left, bytes),
            Stage::Tail => self.read_tail(bytes),
            Stage::Tokens => {
                let (tokens, rest) = taken!(take(bytes));
                self.master.tokens = tokens;
                Ok(Some((self.after(2, Stage::RequestCount), rest)))
            }
            Stage::RequestCount => {
                let (count, rest) = taken!(take::<usize>(bytes));
                Ok(Some((Stage::Requests(count), rest)))
            }
            Stage::Requests(0) => Ok(Some((self.after(3, Stage::Keyed), bytes))),
            Stage::Requests(left) => {
                let ((id, request), rest) = taken!(take::<(RequestId, Request)>(bytes));
                // As a map decodes: an id read twice keeps its last.
                self.master.requests.insert(id, request);
                Ok(Some((Stage::Requests(left - 1), rest)))
            }
            Stage::Keyed => {
                let (keyed, rest) = taken!(take(bytes));
                self.master.keyed = keyed;
                Ok(Some((self.after(4, Stage::Schedules), rest)))
            }
            Stage::Schedules => {
                let (schedules, rest) = taken!(take(bytes));
                self.master.schedules = schedules;
                Ok(Some((Stage::Dags, rest)))
            }
            Stage::Dags => {
                let (dags, rest) = taken!(take(bytes));
                self.master.dags = dags;
                Ok(Some((self.after(5, Stage::Deployments), rest)))
            }
            Stage::Deployments => {
                let (deployments, rest) = taken!(take(bytes));
                self.master.deployments = deployments;
                Ok(Some((self.after(6, Stage::Egress), rest)))
            }
            Stage::Egress => {
                let (egress, rest) = taken!(take(bytes));
                self.master.egress = egress;
                Ok(Some((self.after(7, Stage::Tapes), rest)))
            }
            Stage::Tapes => {
                let ((tapes, readable), rest) = taken!(take(bytes));
                self.master.tapes = crate::tapes::bounded(tapes);
                self.master.egress.readable = crate::grants::bounded_readable(readable);
                Ok(Some((self.after(8, Stage::Blobs), rest)))
            }
            Stage::Blobs => {
                let (blobs, rest) = taken!(take(bytes));
                self.master.blobs = crate::blobs::bounded(blobs);
                Ok(Some((self.after(9, Stage::Kept), rest)))
            }
            Stage::Kept => {
                let (kept, rest) = taken!(take(bytes));
                self.kept = kept;
                Ok(Some((self.after(10, Stage::Locality), rest)))
            }
            Stage::Locality => {
                let (locality, rest) = taken!(take(bytes));
                self.master.locality = crate::locality::bounded(locality);
                Ok(Some((self.after(11, Stage::Pools), rest)))
            }
            Stage::Pools => {
                let (pools, rest) = taken!(take::<crate::pools::Pools>(bytes));
                for (worker, pool) in &pools {
                    self.master.apply_worker_pool(worker, pool);
                }
                Ok(Some((self.after(13, Stage::Namespaces), rest)))
            }
            Stage::Namespaces => {
                let (namespaces, rest) = taken!(take(bytes));
                self.master.namespaces = crate::namespaces::bounded(namespaces);
                Ok(Some((self.after(14, Stage::Quotas), rest)))
            }
            Stage::Quotas => {
                let (quotas, rest) = taken!(take(bytes));
                let totals = &self.master.namespaces.totals;
                self.master.quotas =
                    crate::quotas::bounded(quotas, |name| totals.contains_key(name));
                Ok(Some((Stage::Shares, rest)))
            }
            Stage::Shares => {
                let (shares, rest) = taken!(take(bytes));
                let totals = &self.master.namespaces.totals;
                self.master.shares =
                    crate::shares::bounded(shares, |name| totals.contains_key(name));
                Ok(Some((Stage::End, rest)))
            }
            Stage::End => return Ok(None),
        };
        let Some((stage, rest)) = read? else {
            return Ok(None);
        };
        self.stage = stage;
        Ok(Some(rest))
    }

    fn read_version<'a>(&mut self, bytes: &'a [u8]) -> Read<'a> {
        let Some((&version, rest)) = bytes.split_first() else {
            return Ok(None);
        };
        if !(1..=SNAPSHOT_VERSION).contains(&version) {
            return Err(Rejection::new(
                codes::UNKNOWN_VERSION,
                format!("snapshot version {version}, this master reads 1 to {SNAPSHOT_VERSION}"),
            ));
        }
        self.version = version;
        Ok(Some((Stage::Head, rest)))
    }

    fn read_head<'a>(&mut self, bytes: &'a [u8]) -> Read<'a> {
        let (head, rest) = taken!(take::<Head>(bytes));
        let (count, rest) = taken!(take::<usize>(rest));
        self.master = Master {
            config: head.config,
            next_id: head.next_id,
            next_seq: head.next_seq,
            ..Master::new()
        };
        Ok(Some((Stage::Jobs(count), rest)))
    }

    /// One job of the `left` still to read: its id, then its record.
    fn read_job<'a>(&mut self, left: usize, bytes: &'a [u8]) -> Read<'a> {
        let (id, record) = taken!(take::<JobId>(bytes));
        let (job, rest) = taken!(take::<Job>(record));
        if self.last.is_some_and(|last| last >= id) {
            return Err(Rejection::new(
                codes::UNDECODABLE,
                format!("job {id} out of order in the snapshot"),
            ));
        }
        self.last = Some(id);
        if job.state.is_terminal() {
            self.done.add_done(id, &job);
            // Records of older versions are packed again: a packed record
            // is this version's bytes (their attempts have `usage`).
            let done = match self.version >= 13 {
                true => Done::of(&job, &record[..record.len() - rest.len()]),
                false => Done::pack(&job),
            };
            self.master.done.insert(id, done);
        } else {
            self.master.jobs.insert(id, Box::new(job));
        }
        Ok(Some((Stage::Jobs(left - 1), rest)))
    }

    fn read_tail<'a>(&mut self, bytes: &'a [u8]) -> Read<'a> {
        let (tail, rest) = taken!(take::<Tail>(bytes));
        let master = &mut self.master;
        master.workers = tail.workers;
        master.submitted_total = tail.submitted_total;
        master.attempts_total = tail.attempts_total;
        master.retries_total = tail.retries_total;
        Ok(Some((self.after(1, Stage::Tokens), rest)))
    }

    /// `next` if the snapshot's version is past `version`, else the end.
    fn after(&self, version: u8, next: Stage) -> Stage {
        if self.version > version {
            next
        } else {
            Stage::End
        }
    }
}
