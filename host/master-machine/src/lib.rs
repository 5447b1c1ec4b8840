//! cohort's master: the job scheduler as a pure, deterministic state machine.
//!
//! The same code runs two ways. Wrapped by a thin component crate
//! (`host/master-machine/component`, the built-in master the `cohort` host embeds;
//! `examples/fifo-master`, a custom one) and built for `wasm32-wasip2`, it
//! is the master component of `wit/master.wit`; linked natively it gives the
//! host the message types and lets the scheduling logic be unit-tested
//! without Wasm.
//!
//! * [`protocol`] — commands, events, effects, replies, queries, answers and
//!   their versioned postcard encoding. The journal holds events only, and
//!   of blobs, the large data jobs read and write, it holds digests and
//!   sizes, never bytes ([`blobs`]).
//! * [`master`] — the state and its `decide`/`apply`/`query`/`snapshot`;
//!   each concern (jobs, attempts, keys, schedules, DAGs, snapshots, ...)
//!   adds to `impl Master` from a private module of its own, listed in
//!   [`master`]'s notes.
//! * [`Machine`] — the byte-level face of the master, exactly what the
//!   component exports; the host's native backend calls it directly, so a
//!   scenario replayed natively and through Wasm must give identical bytes.

mod attempts;
pub mod blobs;
mod bulk;
pub mod dag;
pub mod deployments;
mod done;
pub mod egress;
mod grants;
mod index;
mod jobs;
mod keys;
pub mod limits;
pub mod locality;
pub mod master;
pub mod namespaces;
pub mod pools;
pub mod protocol;
mod query;
pub mod quotas;
mod requests;
mod restore;
mod scan;
pub mod scenarios;
pub mod schedule;
pub mod script;
pub mod shares;
mod snapshot;
pub mod steps;
pub mod tapes;
mod tick;
mod tokens;
mod uniqueness;
mod validation;
mod workers;

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use blobs::{check_outputs, valid_output_name};
pub use deployments::valid_module_name;
pub use egress::{
    GrantHost, HttpCall, HttpGrant, Piece, check_secret_name, strict_ipv4, template,
    valid_secret_name,
};
pub use master::{Master, Order};
pub use pools::check_labels;
pub use protocol::*;
pub use tapes::check_call;

pub mod instance;

/// The master as the component exports it: versioned bytes in and out.
#[derive(Debug, Default)]
pub struct Machine {
    master: Master,
    /// Where the next [`snapshot_part`](Machine::snapshot_part) starts.
    part: master::SnapshotCursor,
    /// A snapshot being given in parts ([`init_part`](Machine::init_part)).
    restoring: Option<master::Restoring>,
}

impl Machine {
    /// Starts empty or from a snapshot.
    pub fn init(snapshot: Option<&[u8]>) -> Result<Self, Rejection> {
        let master = match snapshot {
            Some(bytes) => Master::restore(bytes)?,
            None => Master::new(),
        };
        Ok(Self {
            master,
            ..Self::default()
        })
    }

    /// Starts empty or from a snapshot, lining runnable jobs up by `order`
    /// (how a master build with another scheduling policy starts; see
    /// [`Order`]).
    pub fn init_ordered(snapshot: Option<&[u8]>, order: Order) -> Result<Self, Rejection> {
        let machine = Self::init(snapshot)?;
        Ok(Self {
            master: machine.master.with_order(order),
            ..Self::default()
        })
    }

    /// Reads the next part of a snapshot to start from; with `last`, starts
    /// from the parts read (lining runnable jobs up by `order`), as
    /// [`init_ordered`](Self::init_ordered) from their bytes would. Until
    /// then the machine is as it was; a refused part drops the parts read.
    pub fn init_part(&mut self, part: &[u8], last: bool, order: Order) -> Result<(), Rejection> {
        let mut restoring = self.restoring.take().unwrap_or_default();
        restoring.feed(part)?;
        if !last {
            self.restoring = Some(restoring);
            return Ok(());
        }
        *self = Self {
            master: restoring.finish()?.with_order(order),
            ..Self::default()
        };
        Ok(())
    }

    /// Decides an encoded [`Command`]: encoded events and reply.
    pub fn decide(
        &self,
        now: Millis,
        command: &[u8],
    ) -> Result<(Vec<Vec<u8>>, Vec<u8>), Rejection> {
        let command: Command = decode(command)?;
        let decision = self.master.decide(now, &command)?;
        let events = decision.events.iter().map(encode).collect();
        Ok((events, encode(&decision.reply)))
    }

    /// Applies encoded events in order; encoded effects. Every event is
    /// decoded before any is applied, so a bad one changes nothing. Events
    /// journaled in an older format are read too ([`decode_event`]).
    /// `WorkAvailable` comes at most once, first where it arose: it asks
    /// the host to offer work again, which once does for the whole call
    /// (a replay of a million submissions would otherwise hand the host a
    /// million of them).
    pub fn apply<B: AsRef<[u8]>>(&mut self, events: &[B]) -> Result<Vec<Vec<u8>>, Rejection> {
        let events = events
            .iter()
            .map(|bytes| decode_event(bytes.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        // A snapshot being written in parts is of the state before.
        self.part = Default::default();
        let mut effects = Vec::new();
        for event in &events {
            self.master.apply_into(event, &mut effects);
        }
        let mut work_available = false;
        Ok(effects
            .iter()
            .filter(|effect| {
                !matches!(effect, Effect::WorkAvailable)
                    || !std::mem::replace(&mut work_available, true)
            })
            .map(encode)
            .collect())
    }

    /// The whole state.
    pub fn snapshot(&self) -> Vec<u8> {
        self.master.snapshot()
    }

    /// The next part of the state's snapshot, about `bytes_max` bytes; an
    /// empty part once it is whole, and the next call starts another.
    /// The parts up to the empty one are exactly [`snapshot`]'s bytes;
    /// an [`apply`](Self::apply) in between starts the next part from the
    /// beginning again, of the new state.
    ///
    /// [`snapshot`]: Self::snapshot
    pub fn snapshot_part(&mut self, bytes_max: usize) -> Vec<u8> {
        let part = self.master.snapshot_part(&mut self.part, bytes_max);
        if part.is_empty() {
            self.part = Default::default();
        }
        part
    }

    /// Answers an encoded [`Query`].
    pub fn query(&self, now: Millis, query: &[u8]) -> Result<Vec<u8>, Rejection> {
        let query: Query = decode(query)?;
        Ok(encode(&self.master.query(now, &query)?))
    }

    /// The state machine itself.
    pub fn master(&self) -> &Master {
        &self.master
    }
}
