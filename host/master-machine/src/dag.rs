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
//! `{"input": S, "parents": [{"id", "name", "output": S, "blobs":
//! [{"name", "digest", "size"}]}]}`, parents in the order of the child's
//! `parents` (by id), where each `S` is a string when the bytes are UTF-8
//! and `{"base64": "..."}` otherwise, and `output` is `null` when the
//! parent's record is gone. `blobs` (always there, empty when the parent
//! wrote none or its record is gone) lists the parent's output blobs as
//! the child may open them: `name` is `PARENT/OUTPUT` (the name in the
//! child's [`Assignment::blobs`], see [`crate::blobs`]), `digest` 64
//! lowercase hex digits (as the API writes digests), `size` in bytes. The blobs'
//! bytes never pass through the master.
//!
//! # In the master
//!
//! The decision, the `DagCreated` apply, the cascade at a job's end
//! (`Master::settle_dag`), the input envelope at assignment and the
//! DAG's view are here too, as `impl Master`. A journal is decoded, not
//! trusted: a DAG id or job already in a DAG, or a job that does not
//! exist, leaves `DagCreated` without effect on it.

use crate::limits::{
    DAG_INPUT_BYTES_MAX, DAG_JOBS_MAX, EDGES_MAX, IDEMPOTENCY_KEY_BYTES_MAX, NODE_NAME_BYTES_MAX,
    PARENTS_MAX, REQUESTS_MAX,
};
use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::index::ready_key;
use crate::master::{Job, Master, reject};
use crate::protocol::*;
use crate::validation::{validate_options, validate_spec};

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

/// One parent in a child's input envelope: its id, its name, its output
/// (`None`: its record is gone) and the output blobs the child may open.
pub(crate) type EnvelopeParent<'a> = (JobId, &'a str, Option<&'a [u8]>, &'a [NamedBlob]);

/// A child's input with its parents' outputs (see the module notes).
pub(crate) fn envelope(input: &[u8], parents: &[EnvelopeParent<'_>]) -> Vec<u8> {
    let mut out = String::from("{\"input\":");
    bytes_json(&mut out, input);
    out.push_str(",\"parents\":[");
    for (n, (id, name, output, blobs)) in parents.iter().enumerate() {
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
        out.push_str(",\"blobs\":[");
        for (n, blob) in blobs.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            out.push_str("{\"name\":");
            bytes_json(&mut out, blob.name.as_bytes());
            out.push_str(&format!(
                ",\"digest\":\"{}\",\"size\":{}}}",
                crate::blobs::digest_text(&blob.digest),
                blob.size
            ));
        }
        out.push_str("]}");
    }
    out.push_str("]}");
    out.into_bytes()
}

impl Master {
    pub(crate) fn decide_dag(&self, now: Millis, spec: &DagSpec) -> Result<Decision, Rejection> {
        if let Some(existing) = self.existing_dag(spec)? {
            return Ok(existing);
        }
        validate_shape(spec)?;
        self.check_dag_jobs(spec)?;
        let n = spec.nodes.len() as u64;
        if self.queued().saturating_add(n) > self.config.queue_max {
            return reject(
                codes::QUEUE_FULL,
                format!(
                    "{} jobs are waiting and the DAG adds {n}, the limit is {}",
                    self.queued(),
                    self.config.queue_max
                ),
            );
        }
        self.check_quotas(now, dag_namespace(spec), n)?;
        Ok(self.dag_decision(now, spec))
    }

    /// The answer to a DAG submitted before: by the same request, or
    /// under the same idempotency key.
    fn existing_dag(&self, spec: &DagSpec) -> Result<Option<Decision>, Rejection> {
        let existing = |dag: DagId, created: bool| {
            let jobs = self
                .dags
                .dags
                .get(&dag)
                .map_or(Vec::new(), |d| d.jobs.clone());
            Ok(Some(Decision {
                events: Vec::new(),
                reply: Reply::Dag {
                    id: dag,
                    jobs,
                    existing: !created,
                },
            }))
        };
        if let Some(seen) = self.requests.get(&spec.request)
            && let Some(node) = self.dags.nodes.get(&seen.job)
        {
            return existing(node.dag, true);
        }
        if let Some(key) = &spec.idempotency_key {
            if key.is_empty() || key.len() > IDEMPOTENCY_KEY_BYTES_MAX || key.contains('\0') {
                return reject(
                    codes::INVALID_DAG,
                    format!("idempotency_key: 1 to {IDEMPOTENCY_KEY_BYTES_MAX} bytes, no NUL"),
                );
            }
            if let Some(&dag) = self.dags.keys.get(&dag_key(spec)) {
                return existing(dag, false);
            }
        }
        Ok(None)
    }

    /// Checks each job of a DAG: its spec and options, and its parents
    /// that are existing jobs (held, and not ended but by success).
    fn check_dag_jobs(&self, spec: &DagSpec) -> Result<(), Rejection> {
        let invalid = |message: String| Err(Rejection::new(codes::INVALID_DAG, message));
        let namespace = dag_namespace(spec);
        self.namespaces.check_room(namespace)?;
        for (i, node) in spec.nodes.iter().enumerate() {
            if node.options.namespace.as_deref() != namespace {
                return invalid(format!(
                    "jobs[{i}].namespace: a DAG's jobs share one namespace"
                ));
            }
            if node.spec.idempotency_key.is_some() {
                return invalid(format!(
                    "jobs[{i}].idempotency_key: a DAG's jobs take none (give the DAG one)"
                ));
            }
            if node.options.unique.is_some() {
                return invalid(format!("jobs[{i}].unique_key: a DAG's jobs take none"));
            }
            validate_spec(&self.config, &node.spec)
                .and_then(|()| crate::namespaces::validate(&node.options))
                .and_then(|()| validate_options(&node.options))
                .and_then(|()| self.check_narrowed(&node.options))
                .and_then(|()| self.check_input_blob(&node.options))
                .and_then(|()| self.resolve("module", &node.options).map(drop))
                .map_err(|r| Rejection::new(r.code, format!("jobs[{i}]: {}", r.message)))?;
            for parent in &node.after {
                let DagRef::Job(id) = *parent else { continue };
                // Another namespace's job is no job to this DAG.
                if !(self.namespaces).holds(crate::namespaces::name_of(namespace), id) {
                    return invalid(format!("jobs[{i}].after: no job {id}"));
                }
                let job = self.job(id).map_err(|r| {
                    Rejection::new(
                        codes::INVALID_DAG,
                        format!("jobs[{i}].after: {}", r.message),
                    )
                })?;
                if job.state.is_terminal() && job.state != JobState::Succeeded {
                    return invalid(format!(
                        "jobs[{i}].after: job {id} is {}; retry it first",
                        job.state.name()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The decision of a checked DAG: a `Submitted` per job, then the
    /// `DagCreated` with the edges.
    fn dag_decision(&self, now: Millis, spec: &DagSpec) -> Decision {
        let n = spec.nodes.len() as u64;
        let first = self.next_id;
        let ids: Vec<JobId> = (0..n).map(|k| first.saturating_add(k)).collect();
        let mut events: Vec<Event> = (spec.nodes.iter().zip(&ids))
            .map(|(node, &id)| Event {
                at: now,
                kind: EventKind::Submitted {
                    id,
                    // By module name: the digest current now (checked).
                    spec: match self.deployments.digest(&node.options) {
                        Some(module) => JobSpec {
                            module,
                            ..node.spec.clone()
                        },
                        None => node.spec.clone(),
                    },
                    request: None,
                    options: node.options.clone(),
                },
            })
            .collect();
        let nodes = (spec.nodes.iter().zip(&ids))
            .map(|(node, &id)| {
                let mut parents: Vec<JobId> = (node.after.iter())
                    .map(|parent| match *parent {
                        DagRef::Node(p) => ids[p as usize],
                        DagRef::Job(id) => id,
                    })
                    .collect();
                parents.sort_unstable();
                parents.dedup();
                DagNode {
                    id,
                    name: node.name.clone(),
                    parents,
                    outputs: node.outputs,
                }
            })
            .collect();
        let dag = self.dags.next;
        events.push(Event {
            at: now,
            kind: EventKind::DagCreated {
                dag,
                on_failure: spec.on_failure,
                nodes,
                request: Some(spec.request),
                idempotency_key: spec.idempotency_key.as_ref().map(|_| dag_key(spec)),
            },
        });
        Decision {
            events,
            reply: Reply::Dag {
                id: dag,
                jobs: ids,
                existing: false,
            },
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply_dag_created(
        &mut self,
        id: DagId,
        on_failure: OnFailure,
        nodes: &[DagNode],
        request: Option<RequestId>,
        key: &Option<String>,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        // A journal is decoded, not trusted: a DAG id or job already in a
        // DAG, or a job that does not exist, leaves the event without
        // effect on it.
        if self.dags.dags.contains_key(&id) {
            return;
        }
        let nodes: Vec<&DagNode> = (nodes.iter())
            .filter(|node| self.holds(node.id) && !self.dags.nodes.contains_key(&node.id))
            .collect();
        self.dags.next = self.dags.next.max(id.saturating_add(1));
        let jobs: Vec<JobId> = nodes.iter().map(|node| node.id).collect();
        self.dags.dags.insert(
            id,
            Dag {
                on_failure,
                created_at: at,
                left: jobs.len() as u64,
                jobs,
                key: key.clone(),
            },
        );
        if let Some(key) = key {
            self.dags.keys.insert(key.clone(), id);
        }
        for node in &nodes {
            self.dags.nodes.insert(
                node.id,
                Node {
                    dag: id,
                    name: node.name.clone(),
                    parents: node.parents.clone(),
                    outputs: node.outputs,
                },
            );
            for &parent in &node.parents {
                self.dags.children.entry(parent).or_default().push(node.id);
            }
        }
        if let (Some(request), Some(first)) = (request, nodes.first()) {
            self.remember_request(request, first.id, at, REQUESTS_MAX);
        }
        self.hold_dag_jobs(id, &nodes, at, effects);
    }

    /// Takes the new DAG `id`'s jobs with a parent that has not succeeded
    /// out of the line; one whose parent already failed is cancelled at
    /// once.
    fn hold_dag_jobs(
        &mut self,
        id: DagId,
        nodes: &[&DagNode],
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        let mut failed = Vec::new();
        for node in nodes {
            let unfinished = self.unsucceeded_parents(node.id);
            if unfinished == 0 || self.state_of(node.id) != Some(JobState::Queued) {
                continue;
            }
            self.unqueue(node.id);
            self.dags.waiting.insert(node.id, unfinished);
            for parent in &node.parents {
                if let Some(state) = self.state_of(*parent)
                    && state.is_terminal()
                    && state != JobState::Succeeded
                {
                    failed.push((*parent, state));
                }
            }
        }
        for (parent, state) in failed {
            // Replays the parent's failure for its new children.
            let children = self.dags.children.get(&parent).cloned().unwrap_or_default();
            for child in children {
                if self.dags.nodes.get(&child).is_some_and(|n| n.dag == id) {
                    let failure = Failure {
                        code: "parent_failed".into(),
                        message: format!("job {parent} ended {}", state.name()),
                    };
                    self.cancel(child, Some(failure), at, effects);
                }
            }
        }
    }

    /// Carries job `id`'s end in `state` to the DAG jobs waiting on it,
    /// on a work list (see the module notes).
    pub(crate) fn settle_dag(
        &mut self,
        id: JobId,
        state: JobState,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        if !self.dags.children.contains_key(&id) && !self.dags.nodes.contains_key(&id) {
            return;
        }
        let mut ended = vec![(id, state)];
        // DAGs cancelled whole by this cascade: their jobs are all handled.
        let mut cancelled_dags = BTreeSet::new();
        while let Some((id, state)) = ended.pop() {
            let children = self.dags.children.get(&id).cloned().unwrap_or_default();
            if state == JobState::Succeeded {
                self.release_children(children, at, effects);
                continue;
            }
            for (job, code) in self.doomed_by(id, children, &mut cancelled_dags) {
                let unfinished = self.jobs.get(&job).is_some_and(|j| !j.state.is_terminal());
                if !unfinished {
                    continue;
                }
                let failure = Failure {
                    code: code.into(),
                    message: format!("job {id} ended {}", state.name()),
                };
                self.cancel_one(job, Some(failure), at, effects);
                ended.push((job, JobState::Cancelled));
            }
        }
    }

    /// A parent of `children` succeeded: each waits for one parent less,
    /// and joins the line at none.
    fn release_children(&mut self, children: Vec<JobId>, at: Millis, effects: &mut Vec<Effect>) {
        for child in children {
            let Some(left) = self.dags.waiting.get_mut(&child) else {
                continue;
            };
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.dags.waiting.remove(&child);
                if let Some(job) = self.jobs.get(&child)
                    && job.state == JobState::Queued
                {
                    let needs = self.keyed.needs(child, &job.spec);
                    let place = ready_key(self.order, job, child);
                    let namespace = self.namespaces.of(child);
                    (self.index).enqueue(place, self.keyed.key(child), needs, namespace);
                    self.joined_line(child, at);
                    effects.push(Effect::WorkAvailable);
                }
            }
        }
    }

    /// The jobs job `id`'s failure cancels, with the code: the whole DAG
    /// of a `cancel_dag` job, and each waiting child by its own DAG's
    /// policy (a DAG already in `cancelled_dags` is not named again).
    fn doomed_by(
        &self,
        id: JobId,
        children: Vec<JobId>,
        cancelled_dags: &mut BTreeSet<DagId>,
    ) -> Vec<(JobId, &'static str)> {
        let mut doomed: Vec<(JobId, &str)> = Vec::new();
        let mut cancel_dag = |dag_id: DagId, doomed: &mut Vec<(JobId, &str)>| {
            if let Some(dag) = self.dags.dags.get(&dag_id)
                && dag.on_failure == OnFailure::CancelDag
                && cancelled_dags.insert(dag_id)
            {
                doomed.extend(dag.jobs.iter().map(|&job| (job, "dag_cancelled")));
                return true;
            }
            false
        };
        if let Some(node) = self.dags.nodes.get(&id) {
            cancel_dag(node.dag, &mut doomed);
        }
        for child in children {
            let Some(node) = self.dags.nodes.get(&child) else {
                continue;
            };
            let whole = (self.dags.dags.get(&node.dag))
                .is_some_and(|dag| dag.on_failure == OnFailure::CancelDag);
            if !whole {
                doomed.push((child, "parent_failed"));
            } else {
                cancel_dag(node.dag, &mut doomed);
            }
        }
        doomed
    }

    /// How many of a DAG job's parents have not succeeded (a purged one
    /// counts as succeeded: only finished jobs are purged, and a failed
    /// one already acted on its children).
    pub(crate) fn unsucceeded_parents(&self, id: JobId) -> u32 {
        let Some(node) = self.dags.nodes.get(&id) else {
            return 0;
        };
        (node.parents.iter())
            .filter(|parent| {
                self.state_of(**parent)
                    .is_some_and(|state| state != JobState::Succeeded)
            })
            .count() as u32
    }

    /// Forgets a purged job's DAG records (and the DAG with its last job).
    pub(crate) fn forget_dag_job(&mut self, id: JobId) {
        self.dags.waiting.remove(&id);
        let Some(node) = self.dags.nodes.remove(&id) else {
            return;
        };
        for parent in &node.parents {
            if let Some(children) = self.dags.children.get_mut(parent) {
                children.retain(|&child| child != id);
                if children.is_empty() {
                    self.dags.children.remove(parent);
                }
            }
        }
        if let Some(dag) = self.dags.dags.get_mut(&node.dag) {
            dag.left = dag.left.saturating_sub(1);
            if dag.left == 0 {
                let dag = self.dags.dags.remove(&node.dag).expect("present");
                if let Some(key) = dag.key {
                    self.dags.keys.remove(&key);
                }
            }
        }
    }

    /// The input job `id`'s attempt is given: its own, or, for a DAG's
    /// child that asked for them, the envelope with its parents' outputs
    /// and `blobs`, the output blobs each parent gives it (see
    /// [`Master::assignment_blobs`]).
    pub(crate) fn assignment_input(
        &self,
        id: JobId,
        job: &Job,
        blobs: &[Vec<NamedBlob>],
    ) -> Vec<u8> {
        match self.dags.nodes.get(&id) {
            Some(node) if node.outputs && !node.parents.is_empty() => {
                let outputs: Vec<Option<Vec<u8>>> = (node.parents.iter())
                    .map(|parent| self.find(*parent).and_then(|j| j.into_owned().result))
                    .collect();
                let parents: Vec<EnvelopeParent> = (node.parents.iter())
                    .zip(&outputs)
                    .enumerate()
                    .map(|(at, (parent, output))| {
                        let name = self.dags.nodes.get(parent).map_or("", |n| &n.name);
                        let blobs = blobs.get(at).map_or(&[][..], Vec::as_slice);
                        (*parent, name, output.as_deref(), blobs)
                    })
                    .collect();
                envelope(&job.spec.input, &parents)
            }
            _ => job.spec.input.clone(),
        }
    }

    /// Answers [`Query::Dag`].
    pub(crate) fn dag_view(&self, id: DagId) -> Result<Answer, Rejection> {
        let Some(dag) = self.dags.dags.get(&id) else {
            return reject(codes::DAG_NOT_FOUND, format!("no DAG {id}"));
        };
        let mut counts = [0u64; JobState::COUNT];
        let mut waiting = 0;
        let jobs = (dag.jobs.iter())
            .map(|job| {
                let state = self.state_of(*job);
                if let Some(state) = state {
                    counts[state as usize] += 1;
                }
                waiting += u64::from(self.dags.waiting.contains_key(job));
                let node = self.dags.nodes.get(job);
                let name = node.map_or(String::new(), |n| n.name.clone());
                let parents = node.map_or(Vec::new(), |n| n.parents.clone());
                (*job, name, state, parents)
            })
            .collect();
        Ok(Answer::Dag(Box::new(DagView {
            id,
            on_failure: dag.on_failure,
            created_at: dag.created_at,
            counts,
            waiting,
            jobs,
        })))
    }
}

/// The namespace of a DAG's jobs: its first's (every job must share it).
fn dag_namespace(spec: &DagSpec) -> Option<&str> {
    (spec.nodes.first()).and_then(|node| node.options.namespace.as_deref())
}

/// The key a DAG's idempotency key is kept under (see
/// [`scoped_key`](crate::namespaces::scoped_key)).
fn dag_key(spec: &DagSpec) -> String {
    let key = spec.idempotency_key.as_deref().unwrap_or_default();
    crate::namespaces::scoped_key(dag_namespace(spec), key).into_owned()
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
                (1, "a", Some(b"out"), &[]),
                (2, "b", Some(&[0xff]), &[]),
                (3, "c", None, &[]),
            ],
        );
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "input": "in",
                "parents": [
                    {"id": 1, "name": "a", "output": "out", "blobs": []},
                    {"id": 2, "name": "b", "output": {"base64": "/w=="}, "blobs": []},
                    {"id": 3, "name": "c", "output": null, "blobs": []},
                ]
            })
        );
    }

    #[test]
    fn the_envelope_lists_each_parent_s_blobs_by_the_names_the_child_opens() {
        let blob = |name: &str, n: u8, size| NamedBlob {
            name: name.into(),
            digest: [n; 32],
            size,
        };
        let a = [blob("a/rows.csv", 0xab, 1 << 40), blob("a/\"q\"", 1, 0)];
        let c = [blob("7/x", 0, 3)];
        let bytes = envelope(
            b"in",
            &[
                (1, "a", Some(b"A"), &a),
                (2, "b", None, &[]),
                (7, "", Some(b""), &c),
            ],
        );
        let text = std::str::from_utf8(&bytes).unwrap();
        assert!(
            text.starts_with(&format!(
                "{{\"input\":\"in\",\"parents\":[{{\"id\":1,\"name\":\"a\",\"output\":\"A\",\
                 \"blobs\":[{{\"name\":\"a/rows.csv\",\"digest\":\"{}\",\"size\":{}}}",
                "ab".repeat(32),
                1u64 << 40
            )),
            "fields in a fixed order: {text}"
        );
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let digest = |n: &str| n.repeat(32);
        assert_eq!(
            value["parents"],
            serde_json::json!([
                {"id": 1, "name": "a", "output": "A", "blobs": [
                    {"name": "a/rows.csv", "digest": digest("ab"), "size": 1u64 << 40},
                    {"name": "a/\"q\"", "digest": digest("01"), "size": 0},
                ]},
                {"id": 2, "name": "b", "output": null, "blobs": []},
                {"id": 7, "name": "", "output": "", "blobs": [
                    {"name": "7/x", "digest": digest("00"), "size": 3},
                ]},
            ])
        );
    }
}
