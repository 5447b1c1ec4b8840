//! Commands with the defaults the master's scenarios use: the builders the
//! scenario scripts ([`crate::script`]) and the tests that write their
//! steps in Rust share.

use crate::protocol::*;

/// A job spec with test defaults: module `[n; 32]`, 1 s timeout, 3 attempts.
pub fn spec(n: u8, input: &[u8]) -> JobSpec {
    JobSpec {
        module: [n; 32],
        input: input.to_vec(),
        timeout_ms: 1_000,
        memory_bytes: None,
        max_attempts: 3,
        priority: 0,
        idempotency_key: None,
    }
}

/// The request id numbered `seq` (of one node process).
pub fn request(seq: u64) -> RequestId {
    RequestId { origin: 0, seq }
}

/// A submission of `spec` as request `seq`.
pub fn submit(seq: u64, spec: JobSpec) -> Command {
    submit_with(seq, spec, JobOptions::default())
}

/// A submission of `spec` with `options` as request `seq`.
pub fn submit_with(seq: u64, spec: JobSpec, options: JobOptions) -> Command {
    Command::Submit {
        spec,
        request: request(seq),
        options,
    }
}

/// Options limiting the jobs of `key`.
pub fn limited(key: &str, running_max: Option<u32>, starts_per_second: Option<u32>) -> JobOptions {
    JobOptions {
        limit: Some(KeyLimit {
            key: key.into(),
            running_max,
            starts_per_second,
        }),
        unique: None,
        module: None,
        egress: None,
        input_blob: None,
        trace: None,
        labels: Vec::new(),
        namespace: None,
    }
}

/// Options making the job unique under `key` for `window_ms`.
pub fn unique(key: &str, window_ms: u64) -> JobOptions {
    JobOptions {
        limit: None,
        unique: Some(Unique {
            key: key.into(),
            window_ms,
        }),
        module: None,
        egress: None,
        input_blob: None,
        trace: None,
        labels: Vec::new(),
        namespace: None,
    }
}

/// A `Poll` from worker `w` with `free` free slots out of 4, holding no
/// blob.
pub fn poll(w: &str, free: u32) -> Command {
    Command::Poll {
        worker: w.into(),
        slots: 4,
        free,
        holds: Vec::new(),
        pool: WorkerPool::default(),
    }
}

/// A report of `outcome` for attempt `attempt` of job `id` by worker `w`.
pub fn finish(id: JobId, attempt: u32, w: &str, outcome: Outcome) -> Command {
    Command::Finish {
        id,
        attempt,
        worker: w.into(),
        outcome,
        duration_ms: 5,
        log_tail: "done\n".into(),
        calls: Vec::new(),
        calls_dropped: 0,
        usage: Usage {
            cpu_us: 3_000,
            memory_peak_bytes: 1 << 20,
            egress_bytes: 0,
        },
    }
}

/// The blob numbered `n` (digest `[n; 32]`) of `size` bytes.
pub fn blob(n: u8, size: u64) -> Blob {
    Blob {
        digest: [n; 32],
        size,
    }
}

/// The blob numbered `n` (digest `[n; 32]`) of `size` bytes, named `name`.
pub fn named_blob(name: &str, n: u8, size: u64) -> NamedBlob {
    NamedBlob {
        name: name.into(),
        digest: [n; 32],
        size,
    }
}

/// A success that returned `result` and wrote `blobs` (a plain success
/// when it wrote none, as a worker reports it).
pub fn wrote(result: &[u8], blobs: Vec<NamedBlob>) -> Outcome {
    match blobs.is_empty() {
        true => Outcome::Succeeded(result.to_vec()),
        false => Outcome::Wrote(Output {
            result: result.to_vec(),
            blobs,
        }),
    }
}

/// A failure outcome with `code`.
pub fn failed(code: &str) -> Outcome {
    Outcome::Failed(Failure {
        code: code.into(),
        message: format!("{code} happened"),
    })
}

/// A command creating schedule `name` of `spec(1, name)`.
pub fn create_schedule(name: &str, every: Every, overlap: Overlap, catch_up_ms: u64) -> Command {
    Command::CreateSchedule(schedule_spec(name, every, overlap, catch_up_ms))
}

/// Schedule `name` of `spec(1, name)`.
pub fn schedule_spec(name: &str, every: Every, overlap: Overlap, catch_up_ms: u64) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        every,
        job: spec(1, name.as_bytes()),
        options: JobOptions::default(),
        overlap,
        catch_up_ms,
    }
}

/// A DAG job named `name` running `spec(1, name)`, receiving its parents'
/// outputs.
pub fn dag_node(name: &str, after: Vec<DagRef>) -> DagNodeSpec {
    DagNodeSpec {
        name: name.into(),
        spec: spec(1, name.as_bytes()),
        options: JobOptions::default(),
        after,
        outputs: true,
    }
}

/// A DAG submission of `nodes` under request number `seq`.
pub fn submit_dag(seq: u64, nodes: Vec<DagNodeSpec>, on_failure: OnFailure) -> Command {
    Command::SubmitDag(DagSpec {
        nodes,
        on_failure,
        request: request(seq),
        idempotency_key: None,
    })
}

/// A token record with `id` and `scopes` (hash `[7; 32]`).
pub fn token(id: &str, scopes: &[&str]) -> TokenRecord {
    TokenRecord {
        id: id.into(),
        name: format!("{id} token"),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        hash: [7; 32],
        created_at: 0,
        namespace: None,
    }
}
