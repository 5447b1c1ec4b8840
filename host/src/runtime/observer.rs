//! Live notifications from a running job, for whoever started it: the CLI
//! prints them, a worker forwards them to the master.

pub use crate::contract::LineLevel;

/// Receives a running job's log bytes, progress and checkpoints as they
/// happen. Every method has a do-nothing default; implement what you need.
/// Methods are called on the job's thread and must return quickly.
pub trait JobObserver: Send + Sync + std::fmt::Debug {
    /// Bytes appended to the job's log (only bytes that were kept).
    fn log(&self, _bytes: &[u8]) {}

    /// Whether [`log_line`](Self::log_line) is wanted: a job hands its
    /// `log` lines over one by one only to an observer that says so.
    fn wants_lines(&self) -> bool {
        false
    }

    /// One line the job logged through its host's `log` (its bytes also
    /// reach [`log`](Self::log)): masked as the log masks, cut at the room
    /// the job's log had left, and not called once the log is full.
    fn log_line(&self, _level: LineLevel, _message: &str) {}

    /// A progress report, `fraction` already clamped to `[0, 1]`.
    fn progress(&self, _fraction: f32, _message: &str) {}

    /// A new checkpoint, replacing the previous one, and where the attempt
    /// was in its record of calls when it was taken (`None`: the attempt
    /// records nothing).
    fn checkpoint(&self, _state: &[u8], _mark: Option<cohort_master::TapeMark>) {}
}
