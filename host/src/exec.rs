//! `cohort exec`: run one job module locally, in-process, with no cluster.
//!
//! This is how job authors try a module: the output goes to stdout (raw
//! bytes, so it can be piped), the job's log and progress to stderr, and the
//! exit code says how the job ended (see [`ExitStatus`]). The limits are the
//! same ones a cluster node enforces.
//!
//! Compiled components are cached between runs, by default in a per-user
//! directory ([`cache_dir`]: `$COHORT_CACHE_DIR`, else
//! `$XDG_CACHE_HOME/cohort`, else `~/.cache/cohort`), bounded to
//! [`EXEC_CACHE_BYTES_MAX`] (least recently used out), so a second run of
//! a Python or JS job skips its seconds of compiling. Loading compiled code
//! trusts the file, so the directory is used only if it is this user's and
//! nobody else may write to it; a damaged file is recompiled (see the
//! runtime's disk cache).

use crate::limits::EXEC_CACHE_BYTES_MAX;
use crate::runtime::job_blobs::{BlobSpace, InputBlob, JobBlobs, WrittenBlob};
use crate::runtime::job_limits::{self, JobLimits};
use crate::runtime::{
    Isolation, JobFailure, JobObserver, JobReport, JobRequest, ModuleError, Runtime, RuntimeConfig,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Arguments of `cohort exec`.
#[derive(Debug, clap::Args)]
pub struct ExecArgs {
    /// The job module: a WebAssembly component of the `cohort:job` world.
    pub module: PathBuf,
    /// The input: a file, or `-` for stdin. Empty when omitted.
    #[arg(long, short)]
    pub input: Option<String>,
    // Limits left out take the values of `JobLimits::default()`, the same
    // defaults a node applies; the numbers in the help text are for people.
    /// Wall-clock limit, e.g. `500ms`, `30s`, `5m` [default: 60s].
    #[arg(long, value_parser = job_limits::parse_duration)]
    pub timeout: Option<Duration>,
    /// Linear-memory limit, e.g. `64MiB`, `1GiB` [default: 256MiB].
    #[arg(long, value_parser = job_limits::parse_bytes)]
    pub memory: Option<u64>,
    /// Largest output accepted [default: 16MiB].
    #[arg(long, value_parser = job_limits::parse_bytes)]
    pub output_limit: Option<u64>,
    /// Log bytes kept; the rest is dropped with a marker [default: 1MiB].
    #[arg(long, value_parser = job_limits::parse_bytes)]
    pub log_limit: Option<u64>,
    /// A checkpoint file to resume from (as saved by `--save-checkpoint`).
    #[arg(long)]
    pub resume: Option<PathBuf>,
    /// Where to write the job's last checkpoint, if it made one.
    #[arg(long)]
    pub save_checkpoint: Option<PathBuf>,
    /// Write the output to this file instead of stdout.
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// A file the job reads as a stream, as its input blob `input` (what
    /// `input_blob` gives a job in a cluster).
    #[arg(long, value_name = "FILE")]
    pub input_blob: Option<PathBuf>,
    /// Write the job's output blobs into this directory, each as a file
    /// named as the job named it [default: they are listed, not kept].
    #[arg(long, value_name = "DIR")]
    pub outputs: Option<PathBuf>,
    /// Cache compiled modules in this directory between runs [default:
    /// `$XDG_CACHE_HOME/cohort`, else `~/.cache/cohort`].
    #[arg(long, env = "COHORT_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Compile the module anew, without reading or writing the cache.
    #[arg(long, conflicts_with = "cache_dir")]
    pub no_cache: bool,
    /// Where the job runs: `thread`, or `process` (a sandbox process killed
    /// at the time limit; compiled code skips epoch checks), as a node's
    /// `--job-isolation`.
    #[arg(long, value_enum, default_value = "thread")]
    pub isolation: Isolation,
}

/// How `cohort exec` exits. Stable: scripts may rely on these numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitStatus {
    /// The job succeeded; its output was written.
    Success = 0,
    /// The job returned an error of its own.
    JobError = 1,
    /// Bad invocation: unreadable files, an invalid module, bad limits.
    Usage = 2,
    /// The job trapped.
    Trap = 3,
    /// The job hit a limit: time, memory, output or checkpoint size.
    Limit = 4,
    /// The host failed.
    Internal = 5,
}

impl ExitStatus {
    /// The exit status for a job's outcome.
    pub fn of(outcome: &Result<Vec<u8>, JobFailure>) -> Self {
        match outcome {
            Ok(_) => ExitStatus::Success,
            Err(JobFailure::JobError { .. }) => ExitStatus::JobError,
            Err(JobFailure::Trap { .. }) => ExitStatus::Trap,
            Err(failure) if failure.is_limit() => ExitStatus::Limit,
            Err(_) => ExitStatus::Internal,
        }
    }
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status as u8)
    }
}

/// Runs `cohort exec`.
pub async fn run(args: ExecArgs) -> ExitStatus {
    match exec(args).await {
        Ok(status) => status,
        Err((status, message)) => {
            eprintln!("error: {message}");
            status
        }
    }
}

async fn exec(args: ExecArgs) -> Result<ExitStatus, (ExitStatus, String)> {
    let usage = |message: String| (ExitStatus::Usage, message);
    let defaults = JobLimits::default();
    let limits = JobLimits {
        memory_bytes: args.memory.unwrap_or(defaults.memory_bytes),
        timeout_ms: args.timeout.map_or(defaults.timeout_ms, |timeout| {
            u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
        }),
        output_bytes: args.output_limit.unwrap_or(defaults.output_bytes),
        log_bytes: args.log_limit.unwrap_or(defaults.log_bytes),
        ..defaults
    };
    limits.validate().map_err(|e| usage(e.to_string()))?;
    let wasm = std::fs::read(&args.module)
        .map_err(|e| usage(format!("cannot read {}: {e}", args.module.display())))?;
    let input = read_input(args.input.as_deref()).map_err(usage)?;
    let resume_state = match &args.resume {
        Some(path) => Some(
            std::fs::read(path)
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?,
        ),
        None => None,
    };

    let data_dir = match args.no_cache {
        true => None,
        false => cache_dir(args.cache_dir.as_deref()),
    };
    let (blobs, space) = local_blobs(&args).map_err(usage)?;
    let runtime = Runtime::new(RuntimeConfig {
        data_dir,
        disk_cache_bytes_max: Some(EXEC_CACHE_BYTES_MAX),
        concurrent_jobs: 1,
        isolation: args.isolation,
        ..RuntimeConfig::default()
    })
    .map_err(|e| (ExitStatus::Internal, e.to_string()))?;
    let module = runtime.load(&wasm).await.map_err(|e| {
        // A module the runtime refuses is the caller's; a host fault is not.
        let status = match e {
            ModuleError::Internal(_) => ExitStatus::Internal,
            _ => ExitStatus::Usage,
        };
        (status, format!("[{}] {e}", e.code()))
    })?;

    let bar = ProgressBar::new(1000).with_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {percent:>3}% {msg}",
        )
        .expect("a valid template"),
    );
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    let observer = std::sync::Arc::new(StderrObserver { bar: bar.clone() });
    let request = JobRequest {
        input,
        limits,
        resume_state,
        observer: Some(observer),
        egress: Vec::new(),
        secrets: Default::default(),
        readable: Vec::new(),
        recording: Default::default(),
        blobs,
        trace: None,
    };
    let mut report = runtime.run(&module, request).await;
    bar.finish_and_clear();
    keep_outputs(&args, std::mem::take(&mut report.outputs))
        .map_err(|message| (ExitStatus::Internal, message))?;
    drop(space);
    finish(&args, report)
}

/// The blobs of a local run: `--input-blob` as input `input` (hashed
/// here), and a directory for the outputs (in `--outputs`, so that keeping
/// one is a rename; else a temporary one), which lives as long as the
/// returned one.
fn local_blobs(args: &ExecArgs) -> Result<(JobBlobs, tempfile::TempDir), String> {
    let mut inputs = Vec::new();
    if let Some(path) = &args.input_blob {
        let read = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
        let mut file = std::fs::File::open(path).map_err(read)?;
        let mut hasher = <sha2::Sha256 as sha2::Digest>::new();
        let size = std::io::copy(&mut file, &mut hasher).map_err(read)?;
        inputs.push(InputBlob {
            name: "input".into(),
            digest: sha2::Digest::finalize(hasher).into(),
            size,
            path: path.clone(),
        });
    }
    let space = match &args.outputs {
        Some(dir) => std::fs::create_dir_all(dir)
            .and_then(|()| tempfile::Builder::new().prefix(".cohort-").tempdir_in(dir))
            .map_err(|e| format!("cannot write into {}: {e}", dir.display()))?,
        None => {
            tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?
        }
    };
    let blobs = JobBlobs {
        inputs,
        space: Some(BlobSpace {
            dir: space.path().to_path_buf(),
            bytes_max: crate::limits::BLOB_BYTES_MAX_DEFAULT,
        }),
    };
    Ok((blobs, space))
}

/// Lists a successful run's output blobs on stderr, and with `--outputs`
/// keeps each as a file named as the job named it.
fn keep_outputs(args: &ExecArgs, outputs: Vec<WrittenBlob>) -> Result<(), String> {
    for output in outputs {
        let digest = crate::runtime::Digest::from(output.digest);
        match &args.outputs {
            Some(dir) => {
                let path = dir.join(&output.name);
                output
                    .file
                    .persist(&path)
                    .map_err(|e| format!("cannot write {}: {}", path.display(), e.error))?;
                eprintln!(
                    "[cohort] output {}: {} bytes, sha256 {digest}, in {}",
                    output.name,
                    output.size,
                    path.display()
                );
            }
            None => eprintln!(
                "[cohort] output {}: {} bytes, sha256 {digest} (not kept: --outputs DIR keeps it)",
                output.name, output.size
            ),
        }
    }
    Ok(())
}

fn finish(args: &ExecArgs, report: JobReport) -> Result<ExitStatus, (ExitStatus, String)> {
    if let (Some(path), Some(checkpoint)) = (&args.save_checkpoint, &report.checkpoint) {
        std::fs::write(path, checkpoint).map_err(|e| {
            (
                ExitStatus::Internal,
                format!("cannot write {}: {e}", path.display()),
            )
        })?;
    }
    if report.log_dropped_bytes > 0 {
        eprintln!(
            "[cohort] log truncated: {} bytes dropped",
            report.log_dropped_bytes
        );
    }
    let status = ExitStatus::of(&report.outcome);
    match report.outcome {
        Ok(output) => {
            let written = match &args.output {
                Some(path) => std::fs::write(path, &output)
                    .map_err(|e| format!("cannot write {}: {e}", path.display())),
                None => std::io::stdout()
                    .lock()
                    .write_all(&output)
                    .and_then(|()| std::io::stdout().flush())
                    .map_err(|e| format!("cannot write the output: {e}")),
            };
            written.map_err(|message| (ExitStatus::Internal, message))?;
            eprintln!(
                "[cohort] ok: {} bytes out in {:.1} ms, CPU {:.1} ms, peak memory {} KiB",
                output.len(),
                report.duration.as_secs_f64() * 1000.0,
                report.cpu.as_secs_f64() * 1000.0,
                report.memory_peak_bytes >> 10
            );
        }
        Err(failure) => eprintln!("error[{}]: {failure}", failure.code()),
    }
    Ok(status)
}

fn read_input(input: Option<&str>) -> Result<Vec<u8>, String> {
    match input {
        None => Ok(Vec::new()),
        Some("-") => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            Ok(bytes)
        }
        Some(path) => std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}")),
    }
}

/// Shows the job's log and progress on stderr as they happen.
#[derive(Debug)]
struct StderrObserver {
    bar: ProgressBar,
}

impl JobObserver for StderrObserver {
    fn log(&self, bytes: &[u8]) {
        self.bar.suspend(|| {
            let _ = std::io::stderr().lock().write_all(bytes);
        });
    }

    fn progress(&self, fraction: f32, message: &str) {
        self.bar.set_position((fraction * 1000.0) as u64);
        self.bar.set_message(message.to_string());
    }
}

/// The directory `cohort exec` caches compiled modules in: `explicit`
/// (`--cache-dir`, `$COHORT_CACHE_DIR`), else the user's cache directory.
/// `None`, with a warning, when it cannot be made or is not safe to load
/// compiled code from: it must be a directory owned by this user that no
/// one else may write to (compiled code runs as native code).
pub fn cache_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    let dir = match explicit {
        Some(dir) => dir.to_path_buf(),
        None => default_cache_dir()?,
    };
    match crate::runtime::module::private_dir(&dir) {
        Ok(()) => Some(dir),
        Err(why) => {
            eprintln!(
                "[cohort] warning: not caching compiled modules in {}: {why}",
                dir.display()
            );
            None
        }
    }
}

/// `$XDG_CACHE_HOME/cohort`, else `$HOME/.cache/cohort`.
fn default_cache_dir() -> Option<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|path| path.is_absolute())
    };
    match absolute("XDG_CACHE_HOME") {
        Some(cache) => Some(cache.join("cohort")),
        None => absolute("HOME").map(|home| home.join(".cache").join("cohort")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Args;

    /// The `[default: ...]` in a flag's help, parsed with `parse`.
    fn help_default<T>(name: &str, parse: fn(&str) -> Result<T, String>) -> T {
        let command = ExecArgs::augment_args(clap::Command::new("exec"));
        let arg = command
            .get_arguments()
            .find(|a| a.get_id() == name)
            .expect("flag exists");
        let help = arg.get_help().expect("flag has help").to_string();
        let text = help
            .split("[default: ")
            .nth(1)
            .and_then(|t| t.strip_suffix(']'));
        parse(text.unwrap_or_else(|| panic!("no default in `{help}`"))).unwrap()
    }

    #[test]
    fn help_text_defaults_match_the_runtime_defaults() {
        let defaults = JobLimits::default();
        assert_eq!(
            help_default("timeout", job_limits::parse_duration),
            defaults.timeout()
        );
        assert_eq!(
            help_default("memory", job_limits::parse_bytes),
            defaults.memory_bytes
        );
        assert_eq!(
            help_default("output_limit", job_limits::parse_bytes),
            defaults.output_bytes
        );
        assert_eq!(
            help_default("log_limit", job_limits::parse_bytes),
            defaults.log_bytes
        );
    }
}
