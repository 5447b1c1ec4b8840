//! The `cohort` command line.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// cohort: run WebAssembly jobs, safely sandboxed.
#[derive(Debug, Parser)]
#[command(name = "cohort", version, about, long_about = None)]
struct Cli {
    /// How log lines are written to stderr: `text` (`key=value`, for
    /// people) or `json` (one object per line; see docs/operations.md).
    #[arg(
        long,
        global = true,
        env = "COHORT_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: cohort::telemetry::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one job module locally: output to stdout, log and progress to
    /// stderr. Exit code: 0 ok, 1 job error, 2 usage or invalid module,
    /// 3 trap, 4 limit hit, 5 internal error.
    Exec(cohort::exec::ExecArgs),
    /// Build a job component from a Rust, Python or JavaScript/TypeScript
    /// project (detected from Cargo.toml, pyproject.toml or package.json);
    /// prints the component's path.
    Build(cohort::build::BuildArgs),
    /// Start a job project that builds and runs as it is.
    New(cohort::build::NewArgs),
    /// Install the pinned Python and JavaScript build toolchains, or show
    /// where they are.
    #[command(subcommand)]
    Toolchain(cohort::build::ToolchainCommand),
    /// Draw the Mandelbrot set from many small jobs and write a PNG.
    Demo(cohort::demo::DemoArgs),
    /// Run a node: the master, a worker and the HTTP API (until SIGTERM or
    /// Ctrl-C).
    Node(Box<cohort::node::NodeArgs>),
    /// Submit a job (uploading its module if given a file).
    Submit(cohort::cli::SubmitArgs),
    /// Show a job's state, attempts, progress and log tail.
    Status(cohort::cli::JobArgs),
    /// Print (or save) a finished job's result.
    Result(cohort::cli::JobArgs),
    /// List jobs.
    Jobs(cohort::cli::JobsArgs),
    /// Cancel a job that has not finished.
    Cancel(cohort::cli::JobArgs),
    /// Cancel or retry every job a filter matches, as one command.
    Bulk(cohort::cli::BulkArgs),
    /// Show the cluster: nodes, the master, workers.
    Cluster(cohort::cli::ClusterArgs),
    /// Each namespace's jobs, what they cost and its quotas.
    Namespaces(cohort::cli::ServerArg),
    /// Create, list, pause, resume, delete and backfill schedules.
    Schedule(cohort::cli::ScheduleArgs),
    /// Submit a DAG of jobs from a JSON file, or show one's status.
    Dag(cohort::cli::DagArgs),
    /// Show, upgrade or roll back the master build the cluster runs.
    Master(cohort::cli::MasterArgs),
    /// Replay a node's journal offline: the master's state at a point, one
    /// job's history, and a determinism check.
    Replay(cohort::replay::ReplayArgs),
    /// Ask a node to leave the cluster gracefully (as SIGTERM does).
    Leave(cohort::cli::ServerArg),
    /// Write a new cluster key file (give every node the same one).
    Keygen(cohort::cli::KeygenArgs),
    /// Point a name at a module (uploading it if it is a file): jobs and
    /// schedules may then name their module by it.
    Deploy(cohort::cli::deployments::DeployArgs),
    /// Point a name back at an earlier version's module.
    Rollback(cohort::cli::deployments::RollbackArgs),
    /// List the deployments, or show one with its versions.
    Deployments(cohort::cli::deployments::DeploymentArgs),
    /// Remove a deployment (jobs keep the module they resolved to).
    Undeploy(cohort::cli::deployments::UndeployArgs),
    /// Let a deployment's jobs call HTTP(S) endpoints (`--http URL`).
    Grant(cohort::cli::deployments::GrantArgs),
    /// Take grants from a deployment (all, unless `--http` names some).
    Revoke(cohort::cli::deployments::RevokeArgs),
    /// Set, list or delete the secrets grants' headers name.
    #[command(subcommand)]
    Secret(cohort::cli::secrets::SecretCommand),
    /// Set or clear a namespace's quotas: most jobs waiting and running,
    /// submissions a second, result bytes kept.
    #[command(subcommand)]
    Quota(cohort::cli::quotas::QuotaCommand),
    /// Set a namespace's weight for its fair share of the workers,
    /// measured in the CPU its attempts use.
    Weight(cohort::cli::quotas::WeightArgs),
    /// Upload, download or list blobs: large data, streamed, named by its
    /// sha256.
    #[command(subcommand)]
    Blob(cohort::cli::blobs::BlobCommand),
    /// Create, list or revoke API tokens.
    #[command(subcommand)]
    Token(cohort::cli::TokenCommand),
    /// Run the jobs a node sends on stdin (started by a node with
    /// `--job-isolation process`, never by hand).
    #[command(hide = true)]
    Sandbox(cohort::runtime::sandbox_child::SandboxArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = match cli.command {
        // A sandbox process runs one job at a time on its own thread, with
        // no multi-threaded runtime of the node's (and exports no spans).
        Command::Sandbox(args) => {
            if let Err(error) = cohort::telemetry::init(cli.log_format, None, None) {
                eprintln!("error: cannot set up logging: {error:#}");
            }
            return match cohort::runtime::sandbox_child::serve(args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error:#}");
                    ExitCode::from(cohort::exec::ExitStatus::Internal as u8)
                }
            };
        }
        command => command,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(cohort::exec::ExitStatus::Internal as u8);
        }
    };
    // Node events are one line each (`key=value`, colours only on a
    // terminal, or JSON); a node may also export traces, sent on this
    // runtime.
    let telemetry = {
        let _entered = runtime.enter();
        let (traces, instance) = match &command {
            Command::Node(args) => (Some(&args.traces), cohort::node::known_node_id(args)),
            _ => (None, None),
        };
        match cohort::telemetry::init(cli.log_format, traces, instance.as_deref()) {
            Ok(telemetry) => telemetry,
            Err(error) => {
                eprintln!("error: cannot set up logging or tracing: {error:#}");
                return ExitCode::from(2);
            }
        }
    };
    let code = runtime.block_on(async {
        match command {
            Command::Sandbox(_) => unreachable!("a sandbox process returned above"),
            Command::Exec(args) => cohort::exec::run(args).await.into(),
            // Blocking child processes: off the async workers.
            Command::Build(args) => report(blocking(move || cohort::build::build(args)).await),
            Command::New(args) => report(cohort::build::new(args)),
            Command::Toolchain(command) => {
                report(blocking(move || cohort::build::toolchain(command)).await)
            }
            Command::Demo(args) => report(cohort::demo::run(args).await),
            Command::Node(args) => report(cohort::node::run(*args).await),
            Command::Submit(args) => cohort::cli::submit(args).await,
            Command::Status(args) => cohort::cli::status(args).await,
            Command::Result(args) => cohort::cli::result(args).await,
            Command::Jobs(args) => cohort::cli::jobs(args).await,
            Command::Cancel(args) => cohort::cli::cancel(args).await,
            Command::Bulk(args) => cohort::cli::bulk(args).await,
            Command::Cluster(args) => cohort::cli::cluster_command(args).await,
            Command::Namespaces(args) => cohort::cli::namespaces(args).await,
            Command::Schedule(args) => cohort::cli::schedule(args).await,
            Command::Dag(args) => cohort::cli::dag(args).await,
            Command::Master(args) => cohort::cli::master(args).await,
            Command::Replay(args) => report(blocking(move || cohort::replay::run(args)).await),
            Command::Leave(args) => cohort::cli::leave(args).await,
            Command::Keygen(args) => cohort::cli::keygen(args),
            Command::Token(command) => cohort::cli::token(command).await,
            Command::Deploy(args) => cohort::cli::deployments::deploy(args).await,
            Command::Rollback(args) => cohort::cli::deployments::rollback(args).await,
            Command::Deployments(args) => cohort::cli::deployments::deployments(args).await,
            Command::Undeploy(args) => cohort::cli::deployments::undeploy(args).await,
            Command::Grant(args) => cohort::cli::deployments::grant(args).await,
            Command::Revoke(args) => cohort::cli::deployments::revoke(args).await,
            Command::Secret(command) => cohort::cli::secrets::secret(command).await,
            Command::Quota(command) => cohort::cli::quotas::quota(command).await,
            Command::Weight(args) => cohort::cli::quotas::weight(args).await,
            Command::Blob(command) => cohort::cli::blobs::blob(command).await,
        }
    });
    // Spans still queued are sent while the runtime's workers still run
    // (the exporter spawns its requests onto them), from a thread of
    // their own that the shutdown may block.
    let handle = runtime.handle().clone();
    let _ = std::thread::spawn(move || {
        let _entered = handle.enter();
        telemetry.shutdown();
    })
    .join();
    code
}

async fn blocking(
    work: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
) -> anyhow::Result<()> {
    tokio::task::spawn_blocking(work).await?
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
