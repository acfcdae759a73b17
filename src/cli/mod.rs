//! The command line: one clap subcommand per job. `profile`, `offline`, `online` and `run`
//! resolve their flags into a [`Plan`] (exit 2 on any bad input, before anything starts), then
//! either print it (`--print-plan`) or hand it to [`crate::run::execute`]. This is the only place
//! argv is parsed.

pub mod common;
pub mod help;
pub mod llm;
pub mod pa_compat;
pub mod pa_openai;
pub mod profile;
pub mod search;
pub mod shard;
pub mod sweep;
pub mod tls;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, FromArgMatches, Parser, Subcommand};

use crate::plan::scenario::Scenario;
use crate::plan::settings::default_out;
use crate::plan::{validate, FileKind, Gate, Plan, PlanError, Target, PLAN_FILE};
use crate::run::{EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_REGRESSION, EXIT_TARGET};

const EXIT_CODES: &str = "Exit codes: 0 ok; 1 gate regression; 2 usage or bad input; \
3 the target failed (unreachable, died, stopped answering, refused); 130 interrupted \
(Ctrl-C or SIGTERM; the rows measured so far are written).";

#[derive(Parser, Debug)]
#[command(
    name = "perfbench",
    version,
    about = "Load generator and latency profiler for KServe v2 / Triton servers",
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// Log filter (tracing `EnvFilter` syntax), e.g. `info` or `perfbench=debug`.
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
    #[command(flatten)]
    pub shard: shard::ShardArgs,
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
    #[command(after_help = EXIT_CODES)]
    Profile(Box<profile::ProfileArgs>),
    /// Re-render report.md and the plots from a report.csv, perf_analyzer or seed CSV.
    Report(crate::report::command::ReportArgs),
    /// Overlay runs (or seed tables) in plots and judge each against a baseline as the gate does.
    Compare(crate::compare::CompareArgs),
    /// Offline sweep: concurrency 1, a static batch per request, over batch sizes.
    #[command(after_help = EXIT_CODES)]
    Offline(Box<sweep::OfflineArgs>),
    /// Online sweep: a fixed client batch over concurrencies, the server batching.
    #[command(after_help = EXIT_CODES)]
    Online(Box<sweep::OnlineArgs>),
    /// Run a scenario file or a plan file (as --print-plan writes it), optionally gated.
    #[command(after_help = EXIT_CODES)]
    Run(RunArgs),
    /// Merge the results folders of a run's shards (`--shard K/N`) into one results folder.
    Merge(shard::MergeArgs),
    /// Find the model configuration (instances, max batch size, dynamic batching) with the most
    /// throughput under a latency budget, applied through the repository API.
    #[command(after_help = EXIT_CODES)]
    Search(Box<search::SearchArgs>),
    /// Profile a generative model as AIPerf does (TTFT, ITL, tokens/s; AIPerf's files).
    #[command(after_help = EXIT_CODES)]
    Llm(Box<llm::LlmArgs>),
}

/// `perfbench run FILE` or `perfbench run --resume DIR`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A scenario (e.g. scenarios/wide_deep.toml) or a plan written by --print-plan.
    #[arg(required_unless_present = "resume")]
    pub file: Option<PathBuf>,
    /// Go on with the interrupted run whose results folder is DIR: the plan kept there runs
    /// again, and every point already in a sweep's report.csv is kept rather than measured.
    #[arg(long = "resume", value_name = "DIR", conflicts_with_all = ["file", "profile", "out", "url"])]
    pub resume: Option<PathBuf>,
    /// A named profile of the scenario (e.g. quick), merged over its sections.
    #[arg(long = "profile")]
    pub profile: Option<String>,
    /// Results folder (default: results/<scenario>[-<profile>]-<timestamp>/).
    #[arg(long = "out")]
    pub out: Option<PathBuf>,
    /// Gate the run against a baseline run folder (with offline/ and online/) or a report.csv,
    /// with the scenario's [gate] thresholds; exits 1 on a regression.
    #[arg(long = "gate", value_name = "BASELINE")]
    pub gate: Option<PathBuf>,
    /// Server address (host:port). Without it, the bundled server runs in-process.
    #[arg(short = 'u', long = "url")]
    pub url: Option<String>,
    /// Print the resolved plan as TOML and exit without running it.
    #[arg(long = "print-plan")]
    pub print_plan: bool,
}

impl RunArgs {
    /// The plan of the file: a plan file as written, or a scenario resolved with the flags.
    pub fn plan(&self) -> Result<Plan, PlanError> {
        if let Some(dir) = &self.resume {
            return self.resumed_plan(dir);
        }
        let file = self.file.as_deref().expect("clap requires FILE without --resume");
        let text = validate::read_named_file(file)?;
        let kind = FileKind::of(&text);
        if kind == FileKind::SearchPlan {
            return Err(validate::search_plan_given_to_run(file));
        }
        if kind == FileKind::Plan {
            let changed = self.profile.is_some() || self.out.is_some() || self.url.is_some();
            validate::check_runs_as_written(file, "plan", "--profile, --out and -u", changed)?;
            let mut plan = Plan::from_toml(&text).map_err(|e| validate::in_file("plan", file, e))?;
            if let Some(baseline) = &self.gate {
                plan.gate = Some(Gate { baseline: baseline.clone(), thresholds: Default::default() });
            }
            return Ok(plan);
        }
        let scenario = Scenario::parse(&text, file).map_err(validate::bad_scenario)?;
        let out = self.out.clone().unwrap_or_else(|| {
            let profile = self.profile.as_deref().map(|p| format!("-{p}")).unwrap_or_default();
            default_out(&format!("{}{profile}", scenario.name))
        });
        let target = match &self.url {
            Some(url) => Target::Remote { url: url.clone() },
            None => Target::Embedded { model_repository: None },
        };
        let mut plan = scenario.plan(self.profile.as_deref(), target, &out).map_err(validate::bad_scenario)?;
        plan.gate = self.gate.clone().map(|baseline| Gate { baseline, thresholds: scenario.gate });
        Ok(plan)
    }

    /// The plan a results folder keeps ([`PLAN_FILE`]), marked to resume.
    fn resumed_plan(&self, dir: &Path) -> Result<Plan, PlanError> {
        let file = dir.join(PLAN_FILE);
        let text = validate::read_kept_plan(dir, PLAN_FILE)?;
        let mut plan = Plan::from_toml(&text).map_err(|e| validate::in_file("plan", &file, e))?;
        plan.resume = true;
        if let Some(baseline) = &self.gate {
            let thresholds = plan.gate.take().map(|g| g.thresholds).unwrap_or_default();
            plan.gate = Some(Gate { baseline: baseline.clone(), thresholds });
        }
        Ok(plan)
    }
}

pub fn main() -> ExitCode {
    // reqwest is built without a crypto provider of its own: install ring's once, first.
    crate::proto::install_crypto_provider();
    let cli = match parse(argv_as_invoked(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout with exit 0; a usage error is one line.
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            eprintln!("{}", usage_error(&e));
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        // Escape codes only for a terminal: logs kept in a file (CI) stay readable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    run(cli.command, &cli.shard)
}

/// The command line parsed with the help that `help::command` lays out (grouped by job, with
/// an example per subcommand).
fn parse<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut matches = help::command().try_get_matches_from(argv)?;
    Cli::from_arg_matches_mut(&mut matches)
}

/// The command line, with `profile` put after the program name when it was invoked as
/// `perf_analyzer` (a symlink), so tools that run perf_analyzer from `PATH` (genai-perf) run us.
pub fn argv_as_invoked(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = args.into_iter().collect();
    let invoked = args.first().and_then(|a| Path::new(a).file_name().map(|n| n.to_os_string()));
    if invoked.is_some_and(|n| n == "perf_analyzer") {
        args.insert(1, "profile".into());
    }
    args
}

/// Parses a whole command line (program name first) of `profile`, `offline`, `online` or `run`
/// into its plan, exactly as `main` does; for tests and embedders.
pub fn parse_plan<I, T>(argv: I) -> Result<Plan, String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = parse(argv).map_err(|e| usage_error(&e))?;
    let plan = match cli.command {
        Command::Profile(args) => args.plan(),
        Command::Offline(args) => args.plan(),
        Command::Online(args) => args.plan(),
        Command::Run(args) => args.plan(),
        _ => return Err("not a measuring command".into()),
    };
    let plan = cli.shard.apply(plan);
    plan.map_err(|e| e.to_string())
}

/// A command-line error on one line. A value its flag's parser refused is told in the parser's
/// own words (they name the flag), as the plan words any other bad value.
pub(crate) fn usage_error(e: &clap::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) if e.kind() == clap::error::ErrorKind::ValueValidation => format!("error: {why}"),
        _ => e.to_string().lines().next().unwrap_or("error: bad command line").to_string(),
    }
}

/// The error and its causes on one line.
pub fn one_line(e: &anyhow::Error) -> String {
    e.chain().map(|c| c.to_string()).collect::<Vec<_>>().join(": ").replace('\n', " ")
}

fn fail(message: impl std::fmt::Display, code: u8) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(code)
}

/// Resolves a plan, then prints it or runs it.
fn plan_or_run(plan: Result<Plan, PlanError>, print_plan: bool) -> ExitCode {
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => return fail(e, EXIT_BAD_INPUT),
    };
    if print_plan {
        print!("{}", plan.to_toml());
        return ExitCode::SUCCESS;
    }
    match crate::run::execute(&plan) {
        Ok(code) => code,
        Err(e) => fail(&e, e.exit_code()),
    }
}

fn run(command: Command, sharding: &shard::ShardArgs) -> ExitCode {
    let other = |outcome: anyhow::Result<ExitCode>| match outcome {
        Ok(code) => code,
        Err(e) => fail(one_line(&e), EXIT_BAD_INPUT),
    };
    let measuring = matches!(command, Command::Profile(_) | Command::Offline(_) | Command::Online(_) | Command::Run(_));
    if sharding.given() && !measuring {
        return fail("--shard and --shards apply to profile, offline, online and run", EXIT_BAD_INPUT);
    }
    let shard = |plan| sharding.apply(plan);
    match command {
        Command::Serve(args) => other(crate::server::serve::run(args)),
        Command::Gate(args) => other(crate::gate::run(&args).map_err(Into::into)),
        Command::Report(args) => other(crate::report::command::run(args)),
        Command::Compare(args) => other(crate::compare::run(args)),
        Command::Profile(args) if args.pa.version => {
            // perf_analyzer's `--version` prints its version and exits, whatever else is given.
            println!("perfbench {} (perf_analyzer 2.50 command line)", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Command::Profile(args) if args.pa.service_kind == "openai" => pa_openai::run(args.openai()),
        Command::Profile(args) => plan_or_run(shard(args.plan()), args.common.print_plan),
        Command::Offline(args) => plan_or_run(shard(args.plan()), args.common.flags.print_plan),
        Command::Online(args) => plan_or_run(shard(args.plan()), args.common.flags.print_plan),
        Command::Run(args) => plan_or_run(shard(args.plan()), args.print_plan),
        Command::Merge(args) => match crate::run::merge::merge(&args.dirs, &args.out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(one_line(&e), EXIT_BAD_INPUT),
        },
        Command::Llm(args) => llm::run(&args),
        Command::Search(args) => match args.plan() {
            Err(e) => fail(e, EXIT_BAD_INPUT),
            Ok(plan) if args.flags.print_plan => {
                print!("{}", plan.to_toml());
                ExitCode::SUCCESS
            }
            Ok(plan) => match crate::search::run(&plan) {
                Ok(code) => code,
                Err(e) => fail(&e, e.exit_code()),
            },
        },
    }
}

// The codes the help text names are the ones the run uses.
const _: () = assert!(EXIT_REGRESSION == 1 && EXIT_BAD_INPUT == 2 && EXIT_TARGET == 3 && EXIT_INTERRUPTED == 130);
