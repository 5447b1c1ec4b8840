//! CPU time an attempt used, metered where it runs.
//!
//! An attempt runs as one future (instantiation, then the job's `run`),
//! polled by whichever runtime thread is free; wasmtime runs its Wasm on
//! that thread, switching to the instance's own stack for the poll. So the
//! attempt's CPU time is the sum, over the polls of its future, of the
//! polling thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`) after the poll
//! less before it: the Wasm it ran and the host calls it made inline,
//! never the node's other work on that thread between polls, nor the time
//! it waited (a sleep, an outbound call in flight). Work a host call hands
//! to another thread (a blob read on the blocking pool, an outbound
//! request's connection) is the node's, not counted.
//!
//! Reading that clock is a system call (Linux has no vDSO for it), and
//! reading it around every poll made an empty job measurably slower
//! (BENCHMARKS.md, "cost-accounting"). So an attempt's first
//! [`PRECISE_AFTER`] of polls is
//! timed with the monotonic clock instead (read without a system call),
//! which for a poll that only computes is the same figure, and the
//! thread's CPU clock takes over once the attempt has been charged that
//! much: a job of microseconds pays nothing measurable, and a long one,
//! whose polls last up to an epoch tick each, pays two system calls a
//! poll for a count that leaves out whatever preempted or blocked its
//! thread. A poll that blocks its thread in a host call during the first
//! millisecond is charged that wait (bounded by the millisecond and a
//! poll).
//!
//! A job in process isolation is metered the same way inside its sandbox
//! process, which reports the total with its outcome; an attempt whose
//! sandbox process is killed (at its deadline) or fails before it
//! reports is charged what the kernel says the process used since its
//! last report ([`process_cpu`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How much of an attempt is timed by the monotonic clock around its
/// polls before its thread's CPU clock takes over (see the module's
/// notes).
pub(crate) const PRECISE_AFTER: Duration = Duration::from_millis(1);

/// The CPU time the calling thread has used so far (zero if the clock
/// cannot be read, which Linux does not do for this clock).
pub(crate) fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the call to fill in.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
        return Duration::ZERO;
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0);
    Duration::new(secs, nanos.min(999_999_999))
}

/// The CPU time process `pid` has used so far, all its threads, user and
/// system, as the kernel counts it (`/proc/PID/stat`, in clock ticks of
/// 10 ms on Linux): `None` if it cannot be read.
pub(crate) fn process_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name, in parentheses, may hold spaces: fields are
    // counted after its closing one (the state is the first, `utime` the
    // twelfth, `stime` the thirteenth).
    let mut fields = stat.get(stat.rfind(')')? + 1..)?.split_whitespace();
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks = u64::try_from(ticks).ok().filter(|t| *t > 0)?;
    let total = utime.checked_add(stime)?;
    Some(Duration::from_micros(total.checked_mul(1_000_000)? / ticks))
}

/// The CPU time this process has used so far, all its threads, user and
/// system (`getrusage`, one system call; zero if it fails, which it does
/// not for this process).
pub(crate) fn own_process_cpu() -> Duration {
    // SAFETY: an all-zero rusage is valid; getrusage writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let micros = |t: libc::timeval| {
        let secs = u64::try_from(t.tv_sec).unwrap_or(0);
        let micros = u64::try_from(t.tv_usec).unwrap_or(0);
        Duration::from_secs(secs) + Duration::from_micros(micros)
    };
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

/// `future`, adding the CPU time of each of its polls to `cpu` (which
/// keeps what was counted even if the future is dropped before it ends,
/// as a timeout drops it).
pub(crate) struct Metered<'a, F> {
    future: Pin<&'a mut F>,
    cpu: &'a mut Duration,
}

impl<'a, F: Future> Metered<'a, F> {
    pub(crate) fn new(future: Pin<&'a mut F>, cpu: &'a mut Duration) -> Self {
        Self { future, cpu }
    }
}

impl<F: Future> Future for Metered<'_, F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Both fields are `Unpin` (a pinned reference and a reference).
        let this = self.get_mut();
        if *this.cpu < PRECISE_AFTER {
            let before = Instant::now();
            let polled = this.future.as_mut().poll(cx);
            *this.cpu += before.elapsed();
            return polled;
        }
        let before = thread_cpu();
        let polled = this.future.as_mut().poll(cx);
        *this.cpu += thread_cpu().saturating_sub(before);
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Busy for at least `wall` of the thread's own CPU time.
    fn spin(wall: Duration) {
        let start = thread_cpu();
        while thread_cpu() - start < wall {
            std::hint::black_box(0u64);
        }
    }

    #[test]
    fn a_future_is_charged_for_its_polls_and_not_for_the_time_between() {
        let mut cpu = Duration::ZERO;
        let mut polls = 0;
        let mut future = std::pin::pin!(std::future::poll_fn(|cx| {
            polls += 1;
            spin(Duration::from_millis(20));
            if polls < 3 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(polls)
        }));
        let mut metered = std::pin::pin!(Metered::new(future.as_mut(), &mut cpu));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut ready = None;
        while ready.is_none() {
            if let Poll::Ready(n) = metered.as_mut().poll(&mut cx) {
                ready = Some(n);
            }
            // The thread's own work between polls: not the future's.
            spin(Duration::from_millis(30));
        }
        assert_eq!(ready, Some(3));
        assert!(cpu >= Duration::from_millis(60), "{cpu:?}");
        assert!(
            cpu < Duration::from_millis(90),
            "{cpu:?}: no time between polls"
        );
    }

    /// A poll that blocks its thread (no CPU) for `wait`, `polls` times,
    /// metered: the time charged.
    fn charged_for_blocking(wait: Duration, polls: u32, start_at: Duration) -> Duration {
        let mut cpu = start_at;
        let mut left = polls;
        let mut future = std::pin::pin!(std::future::poll_fn(|cx| {
            std::thread::sleep(wait);
            left -= 1;
            if left > 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(())
        }));
        let mut metered = std::pin::pin!(Metered::new(future.as_mut(), &mut cpu));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        while metered.as_mut().poll(&mut cx).is_pending() {}
        cpu - start_at
    }

    #[test]
    fn the_first_millisecond_is_timed_then_the_thread_clock_counts() {
        // Fresh: the first poll's wait is charged (the monotonic clock),
        // then the CPU clock takes over and charges the next nothing.
        let charged = charged_for_blocking(Duration::from_millis(5), 3, Duration::ZERO);
        assert!(charged >= Duration::from_millis(5), "{charged:?}");
        assert!(
            charged < Duration::from_millis(9),
            "{charged:?}: only the first poll's wait"
        );
        // Past the first millisecond, waits are never charged.
        let charged = charged_for_blocking(Duration::from_millis(5), 3, PRECISE_AFTER);
        assert!(charged < Duration::from_millis(3), "{charged:?}");
    }

    #[test]
    fn a_process_cpu_is_read_from_the_kernel() {
        let before = process_cpu(std::process::id()).expect("this process's stat reads");
        spin(Duration::from_millis(50));
        let after = process_cpu(std::process::id()).expect("reads");
        // Ticks of 10 ms: at least 30 ms of the 50 show.
        assert!(
            after >= before + Duration::from_millis(30),
            "{before:?} then {after:?}"
        );
        assert_eq!(process_cpu(u32::MAX), None, "no such process");
        // The process's own count agrees, to a tick.
        let own = own_process_cpu();
        let kernel = process_cpu(std::process::id()).expect("reads");
        assert!(
            own + Duration::from_millis(20) >= kernel,
            "{own:?} against {kernel:?}"
        );
    }

    #[test]
    fn the_thread_clock_only_moves_forward() {
        let before = thread_cpu();
        spin(Duration::from_millis(1));
        assert!(thread_cpu() > before);
    }
}
