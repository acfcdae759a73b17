//! The command line: one clap subcommand per job. Each command module owns its flags and its
//! `run`; this file only dispatches and turns errors into one line and an exit code.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "perfbench", version, about = "Load generator and latency profiler for KServe v2 / Triton servers")]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `perfbench=debug`.
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the bundled KServe v2 inference server (HTTP, gRPC, metrics).
    Serve(crate::server::serve::ServeArgs),
    /// Compare a run with a baseline and fail on a regression beyond thresholds and noise.
    Gate(crate::gate::GateArgs),
    /// Profile a model the way perf_analyzer does (same flags, same CSV).
    Profile(Box<crate::profile::ProfileArgs>),
    /// Re-render report.md and the plots from a report.csv, perf_analyzer or seed CSV.
    Report(crate::report::command::ReportArgs),
    /// Offline sweep: concurrency 1, a static batch per request, over batch sizes.
    Offline(Box<crate::sweep::OfflineArgs>),
    /// Online sweep: a fixed client batch over concurrencies, the server batching.
    Online(Box<crate::sweep::OnlineArgs>),
    /// Run a scenario file (offline and online sweeps), optionally gated against a baseline.
    Run(crate::scenario::RunArgs),
}

/// Exit code for bad input (a bad flag, a missing file, an unreachable server).
pub const EXIT_BAD_INPUT: u8 = 2;

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout with exit 0; a usage error is one line.
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.to_string();
            eprintln!("{}", text.lines().next().unwrap_or("error: bad command line"));
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    match run(cli.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&e));
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ").replace('\n', " ")
}

fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => crate::server::serve::run(args),
        Command::Gate(args) => Ok(crate::gate::run(&args)?),
        Command::Profile(args) => crate::profile::run(*args),
        Command::Report(args) => crate::report::command::run(args),
        Command::Offline(args) => crate::sweep::run_offline(*args),
        Command::Online(args) => crate::sweep::run_online(*args),
        Command::Run(args) => crate::scenario::run(args),
    }
}
