//! The client commands of the `cohort` CLI: `submit`, `status`, `result`,
//! `jobs`, `cancel`, `cluster`, `leave`, `keygen`, `token`, and (in
//! [`deployments`]) `deploy`, `rollback`, `deployments` and `undeploy`. Human output by default, `--json` for
//! scripts. Exit code 0 on success, 1 when the server refused or a waited-for
//! job did not succeed, 2 for usage errors (from the argument parser).

pub mod blobs;
pub mod deployments;
pub mod quotas;
pub mod secrets;

use crate::api::types::*;
use crate::client::{Client, ClientError, Job, Node, Options};
use crate::limits::{DAG_POLL, TOKEN_CALL_TIMEOUT};
use crate::runtime::job_limits;
use cohort_master::JobId;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Where the server is.
#[derive(Debug, Clone, clap::Args)]
pub struct ServerArg {
    /// The cohort server's URL, or several, comma-separated: tried in
    /// order, skipping one that stops answering.
    #[arg(
        long,
        env = "COHORT_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    pub server: String,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// API token (`cohort token create` prints one).
    #[arg(long, env = "COHORT_TOKEN", hide_env_values = true, global = true)]
    pub token: Option<String>,
    /// PEM CA certificate to trust for an `https://` server [default: the
    /// system's roots].
    #[arg(long, env = "COHORT_CA_CERT", global = true)]
    pub ca_cert: Option<PathBuf>,
}

impl ServerArg {
    /// A client of the server with the token and TLS settings.
    pub fn client(&self) -> Result<Client, ClientError> {
        let urls: Vec<&str> = self
            .server
            .split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .collect();
        let options = Options {
            token: self.token.clone(),
            ca_cert: self.ca_cert.clone(),
            ..Options::default()
        };
        Client::new(&urls, options)
    }

    /// The first node of `--server` alone: for what concerns that node
    /// (`leave`) or is not safe to repeat elsewhere.
    pub fn node(&self) -> Result<Node, ClientError> {
        let first = self.server.split(',').next().unwrap_or_default().trim();
        Node::with_options(first, self.token.as_deref(), self.ca_cert.as_deref())
            .map_err(ClientError::Protocol)
    }
}

/// `cohort submit`.
#[derive(Debug, Clone, clap::Args)]
pub struct SubmitArgs {
    /// A job module file (`.wasm`, uploaded first), the sha256 of a module
    /// already uploaded, or a deployment's name (`cohort deploy`).
    pub module: String,
    /// Input file, or `-` for stdin [default: empty input].
    #[arg(long, short)]
    pub input: Option<PathBuf>,
    /// A blob the job reads as a stream, its input blob `input`: the
    /// sha256 of a blob stored in the cluster (`cohort blob put`).
    #[arg(long, value_name = "DIGEST")]
    pub input_blob: Option<String>,
    /// Submit this many jobs with the same input.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub many: u32,
    /// Wait until the job finishes and print its result (with --many: show
    /// a progress bar and a summary).
    #[arg(long)]
    pub wait: bool,
    /// Time limit of one attempt, e.g. `30s` [default: the node's].
    #[arg(long, value_parser = job_limits::parse_duration)]
    pub timeout: Option<Duration>,
    /// Memory limit of one attempt, e.g. `64MiB` [default: the node's];
    /// the job starts only on a worker whose --job-memory-max allows it.
    #[arg(long, value_parser = job_limits::parse_bytes)]
    pub memory: Option<u64>,
    /// Labels a worker must have to run the job, e.g. `gpu=a100,zone=eu`
    /// (see `cohort node --labels`).
    #[arg(long, value_parser = crate::labels::parse_labels, value_name = "KEY=VALUE,...")]
    pub labels: Option<crate::labels::Labels>,
    /// The namespace the job belongs to [default: the token's, if it is
    /// confined to one, else `default`].
    #[arg(long, env = "COHORT_NAMESPACE")]
    pub namespace: Option<String>,
    /// Attempts before the job is dead-lettered [default: the node's].
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Higher runs first.
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Resubmitting with the same key returns the same job (with --many,
    /// `-<n>` is appended for each job).
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Jobs sharing this key share its --concurrency-limit and
    /// --rate-limit, cluster-wide.
    #[arg(long)]
    pub concurrency_key: Option<String>,
    /// At most this many of the key's jobs run at once.
    #[arg(long, requires = "concurrency_key")]
    pub concurrency_limit: Option<u32>,
    /// At most this many of the key's jobs start in any second.
    #[arg(long, requires = "concurrency_key")]
    pub rate_limit: Option<u32>,
    /// A submission with the same key within --unique-for of a job's
    /// submission gets that job instead of a new one.
    #[arg(long, requires = "unique_for")]
    pub unique_key: Option<String>,
    /// How long the --unique-key holds after a submission, e.g. `1h`.
    #[arg(long, requires = "unique_key", value_parser = job_limits::parse_duration)]
    pub unique_for: Option<Duration>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
}

/// `cohort status` / `cohort result` / `cohort cancel`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// The job id.
    pub id: JobId,
    /// Wait for the job to finish first.
    #[arg(long)]
    pub wait: bool,
    /// Write the result here instead of stdout (`result` only).
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
}

/// Which jobs: `cohort jobs` and `cohort bulk` (every filter given must
/// hold).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct FilterArgs {
    /// Only jobs in this state (queued, running, succeeded, failed,
    /// cancelled, dead).
    #[arg(long)]
    pub state: Option<String>,
    /// Only jobs running this module (its sha256), or submitted by this
    /// deployment name.
    #[arg(long)]
    pub module: Option<String>,
    /// Only jobs of this priority.
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// Only jobs whose error code or message holds this text (ASCII case
    /// ignored).
    #[arg(long)]
    pub error: Option<String>,
}

impl FilterArgs {
    fn body(&self) -> crate::client::JobFilterBody {
        crate::client::JobFilterBody {
            state: self.state.clone(),
            module: self.module.clone(),
            priority: self.priority,
            error: self.error.clone(),
            ..Default::default()
        }
    }
}

/// `cohort jobs`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobsArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub filter: FilterArgs,
    /// Newest first (default: oldest first).
    #[arg(long)]
    pub newest: bool,
    /// Most jobs to list.
    #[arg(long, default_value_t = 100)]
    pub limit: u32,
    /// Continue after this cursor (printed by the previous page).
    #[arg(long)]
    pub cursor: Option<String>,
    /// Only jobs of this namespace (a token confined to one lists its own
    /// only).
    #[arg(long, env = "COHORT_NAMESPACE")]
    pub namespace: Option<String>,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
}

/// What `cohort bulk` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BulkActionArg {
    /// Cancel the matching jobs that have not finished.
    Cancel,
    /// Queue the matching failed, dead and cancelled jobs again.
    Retry,
}

/// `cohort bulk cancel|retry [filters]`.
#[derive(Debug, Clone, clap::Args)]
pub struct BulkArgs {
    /// `cancel` or `retry`.
    pub action: BulkActionArg,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub filter: FilterArgs,
    /// Only these jobs (comma-separated ids, at most 1,000).
    #[arg(long, value_delimiter = ',')]
    pub ids: Vec<JobId>,
    /// Attempts each retried job gets (default: the node's --max-attempts).
    #[arg(long)]
    pub attempts: Option<u32>,
    /// Count the jobs the action would change; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
}

fn fail(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

fn print_json<T: serde::Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serializes")
    );
}

fn read_input(input: &Option<PathBuf>) -> std::io::Result<Vec<u8>> {
    match input {
        None => Ok(Vec::new()),
        Some(path) if path.as_os_str() == "-" => {
            let mut bytes = Vec::new();
            std::io::stdin().read_to_end(&mut bytes)?;
            Ok(bytes)
        }
        Some(path) => std::fs::read(path),
    }
}

/// `cohort submit`.
pub async fn submit(args: SubmitArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let digest = if std::path::Path::new(&args.module).is_file() {
        let wasm = match std::fs::read(&args.module) {
            Ok(wasm) => wasm,
            Err(error) => return fail(format!("cannot read {}: {error}", args.module)),
        };
        let digest = crate::runtime::Digest::of(&wasm).to_string();
        match client.upload(wasm).await {
            Ok(digest) => digest,
            // Uploads need an admin token; a submit token may still run a
            // module that is already stored (the submission says if not).
            Err(error) if error.code() == "forbidden" => digest,
            Err(error) => return fail(format!("uploading {}: {error}", args.module)),
        }
    } else {
        args.module.clone()
    };
    let input = match read_input(&args.input) {
        Ok(input) => input,
        Err(error) => return fail(format!("cannot read the input: {error}")),
    };
    let request = |n: Option<u32>| {
        let mut request = SubmitRequest::new(&digest);
        if !input.is_empty() {
            request = request.bytes(&input);
        }
        SubmitRequest {
            timeout_ms: args.timeout.map(|t| t.as_millis() as u64),
            memory_bytes: args.memory,
            max_attempts: args.max_attempts,
            priority: args.priority,
            idempotency_key: match (&args.idempotency_key, n) {
                (Some(key), Some(n)) => Some(format!("{key}-{n}")),
                (key, _) => key.clone(),
            },
            concurrency_key: args.concurrency_key.clone(),
            concurrency_limit: args.concurrency_limit,
            rate_limit: args.rate_limit,
            unique_key: args.unique_key.clone(),
            unique_window_ms: args.unique_for.map(|t| t.as_millis() as u64),
            input_blob: args.input_blob.clone(),
            labels: (args.labels.iter())
                .flat_map(|labels| labels.0.clone())
                .collect(),
            namespace: args.namespace.clone(),
            ..request
        }
    };
    if args.many == 1 {
        let job = client.submit(request(None));
        let accepted = match job.accepted().await {
            Ok(accepted) => accepted,
            Err(error) => return fail(error),
        };
        if !args.wait {
            if args.server.json {
                print_json(&accepted);
            } else {
                println!("{}", accepted.id);
            }
            return ExitCode::SUCCESS;
        }
        return finish_one(&job, None, args.server.json).await;
    }
    submit_many(&client, args.many, request, args.wait, args.server.json).await
}

/// Waits for `job` and writes its output; a job that did not succeed
/// fails (with its record, under `--json`).
async fn finish_one(job: &Job, output: Option<&PathBuf>, json: bool) -> ExitCode {
    match job.result(None).await {
        Ok(result) => {
            let id = job.id().await.unwrap_or_default();
            write_result(id, &result, output, json)
        }
        Err(error @ ClientError::Job { .. }) => {
            if json && let Ok(record) = job.status().await {
                print_json(&record);
            }
            fail(error)
        }
        Err(error) => fail(error),
    }
}

fn write_result(id: JobId, result: &[u8], output: Option<&PathBuf>, json: bool) -> ExitCode {
    if json && output.is_none() {
        use base64::Engine as _;
        print_json(&serde_json::json!({
            "id": id,
            "result_base64": base64::engine::general_purpose::STANDARD.encode(result),
        }));
        return ExitCode::SUCCESS;
    }
    let written = match output {
        Some(path) => std::fs::write(path, result),
        None => std::io::stdout()
            .write_all(result)
            .and_then(|()| std::io::stdout().flush()),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(format!("cannot write the result: {error}")),
    }
}

/// `submit --many`: one `submit` call per job (the client batches them),
/// then, with `--wait`, every job watched through the client's waiter.
async fn submit_many(
    client: &Client,
    many: u32,
    request: impl Fn(Option<u32>) -> SubmitRequest,
    wait: bool,
    json: bool,
) -> ExitCode {
    let started = Instant::now();
    let jobs: Vec<Job> = (0..many).map(|n| client.submit(request(Some(n)))).collect();
    let (accepted, ids, refused) = match sort_submitted(jobs).await {
        Ok(sorted) => sorted,
        Err(error) => return fail(error),
    };
    let submitted = started.elapsed();
    if !refused.is_empty() {
        eprintln!(
            "{} of {many} jobs refused; first: {}: {}",
            refused.len(),
            refused[0].code,
            refused[0].message
        );
    }
    if !wait {
        if json {
            print_json(&serde_json::json!({"ids": ids, "refused": refused}));
        } else {
            for id in &ids {
                println!("{id}");
            }
        }
        return if refused.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        };
    }
    let states = match wait_for_all(accepted, json).await {
        Ok(states) => states,
        Err(error) => return fail(error),
    };
    let elapsed = started.elapsed();
    let succeeded = states.get("succeeded").copied().unwrap_or(0);
    if json {
        print_json(&serde_json::json!({
            "jobs": ids.len(),
            "states": states,
            "refused": refused.len(),
            "submit_seconds": submitted.as_secs_f64(),
            "total_seconds": elapsed.as_secs_f64(),
        }));
    } else {
        let summary: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
        println!(
            "{} jobs: {} in {:.2?} ({:.0} jobs/s; submitted in {:.2?})",
            ids.len(),
            summary.join(", "),
            elapsed,
            ids.len() as f64 / elapsed.as_secs_f64(),
            submitted
        );
    }
    if succeeded == ids.len() as u64 && refused.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The submitted jobs the server accepted, their ids, and its refusals;
/// an error other than a refusal ends the submission.
async fn sort_submitted(
    jobs: Vec<Job>,
) -> Result<(Vec<Job>, Vec<JobId>, Vec<ErrorBody>), ClientError> {
    let mut accepted = Vec::with_capacity(jobs.len());
    let mut ids = Vec::with_capacity(jobs.len());
    let mut refused = Vec::new();
    for job in jobs {
        match job.id().await {
            Ok(id) => {
                ids.push(id);
                accepted.push(job);
            }
            Err(ClientError::Api { code, message, .. }) => refused.push(ErrorBody {
                code,
                message,
                retryable: None,
            }),
            Err(error) => return Err(error),
        }
    }
    Ok((accepted, ids, refused))
}

/// Waits for every job behind a progress bar (hidden under `--json`);
/// returns how many ended in each state.
async fn wait_for_all(
    jobs: Vec<Job>,
    json: bool,
) -> Result<std::collections::BTreeMap<String, u64>, String> {
    let bar = ProgressBar::new(jobs.len() as u64);
    if json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} jobs finished  {per_sec}  eta {eta}")
            .expect("a valid template"),
    );
    let mut states: std::collections::BTreeMap<String, u64> = Default::default();
    let mut waits = tokio::task::JoinSet::new();
    for job in jobs {
        waits.spawn(async move { job.finished(None).await });
    }
    while let Some(joined) = waits.join_next().await {
        match joined {
            Ok(Ok(finished)) => {
                *states.entry(finished.state).or_default() += 1;
                bar.inc(1);
            }
            Ok(Err(error)) => {
                bar.finish_and_clear();
                return Err(error.to_string());
            }
            Err(error) => {
                bar.finish_and_clear();
                return Err(error.to_string());
            }
        }
    }
    bar.finish_and_clear();
    Ok(states)
}

/// `cohort status`.
pub async fn status(args: JobArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let job = client.get(args.id);
    let job = match args.wait {
        true => match job.finished(None).await {
            Ok(_) => job.status().await,
            Err(error) => Err(error),
        },
        false => job.status().await,
    };
    let job = match job {
        Ok(job) => job,
        Err(error) => return fail(error),
    };
    if args.server.json {
        print_json(&job);
        return ExitCode::SUCCESS;
    }
    println!("job {}: {}", job.id, job.state);
    println!("  namespace   {}", job.namespace);
    println!("  module      {}", job.module);
    println!(
        "  attempts    {} of {} (timeout {} ms, priority {})",
        job.attempts.len(),
        job.max_attempts,
        job.timeout_ms,
        job.priority
    );
    for attempt in &job.attempts {
        println!(
            "    #{} on {}: {}{}{}{}",
            attempt.number,
            attempt.worker,
            attempt.outcome.as_deref().unwrap_or("running"),
            attempt
                .duration_ms
                .map(|d| format!(" after {d} ms"))
                .unwrap_or_default(),
            attempt
                .usage
                .map(|u| format!(", {}", cost(&u)))
                .unwrap_or_default(),
            attempt
                .message
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        );
    }
    if job.attempts.iter().any(|a| a.usage.is_some()) {
        println!("  cost        {}", cost(&job.usage));
    }
    if let Some(progress) = &job.progress {
        println!(
            "  progress    {:.0}% {}",
            progress.fraction * 100.0,
            progress.message
        );
    }
    if let Some(blob) = &job.input_blob {
        println!("  input blob  {} ({} bytes)", blob.digest, blob.bytes);
    }
    if let Some(bytes) = job.result_bytes {
        println!("  result      {bytes} bytes (cohort result {})", job.id);
    }
    for output in &job.outputs {
        println!(
            "  output      {} {} ({} bytes; cohort blob get {})",
            output.name, output.digest, output.bytes, output.digest
        );
    }
    if let Some(error) = &job.error {
        println!("  error       {}: {}", error.code, error.message);
    }
    if let Some(last) = job.attempts.last()
        && !last.log_tail.is_empty()
    {
        println!("  log (end of the last attempt's):");
        for line in last.log_tail.lines() {
            println!("    {line}");
        }
    }
    ExitCode::SUCCESS
}

/// What attempts cost, in a line: `CPU 1.234 ms, peak memory 1088 KiB,
/// outbound 0 bytes`.
fn cost(usage: &Usage) -> String {
    format!(
        "CPU {:.3} ms, peak memory {} KiB, outbound {} bytes",
        usage.cpu_us as f64 / 1000.0,
        usage.memory_peak_bytes >> 10,
        usage.egress_bytes
    )
}

/// `cohort result`.
pub async fn result(args: JobArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let id = args.id;
    if args.wait {
        return finish_one(&client.get(id), args.output.as_ref(), args.server.json).await;
    }
    match client
        .call(|node| async move { node.result(id).await })
        .await
    {
        Ok(result) => write_result(id, &result, args.output.as_ref(), args.server.json),
        Err(error) => fail(error),
    }
}

/// `cohort cancel`.
pub async fn cancel(args: JobArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client.get(args.id).cancel().await {
        Ok(job) if args.server.json => {
            print_json(&job);
            ExitCode::SUCCESS
        }
        Ok(job) => {
            println!("job {}: {}", job.id, job.state);
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort jobs`.
pub async fn jobs(args: JobsArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let query = crate::client::JobQuery {
        filter: args.filter.body(),
        newest_first: args.newest,
        limit: Some(args.limit),
        cursor: args.cursor.clone(),
        namespace: args.namespace.clone(),
    };
    let query = &query;
    let page = match client
        .call(|node| async move { node.list(query).await })
        .await
    {
        Ok(page) => page,
        Err(error) => return fail(error),
    };
    if args.server.json {
        print_json(&page);
        return ExitCode::SUCCESS;
    }
    println!(
        "{:>10}  {:<10}  {:>8}  {:<16}  SUBMITTED (ms)",
        "ID", "STATE", "ATTEMPTS", "NAMESPACE"
    );
    for job in &page.jobs {
        println!(
            "{:>10}  {:<10}  {:>8}  {:<16}  {}",
            job.id, job.state, job.attempts, job.namespace, job.submitted_at
        );
    }
    if let Some(cursor) = page.next_cursor {
        println!("more: the same command with --cursor {cursor}");
    }
    ExitCode::SUCCESS
}

/// `cohort bulk cancel|retry [filters] [--dry-run]`: one command for every
/// matching job.
pub async fn bulk(args: BulkArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let request = crate::client::BulkRequest {
        action: match args.action {
            BulkActionArg::Cancel => "cancel",
            BulkActionArg::Retry => "retry",
        }
        .into(),
        filter: crate::client::JobFilterBody {
            ids: (!args.ids.is_empty()).then(|| args.ids.clone()),
            ..args.filter.body()
        },
        dry_run: args.dry_run,
        attempts: args.attempts,
    };
    let request = &request;
    let answer = match client
        .call(|node| async move { node.bulk(request).await })
        .await
    {
        Ok(answer) => answer,
        Err(error) => return fail(error),
    };
    if args.server.json {
        print_json(&answer);
        return ExitCode::SUCCESS;
    }
    let (would, did) = match args.action {
        BulkActionArg::Cancel => ("would cancel", "cancelled"),
        BulkActionArg::Retry => ("would retry", "queued again"),
    };
    match (answer.matched, answer.changed) {
        (Some(matched), _) => println!("{would} {matched} jobs"),
        (_, Some(changed)) => println!("{did}: {changed} jobs"),
        _ => return fail("the node's answer has neither matched nor changed"),
    }
    ExitCode::SUCCESS
}

/// `cohort namespaces`: each namespace's jobs by state, what its
/// attempts cost, the result bytes it keeps and its quotas.
pub async fn namespaces(args: ServerArg) -> ExitCode {
    let client = match args.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let list = match client
        .call(|node| async move { node.namespaces().await })
        .await
    {
        Ok(list) => list,
        Err(error) => return fail(error),
    };
    if args.json {
        print_json(&list);
        return ExitCode::SUCCESS;
    }
    println!(
        "{:<20} {:>6} {:>8} {:>8} {:>10} {:>10} {:>14} {:>14} {:>14}  QUOTAS",
        "NAMESPACE",
        "WEIGHT",
        "QUEUED",
        "RUNNING",
        "FINISHED",
        "SUBMITTED",
        "CPU (s)",
        "OUTBOUND (B)",
        "RESULTS (B)"
    );
    for namespace in list.namespaces {
        let count = |state: &str| namespace.jobs.get(state).copied().unwrap_or(0);
        let finished: u64 = ["succeeded", "failed", "cancelled", "dead"]
            .map(count)
            .iter()
            .sum();
        println!(
            "{:<20} {:>6} {:>8} {:>8} {:>10} {:>10} {:>14.3} {:>14} {:>14}  {}",
            namespace.name,
            namespace.weight,
            count("queued"),
            count("running"),
            finished,
            namespace.submitted_total,
            namespace.cpu_us as f64 / 1e6,
            namespace.egress_bytes,
            namespace.result_bytes,
            quotas::describe(&namespace.quotas)
        );
    }
    ExitCode::SUCCESS
}

/// `cohort cluster [remove NODE]`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub server: ServerArg,
    #[command(subcommand)]
    pub command: Option<ClusterCommand>,
}

/// What `cohort cluster` does besides showing the cluster.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClusterCommand {
    /// Removes a back-end node from the voter set (a machine gone for
    /// good), so the majority is counted without it. A node removed while
    /// alive is added back once it catches up; stop it first.
    Remove {
        /// The node's id.
        node: String,
    },
}

/// `cohort cluster`, `cohort cluster remove NODE`.
pub async fn cluster_command(args: ClusterArgs) -> ExitCode {
    match args.command {
        None => cluster(args.server).await,
        Some(ClusterCommand::Remove { node }) => remove_voter(args.server, &node).await,
    }
}

/// `cohort cluster remove NODE`.
async fn remove_voter(args: ServerArg, node: &str) -> ExitCode {
    let client = match args.node() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let path = format!("/v1/cluster/voters/{node}");
    match client
        .call(
            hyper::Method::DELETE,
            &path,
            "application/json",
            Default::default(),
        )
        .await
    {
        Ok(_) => {
            println!("removing {node} from the voters (done once earlier changes commit)");
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort cluster`.
pub async fn cluster(args: ServerArg) -> ExitCode {
    let client = match args.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let cluster = match client
        .call(|node| async move { node.cluster().await })
        .await
    {
        Ok(cluster) => cluster,
        Err(error) => return fail(error),
    };
    if args.json {
        print_json(&cluster);
        return ExitCode::SUCCESS;
    }
    println!(
        "master on {} (epoch {}); voters: {}",
        cluster.master_node,
        cluster.master_epoch,
        if cluster.voters.is_empty() {
            "unknown here".to_string()
        } else {
            cluster.voters.join(", ")
        }
    );
    if let Some(error) = &cluster.master_error {
        println!(
            "the master did not answer ({}: {}); busy counts are unknown",
            error.code, error.message
        );
    }
    println!(
        "{:<20} {:<8} {:<28} {:<26} {:>9}",
        "NODE (oldest first)", "STATUS", "HTTP", "ROLES", "BUSY"
    );
    for node in &cluster.nodes {
        println!(
            "{:<20} {:<8} {:<28} {:<26} {:>9}{}",
            node.id,
            node.status,
            node.http,
            node.roles.join(","),
            format!("{}/{}", node.busy, node.slots),
            if node.master { "  master" } else { "" }
        );
    }
    ExitCode::SUCCESS
}

/// `cohort leave`.
pub async fn leave(args: ServerArg) -> ExitCode {
    let client = match args.node() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client
        .call(
            hyper::Method::POST,
            "/v1/node/leave",
            "application/json",
            Default::default(),
        )
        .await
    {
        Ok((_, body)) if args.json => {
            println!("{}", String::from_utf8_lossy(&body));
            ExitCode::SUCCESS
        }
        Ok(_) => {
            println!(
                "{} is leaving: it hands the master over if it hosts it, finishes its running jobs and stops",
                client.server()
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort keygen FILE`.
#[derive(Debug, Clone, clap::Args)]
pub struct KeygenArgs {
    /// Where to write the new key (never overwritten; readable by its owner
    /// only).
    pub file: PathBuf,
}

/// `cohort keygen`: writes a new cluster key file.
pub fn keygen(args: KeygenArgs) -> ExitCode {
    match crate::security::key::write_new(&args.file) {
        Ok(()) => {
            println!(
                "wrote a new cluster key to {}: give every node the same file (--cluster-key)",
                args.file.display()
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort token ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum TokenCommand {
    /// Make a token and print it (once: only its hash is kept).
    Create(TokenCreateArgs),
    /// List tokens (ids, names, scopes; never the tokens).
    List(TokenAuth),
    /// Revoke a token by id: every node refuses it within a second.
    Revoke(TokenRevokeArgs),
}

/// How a token command proves it may manage tokens.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenAuth {
    #[command(flatten)]
    server: ServerArg,
    /// Prove the cluster key instead of sending an admin token (how the
    /// first token is made).
    #[arg(long, env = "COHORT_CLUSTER_KEY_FILE")]
    cluster_key: Option<PathBuf>,
    /// The cluster's id (with --cluster-key).
    #[arg(long, env = "COHORT_CLUSTER_ID", default_value = "cohort")]
    cluster_id: String,
}

/// `cohort token create`.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    auth: TokenAuth,
    /// Scopes: read, submit, admin (comma-separated or repeated).
    #[arg(long = "scope", required = true, value_delimiter = ',')]
    scopes: Vec<String>,
    /// What the token is for.
    #[arg(long, default_value = "")]
    name: String,
    /// Confine the token to this namespace: it reaches that namespace's
    /// jobs only (submit, list, read, wait, cancel), and no cluster-wide
    /// route. Without it the token is cluster-wide.
    #[arg(long)]
    namespace: Option<String>,
}

/// `cohort token revoke`.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenRevokeArgs {
    #[command(flatten)]
    auth: TokenAuth,
    /// The token's id (`cohort token list`).
    id: String,
}

/// `cohort token`.
pub async fn token(command: TokenCommand) -> ExitCode {
    use crate::api::auth::{TokenCreateRequest, TokenOp};
    use crate::security::token::{Scope, mint};
    let (auth, op, minted) = match command {
        TokenCommand::Create(args) => {
            let mut scopes = Vec::new();
            for name in &args.scopes {
                match Scope::parse(name.trim()) {
                    Some(scope) => scopes.push(scope),
                    None => {
                        return fail(format!("unknown scope {name:?}: use read, submit or admin"));
                    }
                }
            }
            if let Some(name) = &args.namespace
                && let Err(why) = cohort_master::namespaces::check_name(name)
            {
                return fail(why);
            }
            let minted = mint(&args.name, &scopes, args.namespace.as_deref());
            let op = TokenOp::Create(TokenCreateRequest {
                id: minted.record.id.clone(),
                name: minted.record.name.clone(),
                scopes: minted.record.scopes.clone(),
                sha256: crate::runtime::Digest::from(minted.record.hash).to_string(),
                namespace: minted.record.namespace.clone(),
            });
            (args.auth, op, Some(minted.token))
        }
        TokenCommand::List(auth) => (auth, TokenOp::List, None),
        TokenCommand::Revoke(args) => (args.auth, TokenOp::Revoke(args.id), None),
    };
    let answer = match token_call(&auth, &op).await {
        Ok(answer) => answer,
        Err(error) => return fail(error),
    };
    if auth.server.json {
        println!("{}", String::from_utf8_lossy(&answer));
    }
    match (op, minted) {
        (TokenOp::Create(request), Some(token)) => {
            let checked = serde_json::from_slice::<crate::api::auth::TokenCreatedResponse>(&answer)
                .map_or(true, |created| created.checked);
            if !checked {
                eprintln!(
                    "warning: the node that answered has no cluster key and checks no token: \
                     it lets every request in, with or without this one. The token is kept; \
                     nodes started with --cluster-key check it."
                );
            }
            if !auth.server.json {
                let reach = match &request.namespace {
                    Some(namespace) => format!("namespace {namespace}"),
                    None => "cluster-wide".to_owned(),
                };
                eprintln!(
                    "token {} ({}, {reach}) created; it is shown only now:",
                    request.id,
                    request.scopes.join(","),
                );
                println!("{token}");
            } else {
                eprintln!("token: {token}");
            }
        }
        (TokenOp::List, _) if !auth.server.json => {
            match serde_json::from_slice::<crate::api::auth::TokenListResponse>(&answer) {
                Ok(list) => {
                    println!(
                        "{:<14} {:<20} {:<20} {:<20} CREATED",
                        "ID", "SCOPES", "NAMESPACE", "NAME"
                    );
                    for token in list.tokens {
                        println!(
                            "{:<14} {:<20} {:<20} {:<20} {}",
                            token.id,
                            token.scopes.join(","),
                            token.namespace.as_deref().unwrap_or("*"),
                            token.name,
                            token.created_at
                        );
                    }
                }
                Err(error) => return fail(format!("unexpected answer: {error}")),
            }
        }
        (TokenOp::Revoke(id), _) if !auth.server.json => println!("token {id} revoked"),
        _ => {}
    }
    ExitCode::SUCCESS
}

/// Sends a token operation: sealed with the cluster key to the internal
/// route, or with the admin token to the public one.
async fn token_call(
    auth: &TokenAuth,
    op: &crate::api::auth::TokenOp,
) -> anyhow::Result<bytes::Bytes> {
    use crate::api::auth::TokenOp;
    let Some(key_file) = &auth.cluster_key else {
        let client = auth.server.node()?;
        let (method, path, body) = match op {
            TokenOp::List => (hyper::Method::GET, "/v1/tokens".to_string(), Vec::new()),
            TokenOp::Create(request) => (
                hyper::Method::POST,
                "/v1/tokens".to_string(),
                serde_json::to_vec(request)?,
            ),
            TokenOp::Revoke(id) => (
                hyper::Method::DELETE,
                format!("/v1/tokens/{id}"),
                Vec::new(),
            ),
        };
        let (_, answer) = client
            .call(method, &path, "application/json", body.into())
            .await?;
        return Ok(answer);
    };
    let keys = crate::security::Keyring::load(key_file)?;
    let sealer = std::sync::Arc::new(crate::security::Sealer::new(keys, &auth.cluster_id));
    let peer = crate::peer::Peer::node(Some(sealer));
    // Node-to-node routes are plain HTTP with sealed bodies, on TLS nodes too.
    let base = auth.server.server.trim_end_matches('/');
    let base = match base.strip_prefix("https://") {
        Some(rest) => format!("http://{rest}"),
        None => base.to_string(),
    };
    let (status, answer) = peer
        .post_internal(
            &format!("{base}/internal/v1/tokens"),
            cohort_master::encode(op).into(),
            TOKEN_CALL_TIMEOUT,
        )
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    if !status.is_success() {
        let error: ErrorBody = serde_json::from_slice(&answer).unwrap_or(ErrorBody {
            code: "http_error".into(),
            message: String::from_utf8_lossy(&answer).into(),
            retryable: None,
        });
        anyhow::bail!("{}: {} (HTTP {status})", error.code, error.message);
    }
    Ok(answer)
}

/// `cohort schedule ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScheduleArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    #[command(subcommand)]
    #[allow(missing_docs)]
    pub command: ScheduleCommand,
}

/// What `cohort schedule` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ScheduleCommand {
    /// Create a schedule: a job fired at every tick of a cron expression
    /// or of an interval, exactly once per tick.
    Create(Box<ScheduleCreateArgs>),
    /// List the schedules with their next ticks.
    List,
    /// Show one schedule.
    Show {
        /// Its name.
        name: String,
    },
    /// Pause a schedule (its ticks neither fire nor count as missed).
    Pause {
        /// Its name.
        name: String,
    },
    /// Resume a schedule from its first tick after now.
    Resume {
        /// Its name.
        name: String,
    },
    /// Delete a schedule (the jobs it fired stay).
    Delete {
        /// Its name.
        name: String,
    },
    /// Fire missed ticks (at most 1,000 at a time).
    Backfill {
        /// Its name.
        name: String,
        /// First tick time, inclusive (ms since the Unix epoch).
        #[arg(long)]
        from: Option<u64>,
        /// End, exclusive.
        #[arg(long)]
        to: Option<u64>,
    },
}

/// `cohort schedule create`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScheduleCreateArgs {
    /// Its name (1 to 128 characters of A-Z a-z 0-9 . _ -).
    pub name: String,
    /// A job module file (`.wasm`, uploaded first) or the sha256 of a module
    /// already uploaded.
    pub module: String,
    /// A cron expression: five fields, or six with seconds first (quote it).
    #[arg(long, required_unless_present = "every", conflicts_with = "every")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in [default: UTC].
    #[arg(long, requires = "cron")]
    pub timezone: Option<String>,
    /// Fire at this interval instead, e.g. `30s`, `5m` (at least 1s).
    #[arg(long, value_parser = job_limits::parse_duration)]
    pub every: Option<Duration>,
    /// While the previous tick's job has not finished: skip, buffer_one,
    /// allow_all or cancel_running [default: skip].
    #[arg(long)]
    pub overlap: Option<String>,
    /// Ticks missed by at most this much fire late, e.g. `10m` [default: 1m].
    #[arg(long, value_parser = job_limits::parse_duration)]
    pub catch_up: Option<Duration>,
    /// Input file for every job, or `-` for stdin [default: empty input].
    #[arg(long, short)]
    pub input: Option<PathBuf>,
    /// Time limit of one attempt, e.g. `30s` [default: the node's].
    #[arg(long, value_parser = job_limits::parse_duration)]
    pub timeout: Option<Duration>,
    /// Attempts before a job is dead-lettered [default: the node's].
    #[arg(long)]
    pub max_attempts: Option<u32>,
    /// Higher runs first.
    #[arg(long, allow_hyphen_values = true)]
    pub priority: Option<i32>,
    /// The jobs share this key's --concurrency-limit, cluster-wide.
    #[arg(long)]
    pub concurrency_key: Option<String>,
    /// At most this many of the key's jobs run at once.
    #[arg(long, requires = "concurrency_key")]
    pub concurrency_limit: Option<u32>,
}

/// `cohort schedule ...`.
pub async fn schedule(args: ScheduleArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let json = args.server.json;
    let shown = match args.command {
        ScheduleCommand::Create(create) => {
            let request = match schedule_request(&client, *create).await {
                Ok(request) => request,
                Err(error) => return fail(error),
            };
            let request = &request;
            client
                .call(|node| async move { node.create_schedule(request).await })
                .await
        }
        ScheduleCommand::List => return schedule_list(&client, json).await,
        ScheduleCommand::Show { name } => {
            let name = &name;
            client
                .call(|node| async move { node.schedule(name).await })
                .await
        }
        ScheduleCommand::Pause { name } => {
            let name = &name;
            (client.call(|node| async move { node.pause_schedule(name, true).await })).await
        }
        ScheduleCommand::Resume { name } => {
            let name = &name;
            (client.call(|node| async move { node.pause_schedule(name, false).await })).await
        }
        ScheduleCommand::Delete { name } => return schedule_delete(&client, &name, json).await,
        ScheduleCommand::Backfill { name, from, to } => {
            let request = crate::client::BackfillRequest { from, to };
            return schedule_backfill(&args.server, &name, &request, json).await;
        }
    };
    match shown {
        Ok(schedule) if json => print_json(&schedule),
        Ok(schedule) => print_schedule(&schedule),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// `cohort schedule list`.
async fn schedule_list(client: &Client, json: bool) -> ExitCode {
    match client
        .call(|node| async move { node.schedules().await })
        .await
    {
        Ok(list) if json => {
            print_json(&list);
            ExitCode::SUCCESS
        }
        Ok(list) => {
            println!(
                "{:<24} {:<22} {:<8} {:>8} next",
                "NAME", "EVERY", "STATE", "FIRED"
            );
            for schedule in &list.schedules {
                let next = schedule.upcoming.first().map(|t| t.to_string());
                println!(
                    "{:<24} {:<22} {:<8} {:>8} {}",
                    schedule.name,
                    timing(schedule),
                    if schedule.paused { "paused" } else { "active" },
                    schedule.fired_total,
                    next.unwrap_or_else(|| "-".into())
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort schedule delete`.
async fn schedule_delete(client: &Client, name: &str, json: bool) -> ExitCode {
    match (client.call(|node| async move { node.delete_schedule(name).await })).await {
        Ok(deleted) if json => {
            print_json(&deleted);
            ExitCode::SUCCESS
        }
        Ok(deleted) => {
            println!("deleted {}", deleted.name);
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

/// `cohort schedule backfill`.
async fn schedule_backfill(
    server: &ServerArg,
    name: &str,
    request: &crate::client::BackfillRequest,
    json: bool,
) -> ExitCode {
    // Not retried on another node: a backfill that did happen would
    // answer with no jobs the second time.
    let node = match server.node() {
        Ok(node) => node,
        Err(error) => return fail(error),
    };
    match node.backfill(name, request).await {
        Ok(fired) if json => {
            print_json(&fired);
            ExitCode::SUCCESS
        }
        Ok(fired) => {
            println!(
                "fired {} missed ticks: jobs {:?}",
                fired.ids.len(),
                fired.ids
            );
            ExitCode::SUCCESS
        }
        Err(error) => fail(error),
    }
}

async fn schedule_request(
    client: &Client,
    args: ScheduleCreateArgs,
) -> Result<crate::client::ScheduleRequest, String> {
    let module = if std::path::Path::new(&args.module).is_file() {
        let wasm = std::fs::read(&args.module)
            .map_err(|error| format!("cannot read {}: {error}", args.module))?;
        client
            .upload(wasm)
            .await
            .map_err(|error| format!("uploading {}: {error}", args.module))?
    } else {
        args.module.clone()
    };
    let input = read_input(&args.input).map_err(|e| format!("cannot read the input: {e}"))?;
    let mut job = SubmitRequest::new(module);
    if !input.is_empty() {
        job = job.bytes(&input);
    }
    Ok(crate::client::ScheduleRequest {
        name: args.name,
        cron: args.cron,
        timezone: args.timezone,
        every_ms: args.every.map(|every| every.as_millis() as u64),
        overlap: args.overlap,
        catch_up_ms: args.catch_up.map(|window| window.as_millis() as u64),
        job: SubmitRequest {
            timeout_ms: args.timeout.map(|t| t.as_millis() as u64),
            max_attempts: args.max_attempts,
            priority: args.priority,
            concurrency_key: args.concurrency_key,
            concurrency_limit: args.concurrency_limit,
            ..job
        },
    })
}

fn timing(schedule: &crate::client::ScheduleResponse) -> String {
    match (&schedule.cron, &schedule.timezone, schedule.every_ms) {
        (Some(cron), Some(zone), _) => format!("{cron} {zone}"),
        (_, _, Some(ms)) => format!("every {ms} ms"),
        _ => "-".into(),
    }
}

fn print_schedule(schedule: &crate::client::ScheduleResponse) {
    println!("schedule {}: {}", schedule.name, timing(schedule));
    if schedule.namespace != cohort_master::namespaces::DEFAULT {
        println!("  namespace {}", schedule.namespace);
    }
    println!(
        "  {}, overlap {}, catch-up {} ms, module {}",
        if schedule.paused { "paused" } else { "active" },
        schedule.overlap,
        schedule.catch_up_ms,
        schedule.module
    );
    println!(
        "  fired {}, skipped {}, unfinished jobs {:?}",
        schedule.fired_total, schedule.skipped_total, schedule.active
    );
    if let (Some(tick), Some(job)) = (schedule.last_tick, schedule.last_job) {
        println!("  last tick {tick} (job {job})");
    }
    for tick in &schedule.upcoming {
        println!("  next {tick}");
    }
    for range in &schedule.missed {
        println!("  missed {}..{} (backfill to fire)", range.from, range.to);
    }
}

/// `cohort dag ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct DagArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    #[command(subcommand)]
    #[allow(missing_docs)]
    pub command: DagCommand,
}

/// What `cohort dag` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum DagCommand {
    /// Submit a DAG: a JSON file (or `-`) as `POST /v1/dags` takes it.
    /// Prints the DAG's id, or with --wait its status once it ended.
    Submit {
        /// The file.
        file: PathBuf,
        /// Wait until every job of the DAG has finished.
        #[arg(long)]
        wait: bool,
    },
    /// Show a DAG's status and jobs.
    Status {
        /// The DAG's id.
        id: u64,
    },
}

/// `cohort dag ...`.
pub async fn dag(args: DagArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let json = args.server.json;
    let (id, wait) = match args.command {
        DagCommand::Status { id } => (id, false),
        DagCommand::Submit { file, wait } => {
            let bytes = match read_input(&Some(file)) {
                Ok(bytes) => bytes,
                Err(error) => return fail(format!("cannot read the DAG: {error}")),
            };
            let request: crate::client::DagRequest = match serde_json::from_slice(&bytes) {
                Ok(request) => request,
                Err(error) => return fail(format!("not a DAG request: {error}")),
            };
            let request = &request;
            // Retried on another node only with the DAG's own key: without
            // one, a retry after an unknown outcome could make two DAGs.
            let submitted = if request.idempotency_key.is_some() {
                (client.call(|node| async move { node.submit_dag(request).await })).await
            } else {
                match args.server.node() {
                    Ok(node) => node.submit_dag(request).await,
                    Err(error) => return fail(error),
                }
            };
            match submitted {
                Ok(submitted) if !wait => {
                    if json {
                        print_json(&submitted);
                    } else {
                        println!("{}", submitted.id);
                    }
                    return ExitCode::SUCCESS;
                }
                Ok(submitted) => (submitted.id, true),
                Err(error) => return fail(error),
            }
        }
    };
    loop {
        let status = match client.call(|node| async move { node.dag(id).await }).await {
            Ok(status) => status,
            Err(error) => return fail(error),
        };
        if wait && status.state == "running" {
            tokio::time::sleep(DAG_POLL).await;
            continue;
        }
        if json {
            print_json(&status);
        } else {
            println!(
                "dag {}: {} ({} jobs, {} waiting for a parent), on failure {}",
                status.id,
                status.state,
                status.jobs.len(),
                status.waiting,
                status.on_failure
            );
            for (state, count) in status.counts.iter().filter(|(_, n)| **n > 0) {
                println!("  {state}: {count}");
            }
        }
        return match status.state.as_str() {
            "succeeded" | "running" => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        };
    }
}

/// `cohort master ...`.
#[derive(Debug, Clone, clap::Args)]
pub struct MasterArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    #[command(subcommand)]
    #[allow(missing_docs)]
    pub command: MasterCommand,
}

/// What `cohort master` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum MasterCommand {
    /// Which master build runs, and the one a rollback returns to.
    Status,
    /// Upload a master component and switch the running cluster to it,
    /// after checking it (the running master is untouched if a check
    /// fails).
    Upgrade {
        /// The component (`.wasm`, world `cohort:master/master`).
        file: PathBuf,
    },
    /// Switch back to the build that ran before the last switch.
    Rollback,
}

/// `cohort master ...`.
pub async fn master(args: MasterArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let json = args.server.json;
    let switched = match args.command {
        MasterCommand::Status => {
            return match (client.call(|node| async move { node.master_build().await })).await {
                Ok(build) if json => {
                    print_json(&build);
                    ExitCode::SUCCESS
                }
                Ok(build) => {
                    println!("master on {} (epoch {})", build.node, build.epoch);
                    println!("build:    {}", build.build);
                    println!("previous: {}", build.previous);
                    ExitCode::SUCCESS
                }
                Err(error) => fail(error),
            };
        }
        MasterCommand::Upgrade { file } => {
            let wasm = match std::fs::read(&file) {
                Ok(wasm) => wasm,
                Err(error) => return fail(format!("cannot read {}: {error}", file.display())),
            };
            // Safe to repeat: a build already running is left as it is.
            let wasm = &wasm;
            (client.call(|node| async move { node.upgrade_master(wasm.clone()).await })).await
        }
        // Not retried on another node: a rollback that did happen would
        // switch back again the second time.
        MasterCommand::Rollback => match args.server.node() {
            Ok(node) => node.rollback_master().await,
            Err(error) => return fail(error),
        },
    };
    match switched {
        Ok(report) if json => print_json(&report),
        Ok(report) if !report.switched => println!("{} already runs; nothing changed", report.to),
        Ok(report) => println!(
            "switched the master from {} to {} ({} events replayed in the check, paused {} ms)",
            report.from, report.to, report.replayed_events, report.pause_ms
        ),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}
