//! The `cohort` command line.

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// cohort: run WebAssembly jobs, safely sandboxed.
#[derive(Debug, Parser)]
#[command(name = "cohort", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one job module locally: output to stdout, log and progress to
    /// stderr. Exit code: 0 ok, 1 job error, 2 usage or invalid module,
    /// 3 trap, 4 limit hit, 5 internal error.
    Exec(cohort::exec::ExecArgs),
    /// Draw the Mandelbrot set from many small jobs and write a PNG.
    Demo(cohort::demo::DemoArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("COHORT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
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
    runtime.block_on(async {
        match cli.command {
            Command::Exec(args) => cohort::exec::run(args).await.into(),
            Command::Demo(args) => match cohort::demo::run(args).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => {
                    eprintln!("error: {error:#}");
                    ExitCode::FAILURE
                }
            },
        }
    })
}
