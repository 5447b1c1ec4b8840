//! The singleton manager: the master runs on exactly one node, the oldest
//! live back-end node, and nowhere else.
//!
//! Every back-end node runs [`run`]. It watches the membership view and,
//! once the view has settled after joining (so a node does not claim the
//! master before it has heard of older nodes), starts the master when this
//! node is the oldest live back-end node that is not leaving, and stops it
//! when it no longer is. A younger node joining never changes who is oldest,
//! so it never moves the master; a restarted node has a new generation and
//! is the youngest. The hosting node publishes `master_epoch` in gossip, so
//! every node's proxy knows where to send master requests.
//!
//! While hosting, the manager also tells the master about worker nodes that
//! membership declared dead, so their attempts are re-queued long before
//! their leases run out. The detector is tuned to find a dead master fast,
//! and a worker whose process merely stalled (a loaded machine compiling a
//! large component) can drop out of the live set for a moment: a worker is
//! reported gone only once it has stayed out for [`WORKER_LOST_AFTER`], so
//! a stall does not cost its jobs an attempt.
//!
//! A hosting node whose master was superseded (a replica refused it for a
//! newer epoch, or gossip shows a master with a newer epoch elsewhere:
//! this node was paused or cut off long enough for another to take over)
//! steps down at once, without a hand-over, and rejoins membership with a
//! new generation, so it is the youngest and the master does not move back
//! to it. A start that cannot happen yet (too few replicas answer) is
//! retried every [`MASTER_START_RETRY`] while this node still should host, and
//! forgotten once it should not: every pass of the manager ends waiting for
//! a change or for an instant still ahead, so a node that hosts nothing
//! idles.
//!
//! The decision itself is [`should_host`], a pure function of the view; the
//! master is behind the [`Host`] trait, so both are unit-tested with the
//! in-memory membership twin.
//!
//! [`WORKER_LOST_AFTER`]: crate::limits::WORKER_LOST_AFTER
//! [`MASTER_START_RETRY`]: crate::limits::MASTER_START_RETRY

use crate::limits::{MASTER_START_RETRY, REJOIN_SETTLE, WORKER_LOST_AFTER};
use crate::membership::{Membership, View, keys};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Whether this node (`view.me`) should host the master.
pub fn should_host(view: &View, settled: bool) -> bool {
    settled
        && view
            .oldest_back_end()
            .is_some_and(|oldest| oldest.node_id == view.me)
}

/// The master as the manager drives it.
pub trait Host: Send {
    /// Starts the master; `live_workers` are alive now (their attempts are
    /// kept). Returns its epoch, or `None` if it cannot start yet.
    fn start(
        &mut self,
        live_workers: Vec<String>,
    ) -> impl std::future::Future<Output = anyhow::Result<Option<u64>>> + Send;
    /// Stops the master (flushing it, and handing it over to the node that
    /// should host it next).
    fn stop(&mut self) -> impl std::future::Future<Output = ()> + Send;
    /// Stops a superseded master: no hand-over, nothing more committed.
    fn step_down(&mut self) -> impl std::future::Future<Output = ()> + Send;
    /// Tells the master these workers are gone.
    fn workers_gone(
        &mut self,
        workers: Vec<String>,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// The workers alive in `view`: this node's own among them (it runs as long
/// as this process does). Leaving it out would have a master taking over
/// here report it gone, failing the attempts it is running as
/// `worker_lost` while they run on, and send their recorded calls again.
fn live_workers(view: &View) -> BTreeSet<String> {
    view.members
        .iter()
        .filter(|m| m.roles.worker)
        .map(|m| m.node_id.clone())
        .collect()
}

/// Runs the manager until `stop` turns true (then stops a hosted master).
/// Fails if the master cannot start (for example a corrupt journal).
///
/// `departed` names nodes, by id and generation, known to be leaving before
/// gossip says so (they handed the master over to this node). `deposed`
/// carries the newest epoch known to have superseded this node's master.
pub async fn run<H: Host>(
    membership: &Membership,
    host: &mut H,
    settle: Duration,
    mut departed: watch::Receiver<BTreeSet<(String, u64)>>,
    mut deposed: watch::Receiver<u64>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let mut views = membership.view();
    let mut settled_at = Instant::now() + settle;
    let mut hosting: Option<u64> = None;
    let mut retry_at: Option<Instant> = None;
    let mut workers = BTreeSet::new();
    // Workers out of the live set while this node hosts, since when.
    let mut suspects: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let (view, handed_over) = view_with_departures(&mut views, &mut departed);
        // A hand-over means the old host chose this node: no need to wait
        // for the view to settle.
        let settled = handed_over || Instant::now() >= settled_at;
        let should = should_host(&view, settled);
        let alive = live_workers(&view);
        let superseded = hosting.and_then(|epoch| superseding_epoch(&view, epoch, &mut deposed));
        if !should || hosting.is_some() {
            // A retry only means something while this node should start the
            // master and has not: kept past that, its instant (now in the
            // past) would make the wait below return at once, forever.
            retry_at = None;
        }
        let retry_due = retry_at.is_none_or(|at| Instant::now() >= at);
        if let Some(newer) = superseded {
            step_down(membership, host, hosting.unwrap_or(0), newer).await?;
            hosting = None;
            settled_at = Instant::now() + REJOIN_SETTLE;
            continue;
        } else if should && hosting.is_none() && retry_due {
            match start_hosting(membership, host, &alive).await? {
                Some(epoch) => {
                    hosting = Some(epoch);
                    retry_at = None;
                }
                None => retry_at = Some(Instant::now() + MASTER_START_RETRY),
            }
        } else if !should && hosting.is_some() && settled {
            stop_hosting(membership, host).await;
            hosting = None;
        } else if hosting.is_some() {
            let gone = lost_workers(&mut suspects, &workers, &alive, Instant::now());
            if !gone.is_empty() {
                host.workers_gone(gone).await;
            }
        }
        if hosting.is_none() {
            suspects.clear();
        }
        workers = alive;
        // Every pass ends waiting for something new: a change (`changed`
        // marks it seen; a closed channel disables its branch), or an
        // instant the next pass acts on and then drops.
        let wake_at = earliest_wake((!settled).then_some(settled_at), retry_at, &suspects);
        tokio::select! {
            changed = views.changed() => if changed.is_err() { break },
            Ok(()) = departed.changed() => {}
            Ok(()) = deposed.changed() => {}
            _ = tokio::time::sleep_until(wake_at.unwrap_or(settled_at)), if wake_at.is_some() => {}
            _ = stop.changed() => break,
        }
    }
    if hosting.is_some() {
        stop_hosting(membership, host).await;
    }
    Ok(())
}

/// The newest view, with the members known to be departing marked as
/// leaving; and whether any is (a hand-over to this node).
fn view_with_departures(
    views: &mut watch::Receiver<View>,
    departed: &mut watch::Receiver<BTreeSet<(String, u64)>>,
) -> (View, bool) {
    let mut view = views.borrow_and_update().clone();
    let departed = departed.borrow_and_update();
    for member in &mut view.members {
        if departed.contains(&(member.node_id.clone(), member.generation)) {
            member.leaving = true;
        }
    }
    (view, !departed.is_empty())
}

/// A newer epoch than `epoch`, this node's master's, if one superseded it:
/// advertised in gossip by another node, or reported by a replica that
/// refused this one.
fn superseding_epoch(view: &View, epoch: u64, deposed: &mut watch::Receiver<u64>) -> Option<u64> {
    let newer_elsewhere = view
        .master_host()
        .filter(|m| m.node_id != view.me)
        .and_then(|m| m.master_epoch)
        .filter(|&other| other > epoch);
    let refused = Some(*deposed.borrow_and_update()).filter(|&other| other > epoch);
    newer_elsewhere.max(refused)
}

/// Stops a superseded master and rejoins membership as the youngest node.
async fn step_down<H: Host>(
    membership: &Membership,
    host: &mut H,
    epoch: u64,
    newer: u64,
) -> anyhow::Result<()> {
    crate::events::emit!(
        warn,
        crate::events::SUPERSEDED,
        epoch,
        newer,
        "this node's master was superseded: stepping down and rejoining as the youngest node"
    );
    host.step_down().await;
    // The old identity keeps advertising its old epoch until it is
    // declared dead, so nobody mistakes it for a master-less oldest node;
    // the new one advertises nothing.
    membership.rejoin().await?;
    Ok(())
}

/// Starts the master and advertises its epoch; `None` if it cannot start
/// yet.
async fn start_hosting<H: Host>(
    membership: &Membership,
    host: &mut H,
    alive: &BTreeSet<String>,
) -> anyhow::Result<Option<u64>> {
    let started = host.start(alive.iter().cloned().collect()).await?;
    if let Some(epoch) = started {
        membership
            .publish(keys::MASTER_EPOCH, Some(&epoch.to_string()))
            .await;
    }
    Ok(started)
}

/// Stops the master and stops advertising it.
async fn stop_hosting<H: Host>(membership: &Membership, host: &mut H) {
    // Stop (and hand over) before un-advertising, so the next host waits
    // for the hand-over instead of starting without it.
    host.stop().await;
    membership.publish(keys::MASTER_EPOCH, None).await;
}

/// The earliest instant a pass has something to do without news: the view
/// settled, a start is due again, a worker has been out long enough.
fn earliest_wake(
    settle_at: Option<Instant>,
    retry_at: Option<Instant>,
    suspects: &BTreeMap<String, Instant>,
) -> Option<Instant> {
    let lost_at = suspects
        .values()
        .min()
        .map(|since| *since + WORKER_LOST_AFTER);
    [settle_at, retry_at, lost_at].into_iter().flatten().min()
}

/// Notes the workers that left the live set since the last pass, forgets
/// those back in it, and takes out those gone for [`WORKER_LOST_AFTER`].
fn lost_workers(
    suspects: &mut BTreeMap<String, Instant>,
    workers: &BTreeSet<String>,
    alive: &BTreeSet<String>,
    now: Instant,
) -> Vec<String> {
    for worker in workers.difference(alive) {
        suspects.entry(worker.clone()).or_insert(now);
    }
    suspects.retain(|worker, _| !alive.contains(worker));
    suspects
        .extract_if(.., |_, since| now >= *since + WORKER_LOST_AFTER)
        .map(|(worker, _)| worker)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::MemCluster;
    use crate::membership::tests::member;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    /// Records what the manager asks; its starts are refused (as when too
    /// few replicas answer) once told to.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<String>>>, Arc<AtomicBool>);

    impl Recorder {
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut self.0.lock().unwrap())
        }

        fn refuse_starts(&self) {
            self.1.store(true, Ordering::Relaxed);
        }
    }

    impl Host for Recorder {
        async fn start(&mut self, live: Vec<String>) -> anyhow::Result<Option<u64>> {
            if self.1.load(Ordering::Relaxed) {
                self.0
                    .lock()
                    .unwrap()
                    .push(format!("refused start {live:?}"));
                return Ok(None);
            }
            self.0.lock().unwrap().push(format!("start {live:?}"));
            Ok(Some(1))
        }
        async fn stop(&mut self) {
            self.0.lock().unwrap().push("stop".into());
        }
        async fn step_down(&mut self) {
            self.0.lock().unwrap().push("step down".into());
        }
        async fn workers_gone(&mut self, workers: Vec<String>) {
            self.0.lock().unwrap().push(format!("gone {workers:?}"));
        }
    }

    /// Lets the managers react to a membership change.
    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    struct Node {
        log: Recorder,
        stop: watch::Sender<bool>,
        /// What this node's replica says about newer masters.
        deposed: watch::Sender<u64>,
        task: tokio::task::JoinHandle<anyhow::Result<()>>,
    }

    fn spawn(cluster: &Arc<MemCluster>, id: &str, generation: u64, roles: &str) -> Node {
        let membership = cluster.join(member(id, generation, roles));
        let log = Recorder::default();
        let (stop, stopped) = watch::channel(false);
        let (deposed_tx, deposed) = watch::channel(0);
        let mut host = log.clone();
        let task = tokio::spawn(async move {
            let (_hints, departed) = watch::channel(BTreeSet::new());
            run(
                &membership,
                &mut host,
                Duration::ZERO,
                departed,
                deposed,
                stopped,
            )
            .await
        });
        Node {
            log,
            stop,
            deposed: deposed_tx,
            task,
        }
    }

    /// Runs `test` on a paused clock, in a thread of its own bounded by the
    /// wall clock. A paused clock moves on only while every task waits, so
    /// a manager that never waits keeps the test's sleeps from ending, and
    /// the wall-clock bound catches it.
    fn on_paused_clock<F: std::future::Future<Output = ()>>(
        test: impl FnOnce() -> F + Send + 'static,
    ) {
        let (done, finished) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .unwrap()
                .block_on(test());
            let _ = done.send(());
        });
        match finished.recv_timeout(Duration::from_secs(10)) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("the clock never reached the test's end: a task kept the runtime busy")
            }
            _ => {
                if let Err(panic) = thread.join() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }

    #[tokio::test]
    async fn the_oldest_back_end_hosts_and_a_younger_joiner_does_not_move_it() {
        let cluster = MemCluster::new();
        let a = spawn(&cluster, "a", 10, "back-end,worker");
        settle().await;
        // Its own worker is alive: its attempts are kept.
        assert_eq!(a.log.take(), ["start [\"a\"]"]);
        let b = spawn(&cluster, "b", 20, "back-end,worker");
        let w = spawn(&cluster, "w", 5, "worker,front-end");
        settle().await;
        assert!(a.log.take().is_empty(), "the master stays on a");
        assert!(b.log.take().is_empty(), "b is younger");
        assert!(w.log.take().is_empty(), "w is older but not a back-end");
        // The hosting node's view shows itself as master host.
        assert_eq!(
            cluster
                .join(member("x", 99, "front-end"))
                .view()
                .borrow()
                .master_host()
                .unwrap()
                .node_id,
            "a"
        );
        drop((b, w));
    }

    #[tokio::test]
    async fn an_older_generation_back_end_takes_the_role_and_a_restart_is_youngest() {
        let cluster = MemCluster::new();
        let b = spawn(&cluster, "b", 20, "back-end");
        settle().await;
        assert_eq!(b.log.take(), ["start []"]);
        // A node that started earlier but joined later is older: it hosts.
        let a = spawn(&cluster, "a", 10, "back-end");
        settle().await;
        assert_eq!(a.log.take(), ["start []"]);
        assert_eq!(b.log.take(), ["stop"]);
        // a restarts: new generation, the youngest; b is oldest again.
        cluster.remove("a");
        let a2 = spawn(&cluster, "a", 30, "back-end");
        settle().await;
        assert_eq!(b.log.take(), ["start []"]);
        assert!(a2.log.take().is_empty());
        drop(a);
    }

    #[tokio::test]
    async fn death_or_leave_of_the_host_moves_the_role_to_the_next_oldest() {
        let cluster = MemCluster::new();
        let a = spawn(&cluster, "a", 1, "back-end");
        let b = spawn(&cluster, "b", 2, "back-end");
        settle().await;
        assert_eq!(a.log.take(), ["start []"]);
        cluster.remove("a");
        settle().await;
        assert_eq!(b.log.take(), ["start []"]);
        // b leaves gracefully: its own manager stops the master.
        let c = spawn(&cluster, "c", 3, "back-end");
        settle().await;
        b.stop.send(true).unwrap();
        b.task.await.unwrap().unwrap();
        assert_eq!(b.log.take(), ["stop"]);
        cluster.remove("b");
        settle().await;
        assert_eq!(c.log.take(), ["start []"]);
    }

    #[test]
    fn workers_out_of_the_live_set_for_long_enough_are_reported_gone() {
        on_paused_clock(|| async {
            let cluster = MemCluster::new();
            let w1 = spawn(&cluster, "w1", 1, "worker");
            let a = spawn(&cluster, "a", 2, "back-end,worker");
            settle().await;
            assert_eq!(a.log.take(), ["start [\"a\", \"w1\"]"]);
            let _w2 = spawn(&cluster, "w2", 3, "worker");
            settle().await;
            cluster.remove("w1");
            settle().await;
            tokio::time::sleep(WORKER_LOST_AFTER - Duration::from_millis(1)).await;
            assert_eq!(a.log.take(), Vec::<String>::new(), "not yet");
            tokio::time::sleep(Duration::from_millis(2)).await;
            assert_eq!(a.log.take(), ["gone [\"w1\"]"]);
            drop(w1);
        });
    }

    #[test]
    fn a_worker_back_in_the_live_set_in_time_keeps_its_attempts() {
        on_paused_clock(|| async {
            let cluster = MemCluster::new();
            let _w1 = spawn(&cluster, "w1", 1, "worker");
            let a = spawn(&cluster, "a", 2, "back-end");
            settle().await;
            assert_eq!(a.log.take(), ["start [\"w1\"]"]);
            // A stall: w1 drops out and comes back with the same generation.
            cluster.remove("w1");
            settle().await;
            tokio::time::sleep(WORKER_LOST_AFTER / 2).await;
            let _back = cluster.join(member("w1", 1, "worker"));
            settle().await;
            tokio::time::sleep(WORKER_LOST_AFTER * 2).await;
            assert_eq!(a.log.take(), Vec::<String>::new());
            // Out again: the time counts from the new departure.
            cluster.remove("w1");
            settle().await;
            tokio::time::sleep(WORKER_LOST_AFTER + Duration::from_millis(1)).await;
            assert_eq!(a.log.take(), ["gone [\"w1\"]"]);
        });
    }

    #[tokio::test]
    async fn a_superseded_master_steps_down_and_rejoins_as_the_youngest() {
        let cluster = MemCluster::new();
        let a = spawn(&cluster, "a", 1, "back-end");
        let b = spawn(&cluster, "b", 2, "back-end");
        settle().await;
        assert_eq!(a.log.take(), ["start []"]);
        // b took over while a was cut off, and advertises a newer epoch.
        let b_membership = cluster.join(member("b", 2, "back-end"));
        b_membership.publish(keys::MASTER_EPOCH, Some("7")).await;
        settle().await;
        assert_eq!(a.log.take(), ["step down"]);
        let view = b_membership.view().borrow().clone();
        let a_now = view.member("a").unwrap();
        assert!(a_now.generation > 2, "a rejoined younger than b");
        assert_eq!(a_now.master_epoch, None);
        assert_eq!(view.oldest_back_end().unwrap().node_id, "b");
        drop(b);
    }

    #[test]
    fn a_refused_start_ends_waiting_once_another_node_should_host() {
        on_paused_clock(|| async {
            let cluster = MemCluster::new();
            let a = spawn(&cluster, "a", 20, "back-end");
            a.log.refuse_starts();
            settle().await;
            assert_eq!(a.log.take(), ["refused start []"]);
            // An older node shows up before the retry is due: it hosts.
            let b = spawn(&cluster, "b", 10, "back-end");
            settle().await;
            assert_eq!(b.log.take(), ["start []"]);
            // Long past the retry a is no longer due: it waits, idle.
            tokio::time::sleep(MASTER_START_RETRY * 10).await;
            assert!(a.log.take().is_empty());
            drop((a, b));
        });
    }

    #[test]
    fn a_refused_start_is_retried_after_a_pause() {
        on_paused_clock(|| async {
            let cluster = MemCluster::new();
            let a = spawn(&cluster, "a", 20, "back-end");
            a.log.refuse_starts();
            tokio::time::sleep(MASTER_START_RETRY * 5 / 2).await;
            assert_eq!(a.log.take(), ["refused start []"; 3]);
            drop(a);
        });
    }

    #[test]
    fn news_of_a_newer_master_on_a_node_not_hosting_is_waited_past() {
        on_paused_clock(|| async {
            let cluster = MemCluster::new();
            let b = spawn(&cluster, "b", 10, "back-end");
            let a = spawn(&cluster, "a", 20, "back-end");
            settle().await;
            assert_eq!(b.log.take(), ["start []"]);
            // a's replica hears of a newer master while a hosts nothing.
            a.deposed.send_replace(5);
            tokio::time::sleep(MASTER_START_RETRY * 10).await;
            assert!(a.log.take().is_empty());
            drop((a, b));
        });
    }

    #[test]
    fn a_member_advertising_an_old_epoch_is_not_where_the_master_belongs() {
        let cluster = MemCluster::new();
        let a = cluster.join(member("a", 1, "back-end"));
        let _b = cluster.join(member("b", 2, "back-end"));
        cluster.publish("a", keys::MASTER_EPOCH, Some("3"));
        cluster.publish("b", keys::MASTER_EPOCH, Some("4"));
        let view = a.view().borrow().clone();
        assert_eq!(view.oldest_back_end().unwrap().node_id, "b");
        assert_eq!(view.master_host().unwrap().node_id, "b");
    }

    #[test]
    fn nothing_is_decided_before_the_view_settles() {
        let cluster = MemCluster::new();
        let membership = cluster.join(member("a", 1, "back-end"));
        let view = membership.view().borrow().clone();
        assert!(!should_host(&view, false));
        assert!(should_host(&view, true));
    }
}
