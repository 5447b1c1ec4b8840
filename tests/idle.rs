//! Resource use after a fault: once a cluster has converged again, no
//! node keeps a core busy. Each test crashes a node (SIGKILL) and restarts
//! it with the same data directory, cut off from the others, so that it
//! finds itself the only back-end node and tries to take the master over:
//! refused, since its journal has been replicated and it needs another
//! back-end node to take part. Then it heals the cut, waits until every
//! node agrees on the cluster (the master stays where it was: the refused
//! attempt disturbed nothing), and measures each process's CPU time
//! (`/proc/<pid>/stat`) over a window.
//!
//! The restarted node used to keep one thread at 100% from the moment its
//! retry fell due, for as long as it ran.

mod support;

use support::faults::exclusive;
use support::{Node, assert_idle, converge, cut_off, live, runtime, start};

const ALL: &str = "back-end,worker,front-end";

/// The event a restarted node reports when its take-over is refused.
const REFUSED: &str = "takeover_deferred";

/// Three back-end nodes, all also workers and front-ends, with the master
/// on n1.
fn three(dir: &tempfile::TempDir, rt: &tokio::runtime::Runtime) -> (Node, Node, Node) {
    let n1 = start(dir, "n1", ALL, None);
    let n2 = start(dir, "n2", ALL, Some(&n1));
    let n3 = start(dir, "n3", ALL, Some(&n1));
    rt.block_on(async {
        for node in [&n1, &n2, &n3] {
            converge(node, "3 live nodes and voters, the master on n1", |c| {
                live(c).len() == 3 && c.master_node == "n1" && c.voters.len() == 3
            })
            .await;
        }
    });
    (n1, n2, n3)
}

/// Waits until every node sees `order` live and the master on `master`,
/// and every live node publishes that belief.
fn converged(rt: &tokio::runtime::Runtime, nodes: &[&Node], order: &[&str], master: &str) {
    rt.block_on(async {
        for node in nodes {
            converge(
                node,
                &format!("{order:?} live, the master on {master}"),
                |c| {
                    live(c) == order
                        && c.master_node == master
                        && c.nodes
                            .iter()
                            .filter(|n| n.status == "live")
                            .all(|n| n.master_seen == format!("{master}@{}", c.master_epoch))
                },
            )
            .await;
        }
    });
}

/// Restarts the killed node `name` cut off from `others` (joining through
/// `seed`), waits for its refused take-over, then heals the cut.
fn restart_refused(dir: &tempfile::TempDir, name: &str, others: &[&Node], seed: &Node) -> Node {
    cut_off(dir, name, others);
    let node = start(dir, name, ALL, Some(seed));
    node.wait_event(REFUSED, &[]);
    cut_off(dir, name, &[]);
    node
}

#[test]
fn a_restarted_back_end_whose_take_over_was_refused_idles() {
    let _turn = exclusive();
    let (dir, rt) = (tempfile::tempdir().unwrap(), runtime());
    let (n1, n2, mut n3) = three(&dir, &rt);
    n3.kill();
    let n3 = restart_refused(&dir, "n3", &[&n1, &n2], &n1);
    converged(&rt, &[&n1, &n2, &n3], &["n1", "n2", "n3"], "n1");
    assert_idle(&[&n1, &n2, &n3]);
}

#[test]
fn a_restarted_master_node_whose_take_over_was_refused_idles() {
    let _turn = exclusive();
    let (dir, rt) = (tempfile::tempdir().unwrap(), runtime());
    let (mut n1, n2, n3) = three(&dir, &rt);
    n1.kill();
    rt.block_on(converge(&n2, "the master on n2", |c| {
        c.master_node == "n2" && c.master_epoch == 2
    }));
    let n1 = restart_refused(&dir, "n1", &[&n2, &n3], &n2);
    converged(&rt, &[&n1, &n2, &n3], &["n2", "n3", "n1"], "n2");
    assert_idle(&[&n1, &n2, &n3]);
}
