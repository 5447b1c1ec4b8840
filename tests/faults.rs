//! Fault tests: a cluster of real `cohort node` processes on loopback,
//! broken in one way or another while clients keep submitting, then checked
//! with the same invariants ([`support::faults`]): every acknowledged job
//! settles exactly once with its own result, and every back-end node's
//! journal ends up a prefix of the newest epoch's.

mod support;

use cohort::client::Node as Api;
use cohort_replication::rng::Rng;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use support::faults::{Burst, check_jobs, check_journals, exclusive, targets};
use support::{Node, converge, cut_off, live, runtime, start, start_with, upload};

const ALL: &str = "back-end,worker,front-end";

/// What every fault test starts with: its turn on the machine, a
/// directory for its nodes, and a runtime for its clients.
fn scenario() -> (
    std::sync::MutexGuard<'static, ()>,
    tempfile::TempDir,
    tokio::runtime::Runtime,
) {
    (exclusive(), tempfile::tempdir().unwrap(), runtime())
}

/// Three back-end nodes, all also workers and front-ends, with the master
/// on n1; returns them and the echo module's digest.
fn three(dir: &tempfile::TempDir, rt: &tokio::runtime::Runtime) -> (Node, Node, Node, String) {
    let n1 = start(dir, "n1", ALL, None);
    let n2 = start(dir, "n2", ALL, Some(&n1));
    let n3 = start(dir, "n3", ALL, Some(&n1));
    let echo = rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(
                node,
                "3 live nodes and voters, the master on n1, 3 workers",
                |c| {
                    live(c).len() == 3
                        && c.master_node == "n1"
                        && c.workers.len() == 3
                        && c.voters.len() == 3
                },
            )
            .await;
        }
        upload(&Api::new(&n2.url), "fixture_echo").await
    });
    (n1, n2, n3, echo)
}

#[test]
fn sigterm_of_the_master_hands_it_over_without_a_failed_request() {
    let (_turn, dir, rt) = scenario();
    let (mut n1, n2, n3, echo) = three(&dir, &rt);
    let clients = [Api::new(&n2.url), Api::new(&n3.url)];
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n2, &n3]), &echo, 4);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 20);
    let terminated = Instant::now();
    let status = n1.terminate();
    assert!(status.success(), "{}", n1.stderr());
    // Submissions flow through n2's master.
    ledger.wait_acked_after(terminated, 20);
    burst.finish(&rt);
    assert_eq!(
        ledger.failed.load(Ordering::Relaxed),
        0,
        "a client request failed during the hand-over: {:?}",
        ledger.first_error.lock().unwrap()
    );
    // n1 has exited: everything it reported is there.
    assert_eq!(
        n1.events("handed_over")
            .iter()
            .map(|e| (e["to"].as_str(), e["epoch"].as_str()))
            .collect::<Vec<_>>(),
        [("n2", "1")],
        "{}",
        n1.stderr()
    );
    n2.wait_event("handover_received", &[("from", "n1"), ("epoch", "1")]);
    rt.block_on(async {
        let cluster = converge(&n2, "the master on n2", |c| c.master_node == "n2").await;
        assert_eq!(cluster.master_epoch, 2);
        check_jobs(&clients[0], &ledger).await;
    });
    assert!(ledger.len() > 20, "submissions flowed: {}", ledger.len());
    // n1 comes back as the youngest node and catches up.
    let n1 = start(&dir, "n1", ALL, Some(&n2));
    check_journals(&[&n1, &n2, &n3]);
}

#[test]
fn sigkill_of_the_master_under_a_burst_loses_no_acknowledged_job() {
    let (_turn, dir, rt) = scenario();
    let (mut n1, n2, n3, echo) = three(&dir, &rt);
    let clients = [Api::new(&n2.url), Api::new(&n3.url)];
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n2, &n3]), &echo, 4);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 50);
    // Every other back-end node keeps a warm standby of the master.
    for node in [&n2, &n3] {
        node.wait_event("standby_ready", &[]);
    }
    let before = ledger.len();
    let killed = Instant::now();
    n1.kill();
    rt.block_on(converge(&n2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    // n2's master started from its standby, not from a replay.
    let hosting = n2.wait_event("hosting", &[("epoch", "2")]);
    assert_ne!(hosting["warm"], "none", "{hosting:?}");
    ledger.wait_acked_after(killed, 20);
    burst.finish(&rt);
    let resumed = ledger
        .first_ack_after(killed)
        .expect("submissions resumed after the crash");
    eprintln!(
        "{before} jobs acknowledged before the crash, {} in all; first acknowledgement {:?} after SIGKILL",
        ledger.len(),
        resumed - killed
    );
    rt.block_on(async {
        check_jobs(&clients[0], &ledger).await;
        // The new master commits on a majority of the three voters: itself
        // and n3, the one other back-end node left.
        let metrics = support::metrics(&clients[0]).await;
        assert!(metrics.contains("cohort_voters 3"), "{metrics}");
        assert!(metrics.contains("cohort_replicas_needed 2"), "{metrics}");
        assert!(metrics.contains("cohort_replicas_healthy 2"), "{metrics}");
        assert!(
            metrics.contains("cohort_replica_behind_entries{node=\"n3\"}"),
            "{metrics}"
        );
    });
    // The crashed node restarts as the youngest and its journal is lined
    // up with the new master's (an uncommitted tail is cut).
    let n1 = start(&dir, "n1", ALL, Some(&n2));
    rt.block_on(converge(&n2, "n1 back as the youngest", |c| {
        live(c) == ["n2", "n3", "n1"] && c.master_node == "n2"
    }));
    check_journals(&[&n1, &n2, &n3]);
}

#[test]
fn a_paused_master_is_superseded_steps_down_and_rejoins_as_the_youngest() {
    let (_turn, dir, rt) = scenario();
    let (n1, n2, n3, echo) = three(&dir, &rt);
    let clients = [Api::new(&n3.url)];
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n3]), &echo, 2);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 10);
    // Paused longer than failure detection: n2 takes over.
    n1.signal("STOP");
    rt.block_on(converge(&n2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    // The new master commits while the old one is still paused.
    ledger.wait_acked_after(Instant::now(), 10);
    n1.signal("CONT");
    // n1's master learns it was superseded: it steps down rather than
    // commit, and n1 rejoins as the youngest node.
    n1.wait_event("superseded", &[("epoch", "1"), ("newer", "2")]);
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "n1 back as the youngest, the master on n2", |c| {
                live(c) == ["n2", "n3", "n1"] && c.master_node == "n2" && c.master_epoch == 2
            })
            .await;
        }
    });
    ledger.wait_acked_after(Instant::now(), 10);
    burst.finish(&rt);
    rt.block_on(check_jobs(&clients[0], &ledger));
    check_journals(&[&n1, &n2, &n3]);
}

/// A submission forwarded to a master that is then paused past failure
/// detection: the front-end gives the silent exchange up once its view
/// names another host, sends the submission again (same request id) to
/// the new master, and the client gets its `202`, not `503
/// outcome_unknown`. One job exists, whatever the old master does with
/// the copy it finds in its socket when it resumes.
#[test]
fn a_submission_forwarded_to_a_paused_master_reaches_the_next_one_once() {
    let (_turn, dir, rt) = scenario();
    let (n1, n2, n3, echo) = three(&dir, &rt);
    let client = Api::new(&n3.url);
    n1.signal("STOP");
    let submitted = rt.spawn({
        let (client, echo) = (client.clone(), echo.clone());
        async move { client.submit(&support::job(&echo, "forwarded once")).await }
    });
    rt.block_on(converge(&n2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    let accepted = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), submitted).await })
        .expect("answered within 30 s")
        .unwrap()
        .expect("202, not outcome_unknown");
    n1.signal("CONT");
    n1.wait_event("superseded", &[("epoch", "1"), ("newer", "2")]);
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "n1 back as the youngest, the master on n2", |c| {
                live(c) == ["n2", "n3", "n1"] && c.master_node == "n2"
            })
            .await;
        }
        let listed = client.jobs(None, 100, None).await.unwrap();
        let ids: Vec<u64> = listed.jobs.iter().map(|j| j.id).collect();
        assert_eq!(ids, [accepted.id], "one submission, one job");
        support::faults::check_job(&client, accepted.id, b"forwarded once").await;
    });
    check_journals(&[&n1, &n2, &n3]);
}

#[test]
fn a_full_cluster_restart_after_sigkill_keeps_every_acknowledged_job() {
    let (_turn, dir, rt) = scenario();
    let (mut n1, mut n2, mut n3, echo) = three(&dir, &rt);
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n2, &n3]), &echo, 4);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 50);
    for node in [&mut n1, &mut n2, &mut n3] {
        node.kill();
    }
    burst.finish(&rt);
    // Back in another order: n3 first. Alone it must not serve a journal
    // that may be stale: it waits for another back-end node.
    let n3 = start(&dir, "n3", ALL, None);
    n3.wait_event("takeover_deferred", &[]);
    let n1 = start(&dir, "n1", ALL, Some(&n3));
    let n2 = start(&dir, "n2", ALL, Some(&n3));
    let client = Api::new(&n1.url);
    rt.block_on(async {
        converge(&n1, "3 live nodes with a master", |c| {
            live(c).len() == 3 && !c.master_node.is_empty()
        })
        .await;
        check_jobs(&client, &ledger).await;
    });
    check_journals(&[&n1, &n2, &n3]);
}

#[test]
fn back_ends_joining_after_compaction_catch_up_from_a_snapshot_and_take_over() {
    let (_turn, dir, rt) = scenario();
    // A small snapshot interval: the lone master compacts its journal long
    // before the others join, so they can only catch up from a snapshot.
    let often = ["--snapshot-every", "40"];
    let mut n1 = start_with(&dir, "n1", ALL, None, &often);
    let echo = rt.block_on(upload(&Api::new(&n1.url), "fixture_echo"));
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n1]), &echo, 2);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 300);
    let n2 = start_with(&dir, "n2", ALL, Some(&n1), &often);
    let n3 = start_with(&dir, "n3", ALL, Some(&n1), &often);
    rt.block_on(converge(&n1, "3 live nodes", |c| live(c).len() == 3));
    // Acknowledged from now on means on a replica too.
    ledger.wait_acked_after(Instant::now(), 300);
    n1.kill();
    rt.block_on(converge(&n2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    // n2 recovered from a snapshot it was sent, not from a full journal:
    // its master did, or the warm standby it started from did.
    let hosting = n2.wait_event("hosting", &[("epoch", "2")]);
    if hosting["warm"] == "none" {
        assert_ne!(hosting["snapshot"], "none", "{hosting:?}");
    } else {
        let ready = n2.events("standby_ready");
        assert!(
            ready.iter().any(|r| r["snapshot"] != "none"),
            "{hosting:?} {ready:?}"
        );
    }
    burst.finish(&rt);
    rt.block_on(check_jobs(&Api::new(&n2.url), &ledger));
    let n1 = start_with(&dir, "n1", ALL, Some(&n2), &often);
    check_journals(&[&n1, &n2, &n3]);
}

/// Asserts that `node` refuses a submission with `replicas_unavailable`.
async fn refuses_unreplicated(node: &Node, module: &str, input: &str) {
    let refused = Api::new(&node.url)
        .submit(&support::job(module, input))
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("replicas_unavailable"), "{refused}");
}

#[test]
fn a_master_cut_off_from_the_others_cannot_commit_and_steps_down_on_healing() {
    let (_turn, dir, rt) = scenario();
    let (n1, n2, n3, echo) = three(&dir, &rt);
    // Clients on both sides of the cut.
    let started = Instant::now();
    let burst = Burst::start(&rt, &targets(&[&n1, &n3]), &echo, 4);
    let ledger = burst.ledger.clone();
    ledger.wait_acked_after(started, 10);
    cut_off(&dir, "n1", &[&n2, &n3]);
    cut_off(&dir, "n2", &[&n1]);
    cut_off(&dir, "n3", &[&n1]);
    rt.block_on(async {
        converge(&n3, "the master on n2", |c| {
            c.master_node == "n2" && c.master_epoch == 2
        })
        .await;
        // n1 still believes it hosts the master, but with no replica it
        // refuses instead of deciding what it could not commit.
        refuses_unreplicated(&n1, &echo, "on the cut-off side").await;
    });
    // The majority side commits while the cut lasts.
    ledger.wait_acked_after(Instant::now(), 10);
    for name in ["n1", "n2", "n3"] {
        cut_off(&dir, name, &[]);
    }
    n1.wait_event("superseded", &[("epoch", "1"), ("newer", "2")]);
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "healed: n1 the youngest, the master on n2", |c| {
                live(c) == ["n2", "n3", "n1"] && c.master_node == "n2"
            })
            .await;
        }
    });
    burst.finish(&rt);
    rt.block_on(check_jobs(&Api::new(&n3.url), &ledger));
    check_journals(&[&n1, &n2, &n3]);
}

/// Five back-end nodes started with default flags: the voter set, not a
/// flag, decides the majority. The master and one other node are cut off
/// from the other three: only the three can commit (a new master among
/// them), the old master's side refuses instead of diverging, and after
/// healing one journal remains, with every acknowledged job exactly once.
#[test]
fn five_back_ends_with_default_flags_survive_a_partition_of_the_master_with_one_node() {
    let (_turn, dir, rt) = scenario();
    let n1 = start(&dir, "n1", ALL, None);
    let others: Vec<Node> = ["n2", "n3", "n4", "n5"]
        .iter()
        .map(|name| start(&dir, name, ALL, Some(&n1)))
        .collect();
    let [n2, n3, n4, n5] = <[Node; 4]>::try_from(others).ok().unwrap();
    let all = [&n1, &n2, &n3, &n4, &n5];
    let echo = rt.block_on(async {
        for node in all {
            converge(node, "5 live nodes, 5 voters, the master on n1", |c| {
                live(c).len() == 5 && c.master_node == "n1" && c.voters.len() == 5
            })
            .await;
        }
        upload(&Api::new(&n3.url), "fixture_echo").await
    });
    // Clients on both sides of the cut to come.
    let burst = Burst::start(&rt, &targets(&[&n1, &n2, &n4, &n5]), &echo, 4);
    let ledger = burst.ledger.clone();
    rt.block_on(ledger.wait_for(50));
    // {n1, n2} | {n3, n4, n5}
    for name in ["n1", "n2"] {
        cut_off(&dir, name, &[&n3, &n4, &n5]);
    }
    for name in ["n3", "n4", "n5"] {
        cut_off(&dir, name, &[&n1, &n2]);
    }
    rt.block_on(async {
        // The three elect a master of their own: a majority of five.
        for node in [&n3, &n4, &n5] {
            converge(node, "a master on the majority side", |c| {
                ["n3", "n4", "n5"].contains(&c.master_node.as_str()) && c.master_epoch >= 2
            })
            .await;
        }
        // Work continues there.
        let before = ledger.len();
        ledger.wait_for(before + 50).await;
        // n1 still believes it hosts the master but cannot reach a
        // majority: it refuses instead of deciding what it cannot commit.
        refuses_unreplicated(&n1, &echo, "on the minority side").await;
    });
    for name in ["n1", "n2", "n3", "n4", "n5"] {
        cut_off(&dir, name, &[]);
    }
    rt.block_on(async {
        // Healed: one master for everyone, never n1 again (it stepped down
        // and rejoined as the youngest; the master then moves to the
        // oldest node, n2).
        for node in all {
            converge(node, "healed: one master, n1 the youngest", |c| {
                live(c) == ["n2", "n3", "n4", "n5", "n1"] && c.master_node == "n2"
            })
            .await;
        }
    });
    burst.finish(&rt);
    rt.block_on(check_jobs(&Api::new(&n4.url), &ledger));
    check_journals(&all);
}

/// Schedules per run, and faults per schedule.
const SCHEDULES: usize = 2;
const FAULTS_PER_SCHEDULE: usize = 3;

/// Runs short random fault schedules (seed from `COHORT_FAULT_SEED`, else
/// the clock; printed either way) against fresh 3-node clusters under a
/// steady burst, and checks the invariants after each. The schedule is
/// drawn from the replication simulator's generator: a printed seed
/// replays the same schedule.
#[test]
fn random_fault_schedules_keep_the_invariants() {
    let _turn = exclusive();
    let seed = std::env::var("COHORT_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("fault schedule seed: {seed} (rerun with COHORT_FAULT_SEED={seed})");
    let mut rng = Rng::new(seed);
    for schedule in 0..SCHEDULES {
        let dir = tempfile::tempdir().unwrap();
        let rt = runtime();
        let (n1, n2, n3, echo) = three(&dir, &rt);
        let mut nodes = [Some(n1), Some(n2), Some(n3)];
        let names = ["n1", "n2", "n3"];
        let running = |nodes: &[Option<Node>; 3]| -> Vec<String> {
            nodes.iter().flatten().map(|n| n.url.clone()).collect()
        };
        let targets = Arc::new(std::sync::Mutex::new(
            running(&nodes)
                .iter()
                .map(|u| Api::new(u))
                .collect::<Vec<_>>(),
        ));
        let burst = Burst::start(&rt, &targets, &echo, 4);
        let ledger = burst.ledger.clone();
        for _ in 0..FAULTS_PER_SCHEDULE {
            // A sleep: the burst runs a random while between faults.
            std::thread::sleep(rng.millis(300, 1000));
            let victim = rng.below(3) as usize;
            let fault = rng.below(3);
            let down = rng.millis(200, 2500);
            eprintln!(
                "schedule {schedule}: {} {} for {down:?}",
                ["kill -9", "SIGTERM", "SIGSTOP"][fault as usize],
                names[victim]
            );
            match fault {
                0 | 1 => {
                    let mut node = nodes[victim].take().unwrap();
                    if fault == 0 {
                        node.kill();
                    } else {
                        assert!(node.terminate().success(), "{}", node.stderr());
                    }
                    drop(node);
                    *targets.lock().unwrap() =
                        running(&nodes).iter().map(|u| Api::new(u)).collect();
                    // A sleep: the node stays down for the drawn time.
                    std::thread::sleep(down);
                    let seed_node = nodes.iter().flatten().next().unwrap();
                    let restarted = start(&dir, names[victim], ALL, Some(seed_node));
                    nodes[victim] = Some(restarted);
                    *targets.lock().unwrap() =
                        running(&nodes).iter().map(|u| Api::new(u)).collect();
                }
                _ => {
                    let node = nodes[victim].as_ref().unwrap();
                    node.signal("STOP");
                    // A sleep: the pause lasts the drawn time.
                    std::thread::sleep(down);
                    node.signal("CONT");
                }
            }
            // Recovered: three live nodes agreeing on one master.
            let any = nodes[(victim + 1) % 3].as_ref().unwrap();
            rt.block_on(converge(any, "3 live nodes agreeing on a master", |c| {
                live(c).len() == 3
                    && !c.master_node.is_empty()
                    && c.nodes
                        .iter()
                        .filter(|n| n.status == "live")
                        .all(|n| n.master_seen == format!("{}@{}", c.master_node, c.master_epoch))
            }));
        }
        burst.finish(&rt);
        let client = Api::new(&nodes[0].as_ref().unwrap().url);
        rt.block_on(check_jobs(&client, &ledger));
        let all: Vec<&Node> = nodes.iter().flatten().collect();
        check_journals(&all);
        eprintln!(
            "schedule {schedule}: {} jobs acknowledged, {} requests refused during faults",
            ledger.len(),
            ledger.failed.load(Ordering::Relaxed)
        );
    }
}
