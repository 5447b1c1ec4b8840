//! DAGs: jobs that wait for other jobs.
//!
//! A `SubmitDag` is decided all or nothing: its graph is checked (parents
//! in range or existing and not failed, no cycle, bounds), then one
//! decision holds a `Submitted` event per job and a `DagCreated` event
//! with the edges, so replicas and later masters see the whole DAG or
//! none of it. Applying `DagCreated` takes every job with an unfinished
//! parent out of the ready queue and counts its unfinished parents
//! (`Dags::waiting`).
//!
//! # Release and failure
//!
//! Every job's end goes through one place (`Master::settle`). A parent
//! that succeeded lowers each child's count; a child at zero joins the
//! ready queue. A parent that ended otherwise (failed, dead, cancelled)
//! applies its child's DAG policy: `skip_descendants` cancels the child
//! (error `parent_failed`), and so, in turn, its descendants, while the
//! other branches run on; `cancel_dag` cancels every unfinished job of
//! the DAG (error `dag_cancelled`), as does any failure inside a DAG with
//! that policy. The cascade runs on a work list, never recursion, so a
//! chain of 10,000 jobs costs no stack. A job retried (bulk retry) whose
//! parents have not all succeeded waits for them again.
//!
//! # Outputs
//!
//! A child submitted with `outputs` receives, instead of its input alone,
//! a JSON document built when its attempt is assigned:
//! `{"input": S, "parents": [{"id", "name", "output": S}]}`, where each
//! `S` is a string when the bytes are UTF-8 and `{"base64": "..."}`
//! otherwise, and `output` is `null` when the parent's record is gone.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::protocol::*;

/// Most jobs in one DAG.
pub const DAG_JOBS_MAX: usize = 10_000;
/// Most parents of one job.
pub const PARENTS_MAX: usize = 100;
/// Most edges in one DAG.
pub const EDGES_MAX: usize = 100_000;
/// Most input bytes of all a DAG's jobs together.
pub const DAG_INPUT_BYTES_MAX: u64 = 16 << 20;
/// Longest name of a DAG's job, in bytes.
pub const NODE_NAME_BYTES_MAX: usize = 128;

/// The DAGs: state (kept in snapshots) but for `children`, an index
/// rebuilt from `nodes`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Dags {
    pub(crate) next: DagId,
    pub(crate) dags: BTreeMap<DagId, Dag>,
    /// Every job of a DAG.
    pub(crate) nodes: BTreeMap<JobId, Node>,
    /// Queued jobs that wait for parents: how many have not succeeded.
    pub(crate) waiting: BTreeMap<JobId, u32>,
    /// DAGs by idempotency key.
    pub(crate) keys: BTreeMap<String, DagId>,
    /// Jobs other jobs wait for: their children.
    #[serde(skip)]
    pub(crate) children: BTreeMap<JobId, Vec<JobId>>,
}

/// One DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Dag {
    pub(crate) on_failure: OnFailure,
    pub(crate) created_at: Millis,
    pub(crate) jobs: Vec<JobId>,
    /// Its jobs not yet purged; the DAG is forgotten at zero.
    pub(crate) left: u64,
    pub(crate) key: Option<String>,
}

/// A DAG's job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Node {
    pub(crate) dag: DagId,
    pub(crate) name: String,
    pub(crate) parents: Vec<JobId>,
    pub(crate) outputs: bool,
}

impl Dags {
    /// Rebuilds `children` from `nodes`.
    pub(crate) fn rebuild(&mut self) {
        self.children.clear();
        for (&id, node) in &self.nodes {
            for &parent in &node.parents {
                self.children.entry(parent).or_default().push(id);
            }
        }
    }
}

/// Checks a DAG's shape (not its jobs' specs): names, edges in range, no
/// cycle, bounds. Parents that are existing jobs are checked by the
/// caller, which knows them.
pub(crate) fn validate_shape(spec: &DagSpec) -> Result<(), Rejection> {
    let refuse = |message: String| Err(Rejection::new(codes::INVALID_DAG, message));
    let n = spec.nodes.len();
    if n == 0 || n > DAG_JOBS_MAX {
        return refuse(format!("jobs: 1 to {DAG_JOBS_MAX} per DAG"));
    }
    let mut names = BTreeMap::new();
    let mut edges = 0usize;
    let mut input = 0u64;
    for (i, node) in spec.nodes.iter().enumerate() {
        if node.name.is_empty() || node.name.len() > NODE_NAME_BYTES_MAX {
            return refuse(format!("jobs[{i}].name: 1 to {NODE_NAME_BYTES_MAX} bytes"));
        }
        if names.insert(node.name.as_str(), i).is_some() {
            return refuse(format!("jobs[{i}].name: {:?} is taken", node.name));
        }
        if node.after.len() > PARENTS_MAX {
            return refuse(format!(
                "jobs[{i}].after: at most {PARENTS_MAX} parents per job"
            ));
        }
        edges += node.after.len();
        input = input.saturating_add(node.spec.input.len() as u64);
        for parent in &node.after {
            if let DagRef::Node(p) = *parent
                && (p as usize >= n || p as usize == i)
            {
                return refuse(format!(
                    "jobs[{i}].after: {} names no other job of the DAG",
                    p
                ));
            }
        }
    }
    if edges > EDGES_MAX {
        return refuse(format!("after: at most {EDGES_MAX} edges per DAG"));
    }
    if input > DAG_INPUT_BYTES_MAX {
        return refuse(format!(
            "jobs: inputs of {input} bytes in all, the limit is {DAG_INPUT_BYTES_MAX}"
        ));
    }
    // Kahn's algorithm: what is left once every job whose parents are all
    // taken has been taken lies on a cycle.
    let mut parents_left = vec![0u32; n];
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, node) in spec.nodes.iter().enumerate() {
        let mut seen = Vec::with_capacity(node.after.len());
        for parent in &node.after {
            if let DagRef::Node(p) = *parent
                && !seen.contains(&p)
            {
                seen.push(p);
                parents_left[i] += 1;
                children[p as usize].push(i);
            }
        }
    }
    let mut ready: Vec<usize> = (0..n).filter(|&i| parents_left[i] == 0).collect();
    let mut taken = 0;
    while let Some(i) = ready.pop() {
        taken += 1;
        for &child in &children[i] {
            parents_left[child] -= 1;
            if parents_left[child] == 0 {
                ready.push(child);
            }
        }
    }
    if taken < n {
        let on_cycle = (0..n).find(|&i| parents_left[i] > 0).expect("some left");
        return refuse(format!(
            "after: jobs[{on_cycle}] ({:?}) is on a cycle",
            spec.nodes[on_cycle].name
        ));
    }
    Ok(())
}

/// Bytes as JSON text: a string when they are UTF-8, else
/// `{"base64":"..."}`. Written by hand, in a fixed field order, so the
/// bytes do not depend on how a build's `serde_json` orders maps.
fn bytes_json(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(&serde_json::to_string(text).expect("a string serializes")),
        Err(_) => {
            out.push_str("{\"base64\":\"");
            out.push_str(&base64::engine::general_purpose::STANDARD.encode(bytes));
            out.push_str("\"}");
        }
    }
}

/// A child's input with its parents' outputs (see the module notes).
pub(crate) fn envelope(input: &[u8], parents: &[(JobId, &str, Option<&[u8]>)]) -> Vec<u8> {
    let mut out = String::from("{\"input\":");
    bytes_json(&mut out, input);
    out.push_str(",\"parents\":[");
    for (n, (id, name, output)) in parents.iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&format!("{{\"id\":{id},\"name\":"));
        bytes_json(&mut out, name.as_bytes());
        out.push_str(",\"output\":");
        match output {
            Some(output) => bytes_json(&mut out, output),
            None => out.push_str("null"),
        }
        out.push('}');
    }
    out.push_str("]}");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, after: &[u32]) -> DagNodeSpec {
        DagNodeSpec {
            name: name.into(),
            spec: crate::scenarios::spec(1, name.as_bytes()),
            options: JobOptions::default(),
            after: after.iter().map(|&p| DagRef::Node(p)).collect(),
            outputs: true,
        }
    }

    fn dag(nodes: Vec<DagNodeSpec>) -> DagSpec {
        DagSpec {
            nodes,
            on_failure: OnFailure::SkipDescendants,
            request: RequestId { origin: 1, seq: 1 },
            idempotency_key: None,
        }
    }

    #[test]
    fn cycles_self_edges_and_bad_names_are_refused_naming_the_field() {
        let message = |nodes| validate_shape(&dag(nodes)).unwrap_err().message;
        assert!(message(vec![node("a", &[1]), node("b", &[0])]).contains("cycle"));
        assert!(message(vec![node("a", &[0])]).starts_with("jobs[0].after"));
        assert!(message(vec![node("a", &[7])]).starts_with("jobs[0].after"));
        assert!(message(vec![node("a", &[]), node("a", &[])]).starts_with("jobs[1].name"));
        assert!(message(vec![]).starts_with("jobs:"));
        let chain: Vec<DagNodeSpec> = (0..100)
            .map(|i| node(&format!("n{i}"), if i == 0 { &[] } else { &[0] }))
            .collect();
        assert!(validate_shape(&dag(chain)).is_ok());
        // A diamond is no cycle.
        let diamond = vec![
            node("a", &[]),
            node("b", &[0]),
            node("c", &[0]),
            node("d", &[1, 2, 1]),
        ];
        assert!(validate_shape(&dag(diamond)).is_ok());
    }

    #[test]
    fn the_envelope_carries_text_as_text_and_other_bytes_as_base64() {
        let bytes = envelope(
            b"in",
            &[
                (1, "a", Some(b"out")),
                (2, "b", Some(&[0xff])),
                (3, "c", None),
            ],
        );
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "input": "in",
                "parents": [
                    {"id": 1, "name": "a", "output": "out"},
                    {"id": 2, "name": "b", "output": {"base64": "/w=="}},
                    {"id": 3, "name": "c", "output": null},
                ]
            })
        );
    }
}
