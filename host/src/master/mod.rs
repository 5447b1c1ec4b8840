//! The master, host side: runs the master component (`host/master`) on the
//! node that hosts it, journals its events and serves its callers.
//!
//! * [`core`] — the component (or the same logic linked natively) behind
//!   one byte-level interface.
//! * [`store`] — journal segments and snapshots on disk; recovery.
//! * [`service`] — the master thread and the group-committing writer; the
//!   [`MasterHandle`] every caller uses.
//! * [`replicate`] — sends the journal to the other back-end nodes and
//!   releases replies once enough of them hold it.

mod bindings;
pub mod core;
pub mod replicate;
pub mod service;
pub mod store;

pub use self::core::CoreKind;
pub use service::{MasterError, MasterHandle, MasterOptions, RecoveryReport, now_ms, start};
