//! `perfbench search`: finds that batching pays on the `delay` model, writes its folder, leaves
//! the model's config as it was (at the end and on Ctrl-C), and refuses a target that refuses
//! loads without changing anything; a scenario's `[search]` table does what the flags do, the
//! flags going over it; `--max-configs` and `--max-minutes` cut a search short and say so; the
//! progress counts configurations; the written winner reproduces on `perfbench serve`; and a
//! generative search varies the twin's batcher under a TTFT budget.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfbench::server::serve::{start, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;

use super::common::{assert_fails, perfbench, stderr, ServeProcess};

/// A fixed cost of 2 ms and 50 µs per item, unbatched, one instance: batching must pay.
const DELAY: &str = r#"
backend: "delay"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "delay_us" value { string_value: "2000" } }
parameters { key: "delay_per_item_us" value { string_value: "50" } }
"#;

fn repository() -> tempfile::TempDir {
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("delay")).unwrap();
    std::fs::write(repo.path().join("delay/config.pbtxt"), DELAY).unwrap();
    repo
}

/// Short count windows: the test measures the search, not the model.
const WINDOWS: [&str; 8] =
    ["--measurement-mode", "count_windows", "--measurement-request-count", "40", "-s", "30", "-r", "6"];

/// Each configuration's best point under the budget, by (default?, instances, max batch size).
fn best_met(csv: &str) -> Vec<(bool, u32, u32, f64)> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    let (d, i, m, t, met) =
        (col("Default"), col("Instances"), col("Max Batch Size"), col("Inferences/Second"), col("Meets Budget"));
    let mut best: Vec<(bool, u32, u32, f64)> = Vec::new();
    for line in lines {
        let f: Vec<&str> = line.split(',').collect();
        if f[met] != "true" {
            continue;
        }
        let key = (f[d] == "true", f[i].parse().unwrap(), f[m].parse().unwrap());
        let throughput: f64 = f[t].parse().unwrap();
        match best.iter_mut().find(|b| (b.0, b.1, b.2) == key) {
            Some(b) => b.3 = b.3.max(throughput),
            None => best.push((key.0, key.1, key.2, throughput)),
        }
    }
    best
}

#[test]
fn search_finds_that_batching_pays_on_the_delay_model_and_writes_its_folder() {
    let repo = repository();
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("s");
    let args = [
        "search",
        "-m",
        "delay",
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--latency-budget",
        "p99=20ms",
        "--instances",
        "1",
        "--max-batch-size",
        "1,16",
        // Batches of 8 already triple the default's throughput, well inside the budget even on
        // a busy machine; the ramp goes on from there while the budget holds.
        "--concurrency",
        "1,8,16,32",
        "--out",
        dir.to_str().unwrap(),
    ];
    let run = perfbench(&[&args[..], &WINDOWS[..]].concat());
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let csv = std::fs::read_to_string(dir.join("search.csv")).unwrap();
    let best = best_met(&csv);
    let default = best.iter().find(|b| b.0).expect("the default configuration met the budget");
    let winner = best.iter().max_by(|a, b| a.3.total_cmp(&b.3)).unwrap();
    assert!(winner.2 > 1, "the winner batches: {winner:?}\n{csv}");
    assert!(winner.3 >= 3.0 * default.3, "winner {winner:?} vs default {default:?}\n{csv}");
    // The winner's config, in Triton's format, batches with the dynamic batcher.
    let pbtxt = std::fs::read_to_string(dir.join("best/delay/config.pbtxt")).unwrap();
    let config = perfbench::server::config::parse_pbtxt(&pbtxt, "delay").unwrap();
    assert_eq!(config.max_batch_size, winner.2 as i32, "{pbtxt}");
    assert!(pbtxt.contains("dynamic_batching"), "{pbtxt}");
    assert!(pbtxt.contains("delay_per_item_us"), "the model's parameters are kept: {pbtxt}");
    let md = std::fs::read_to_string(dir.join("search.md")).unwrap();
    for section in ["## Top 5", "## Pareto front", "## Default configuration"] {
        assert!(md.contains(section), "{section}:\n{md}");
    }
    for plot in ["search_pareto.png", "search_pareto.svg"] {
        assert!(std::fs::metadata(dir.join("plots").join(plot)).unwrap().len() > 1000, "{plot}");
    }
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("Best of") && !stdout.contains("Stopped early"), "{stdout}");
}

fn serve(repo: &Path, options: ServerOptions) -> (tokio::runtime::Runtime, RunningServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let options = ServerOptions { model_repository: Some(repo.to_path_buf()), ..options };
    let server = runtime.block_on(start(ServeConfig { options, ..Default::default() })).unwrap();
    (runtime, server)
}

fn config_json(server: &RunningServer) -> serde_json::Value {
    server.core.model_config_json("delay", "").unwrap()
}

#[test]
fn a_target_that_refuses_loads_gets_one_line_and_exit_2_and_keeps_its_config() {
    let repo = repository();
    let restricted =
        perfbench::server::access::RestrictedApi::new(vec!["model-repository:x-key=k".parse().unwrap()]).unwrap();
    let (runtime, server) = serve(repo.path(), ServerOptions { restricted, ..Default::default() });
    let before = config_json(&server);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("s");
    let url = server.http_addr.to_string();
    let args = ["search", "-m", "delay", "-u", &url, "--latency-budget", "p99=20ms", "--out", dir.to_str().unwrap()];
    let run = perfbench(&args);
    let err = stderr(&run);
    assert_eq!(run.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("refuses to load"), "{err}");
    assert_eq!(config_json(&server), before);
    assert!(!dir.exists(), "nothing written");
    runtime.block_on(server.shutdown());
}

#[test]
fn ctrl_c_restores_the_original_config_and_exits_130() {
    let repo = repository();
    let (runtime, server) = serve(repo.path(), ServerOptions::default());
    let before = config_json(&server);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("s");
    let url = server.http_addr.to_string();
    let args = [
        "search",
        "-m",
        "delay",
        "-u",
        &url,
        "--latency-budget",
        "p99=1s",
        "--mode",
        "brute",
        "--instances",
        "1,2",
        "--max-batch-size",
        "4,8",
        "--concurrency",
        "1,2",
        "--out",
        dir.to_str().unwrap(),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .args(WINDOWS)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once a candidate is applied: the model's config is no longer its own.
    let deadline = Instant::now() + Duration::from_secs(120);
    while config_json(&server)["max_batch_size"] == before["max_batch_size"] {
        assert!(Instant::now() < deadline, "no candidate was applied");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signalling the child this test spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert_eq!(config_json(&server), before, "{err}");
    assert!(dir.join("search.csv").is_file(), "the measured rows are written: {err}");
    runtime.block_on(server.shutdown());
}

/// A scenario of the delay model above, with `search` as its `[search]` table and short count
/// windows in `[online]`, written into `dir`.
fn scenario(dir: &Path, search: &str) -> std::path::PathBuf {
    let path = dir.join("search.toml");
    let text = format!(
        "name = \"s\"\n[model]\nname = \"delay\"\nconfig = '''{DELAY}'''\n[online]\n\
         measurement_mode = \"count_windows\"\nmeasurement_request_count = 40\nstability_percentage = 30.0\n\
         max_trials = 6\n[search]\n{search}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn printed_plan(args: &[&str]) -> perfbench::plan::search::SearchPlan {
    let run = perfbench(&[args, &["--print-plan"]].concat());
    assert_eq!(run.status.code(), Some(0), "{args:?}: {}", stderr(&run));
    perfbench::plan::search::SearchPlan::from_toml(&String::from_utf8_lossy(&run.stdout)).unwrap()
}

#[test]
fn a_scenario_search_table_does_what_the_flags_do_and_flags_go_over_it() {
    let file = printed_plan(&["search", "scenarios/delay_batching.toml", "--out", "x"]);
    let flags = printed_plan(&[
        "search",
        "-m",
        "delay_batching",
        "--latency-budget",
        "p99=20ms",
        "--objective",
        "throughput",
        "--mode",
        "quick",
        "--instances",
        "1,2",
        "--max-batch-size",
        "1,8,32,128",
        "--dynamic-batching",
        "on",
        "--queue-delay-us",
        "0,500",
        "--concurrency",
        "1..64",
        "--max-minutes",
        "10",
        "--measurement-request-count",
        "100",
        "--out",
        "x",
    ]);
    assert_eq!(file.search, flags.search);
    assert_eq!(file.sweep, flags.sweep, "the points are measured with [online]'s settings");
    assert!(file.model.config.as_deref().is_some_and(|c| c.contains("delay_per_item_us")));
    // The profile over the file, the flags over both.
    let over = printed_plan(&[
        "search",
        "scenarios/delay_batching.toml",
        "--profile",
        "quick",
        "--mode",
        "brute",
        "--max-configs",
        "2",
    ]);
    assert_eq!(over.search.mode, perfbench::plan::search::Mode::Brute);
    assert_eq!(over.search.max_configs, Some(2), "the flag, not the profile's 4");
    assert_eq!(over.search.space.instances, [1], "the profile's");
    assert_eq!(over.search.max_minutes, Some(10.0), "the file's");
    assert_eq!(over.search.space.concurrency, [1, 8, 32]);
    assert_eq!(over.sweep.measurement.request_count, 40, "the profile's [online]");
    let out = over.out().to_string_lossy();
    assert!(out.starts_with("results/delay_batching-quick-search-"), "{out}");
    // The printed plan runs as written: printed back the same, refused with a flag, and not
    // taken by `run`, which still runs the scenario's own sweep.
    let dir = tempfile::tempdir().unwrap();
    let plan_file = dir.path().join("plan.toml");
    std::fs::write(&plan_file, file.to_toml()).unwrap();
    let plan_path = plan_file.to_str().unwrap();
    assert_eq!(printed_plan(&["search", plan_path]), file);
    assert_fails(&["search", plan_path, "--instances", "4"], 2, "runs as written");
    assert_fails(&["run", plan_path], 2, "perfbench search");
    let run = perfbench(&["run", "scenarios/delay_batching.toml", "--print-plan"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
}

#[test]
fn a_bad_search_table_gets_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let budget = "latency_budget = \"p99=20ms\"\n";
    for (table, needle) in [
        (format!("{budget}instances = \"x\""), "--instances"),
        (format!("{budget}colour = 1"), "colour"),
        (format!("{budget}mode = \"fast\""), "--mode"),
        (format!("{budget}max_configs = 0"), "--max-configs"),
        (format!("{budget}max_batch_size = \"8..1\""), "--max-batch-size"),
        ("mode = \"brute\"".to_string(), "latency budget"),
    ] {
        let file = scenario(dir.path(), &table);
        assert_fails(&["search", file.to_str().unwrap()], 2, needle);
    }
    // A scenario with only a [search] table is not a run; one without it is not a search.
    let file = scenario(dir.path(), budget);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("[online]", "[profiles.x.online]")).unwrap();
    assert_fails(&["run", file.to_str().unwrap()], 2, "perfbench search");
    assert_fails(&["search", "scenarios/fastpitch.toml"], 2, "no [search] table");
    assert_fails(&["search", "scenarios/delay_batching.toml", "--profile", "slow"], 2, "no profile 'slow'");
}

/// Each distinct configuration of a search.csv, in order: (default?, instances, max batch size).
fn configurations(csv: &str) -> Vec<(bool, String, String)> {
    let mut seen = Vec::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let key = (f[0] == "true", f[1].to_string(), f[2].to_string());
        if !seen.contains(&key) {
            seen.push(key);
        }
    }
    seen
}

#[test]
fn max_configs_stops_after_exactly_n_configurations_says_so_and_the_progress_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    // The grid has 4 configurations and the file allows 3; the flag allows 2.
    let file = scenario(
        dir.path(),
        "latency_budget = \"p99=1s\"\nmode = \"brute\"\ninstances = [1, 2]\nmax_batch_size = [4, 8]\n\
         concurrency = [1, 2]\nmax_configs = 3",
    );
    let out = dir.path().join("s");
    let run = perfbench(&["search", file.to_str().unwrap(), "--max-configs", "2", "--out", out.to_str().unwrap()]);
    let (stdout, err) = (String::from_utf8_lossy(&run.stdout), stderr(&run));
    assert_eq!(run.status.code(), Some(0), "{err}");
    let configs = configurations(&std::fs::read_to_string(out.join("search.csv")).unwrap());
    assert_eq!(configs.iter().filter(|c| c.0).count(), 1, "the default: {configs:?}");
    assert_eq!(configs.iter().filter(|c| !c.0).count(), 2, "exactly two beside it: {configs:?}");
    let said = "Stopped early: --max-configs 2 reached after 2 configurations";
    assert!(stdout.contains(said), "{stdout}");
    assert!(std::fs::read_to_string(out.join("search.md")).unwrap().contains(said));
    // Off a terminal the progress bar is a line per configuration: done/planned, planned being
    // the default and the two --max-configs allows.
    let progress: Vec<&str> = err.lines().filter(|l| l.starts_with("search: ")).collect();
    assert_eq!(progress.len(), 3, "{err}");
    for (i, line) in progress.iter().enumerate() {
        assert!(line.starts_with(&format!("search: {}/3 configurations", i + 1)), "{line}");
    }
    assert!(progress[0].contains("ETA") && progress[0].contains("instances=1 max_batch_size=0"), "{}", progress[0]);
    assert!(progress[1].contains("instances=1 max_batch_size=4"), "{}", progress[1]);
}

#[test]
fn max_minutes_stops_between_configurations_and_restores_the_config() {
    let repo = repository();
    let (runtime, server) = serve(repo.path(), ServerOptions::default());
    let before = config_json(&server);
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("s");
    let url = server.http_addr.to_string();
    // 6 ms: over before the model's own configuration is measured, so no candidate starts.
    let args = [
        "search",
        "-m",
        "delay",
        "-u",
        &url,
        "--latency-budget",
        "p99=1s",
        "--mode",
        "brute",
        "--max-batch-size",
        "4,8",
        "--instances",
        "1",
        "--concurrency",
        "1",
        "--max-minutes",
        "0.0001",
        "--out",
        dir.to_str().unwrap(),
    ];
    let run = perfbench(&[&args[..], &WINDOWS[..]].concat());
    let (stdout, err) = (String::from_utf8_lossy(&run.stdout), stderr(&run));
    assert_eq!(run.status.code(), Some(0), "{err}");
    let configs = configurations(&std::fs::read_to_string(dir.join("search.csv")).unwrap());
    assert_eq!(configs, [(true, "1".to_string(), "0".to_string())], "only the default was measured");
    let said = "Stopped early: --max-minutes 0.0001 had passed";
    assert!(stdout.contains(said), "{stdout}");
    assert!(std::fs::read_to_string(dir.join("search.md")).unwrap().contains(said));
    assert_eq!(err.lines().filter(|l| l.starts_with("search: 1/3 configurations")).count(), 1, "{err}");
    assert_eq!(config_json(&server), before);
    runtime.block_on(server.shutdown());
}

/// One column of a CSV's rows.
fn column(csv: &str, name: &str) -> Vec<String> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let at = header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("no {name}: {header:?}"));
    lines.map(|l| l.split(',').nth(at).unwrap_or_default().to_string()).collect()
}

/// How both the search and the reproduction measure a point: intervals of throughput, p50 and
/// p99 within ±3%, or 10 s.
const REPRODUCE_WINDOWS: [&str; 2] = ["--stop-when", "ci=3%,max=10s"];

/// The reproduction's model: a fixed 40 ms and 1 ms per item, one instance. Batches of 8 take
/// 48 ms, so the winner's throughput (about 165/s) is set by the model's clock, and the client
/// and server spend well under a percent of a core on it: a loaded machine's late wake-ups
/// (milliseconds at a load average of 13 on 2 cores) are a small part of each batch. At 10 ms +
/// 250 µs (12 ms batches) such a machine moved the served figure by -21% and +7% in 3 runs.
const SLOW_DELAY: &str = r#"
backend: "delay"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "delay_us" value { string_value: "40000" } }
parameters { key: "delay_per_item_us" value { string_value: "1000" } }
"#;

/// One search with the bundled server (no `-u`: the common case) and one profile of the written
/// winner on a separate `perfbench serve --model-repository best/`: (the search's figure for the
/// winner measured again in fresh windows (winner.csv), the walk's best, the reproduction's, the
/// winner's concurrency).
fn search_then_reproduce(dir: &Path) -> (f64, f64, f64, u64) {
    let repo = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(repo.path().join("delay")).unwrap();
    std::fs::write(repo.path().join("delay/config.pbtxt"), SLOW_DELAY).unwrap();
    let out = dir.join("search");
    let args = [
        "search",
        "-m",
        "delay",
        "--model-repository",
        repo.path().to_str().unwrap(),
        "--latency-budget",
        "p99=1s",
        "--instances",
        "1",
        "--max-batch-size",
        "1,8",
        "--concurrency",
        "1,32",
        "--out",
        out.to_str().unwrap(),
    ];
    let searched = perfbench(&[&args[..], &REPRODUCE_WINDOWS[..]].concat());
    assert_eq!(searched.status.code(), Some(0), "{}", stderr(&searched));
    eprintln!("{}", String::from_utf8_lossy(&searched.stdout).trim());
    let csv = std::fs::read_to_string(out.join("search.csv")).unwrap();
    let (met, throughput, concurrency) =
        (column(&csv, "Meets Budget"), column(&csv, "Inferences/Second"), column(&csv, "Concurrency"));
    let (found, at) = (0..met.len())
        .filter(|&i| met[i] == "true")
        .map(|i| (throughput[i].parse::<f64>().unwrap(), concurrency[i].parse::<u64>().unwrap()))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .expect("a configuration met the budget");
    let winner = std::fs::read_to_string(out.join("winner.csv")).expect("the search measured its winner again");
    assert_eq!(column(&winner, "Concurrency"), [at.to_string()], "the winner is measured at its own concurrency");
    let confirmed: f64 = column(&winner, "Inferences/Second")[0].parse().unwrap();
    let best = out.join("best");
    let server = ServeProcess::start(&["--model-repository", best.to_str().unwrap()]);
    let again_dir = dir.join("again");
    let level = at.to_string();
    let args =
        ["online", "-u", &server.http, "-m", "delay", "--concurrency", &level, "--out", again_dir.to_str().unwrap()];
    let again = perfbench(&[&args[..], &REPRODUCE_WINDOWS[..]].concat());
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    let report = std::fs::read_to_string(again_dir.join("report.csv")).unwrap();
    let reproduced: f64 = column(&report, "Inferences/Second")[0].parse().unwrap();
    (confirmed, found, reproduced, at)
}

/// Acceptance (issues 16 and 33): the winner of `perfbench search` (bundled server, no `-u`),
/// served by a separate `perfbench serve --model-repository best/`, gives the throughput the
/// search wrote for it (winner.csv: measured again in fresh windows, so not the best of the
/// walk's noisy points) within 5%, on one attempt. The space (max batch 8 against 32 clients:
/// three full batches wait behind the one executing) makes the winner saturate its one instance
/// with full batches, so its throughput is the model's (8 per 48 ms); the budget (p99 1 s) is
/// far above the four executions such a point waits (about 200 ms), and below the 32 that one
/// request at a time makes the default's point wait (1.3 s).
///
/// About two minutes of real measurements, so it is ignored by plain `cargo test`; `.ci/run` runs
/// it in its own stage: `cargo test --test it -- --ignored search::the_winner_reproduces`.
#[test]
#[ignore = "real measurements, about two minutes: run by .ci/run's search reproduction stage"]
fn the_winner_reproduces_on_perfbench_serve_within_5_percent() {
    let dir = tempfile::tempdir().unwrap();
    let (written, walked, reproduced, at) = search_then_reproduce(dir.path());
    let off = (reproduced - written) / written * 100.0;
    eprintln!(
        "reproduction: search wrote {written:.1} infer/s (the walk's best: {walked:.1}), perfbench serve with \
         best/ {reproduced:.1} infer/s at concurrency {at} ({off:+.1}%)"
    );
    assert_eq!(at, 32, "the winner saturates its instance with full batches");
    assert!(
        off.abs() <= 5.0,
        "the winner did not reproduce within 5%: {written:.1} written, {reproduced:.1} served again"
    );
}

/// A generative search (`--endpoint-type`) against the bundled server's twin: each point is a
/// generative profile, the space is the twin's continuous batcher (`max_num_seqs`), the budget
/// is on TTFT and the ranking on output tokens/s. One running sequence at a time cannot keep up
/// with eight streams, so it must lose to eight by far (the twin's step time is a sleep, so the
/// ratio holds on a slow machine too).
#[test]
fn a_generative_search_varies_the_twins_batcher_under_a_ttft_budget_and_ranks_by_tokens() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("g");
    let args = [
        "search",
        "-m",
        "llm",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--latency-budget",
        "ttft_p99=20s",
        "--parameter",
        "max_num_seqs=1,8",
        "--mode",
        "brute",
        "--concurrency",
        "8",
        "--request-count",
        "16",
        "--isl",
        "16",
        "--osl",
        "8",
        "--out",
        dir.to_str().unwrap(),
    ];
    let run = perfbench(&args);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let csv = std::fs::read_to_string(dir.join("search.csv")).unwrap();
    let seqs = column(&csv, "max_num_seqs");
    assert_eq!(seqs, ["256", "1", "8"], "the default first, then the grid\n{csv}");
    let tokens: Vec<f64> = column(&csv, "Output Tokens/Second").iter().map(|t| t.parse().unwrap()).collect();
    assert!(tokens[1] * 2.0 < tokens[2], "one sequence at a time vs eight: {tokens:?}\n{csv}");
    assert!(column(&csv, "TTFT p99").iter().all(|t| t.parse::<f64>().unwrap() > 0.0), "{csv}");
    assert!(column(&csv, "Meets Budget").iter().all(|m| m == "true"), "{csv}");
    // The winner is a batcher of eight or more, written with the twin's other parameters.
    let pbtxt = std::fs::read_to_string(dir.join("best/llm/config.pbtxt")).unwrap();
    let config = perfbench::server::config::parse_pbtxt(&pbtxt, "llm").unwrap();
    let seqs = perfbench::server::config::parameter(&config, "max_num_seqs").unwrap();
    assert!(seqs == "8" || seqs == "256", "{pbtxt}");
    assert!(perfbench::server::config::parameter(&config, "step_us").is_some(), "{pbtxt}");
    // Each point leaves its AIPerf files; the winner was measured again.
    assert!(dir.join("points/config1/c8/concurrency8/profile_export_aiperf.json").is_file());
    let winner = std::fs::read_to_string(dir.join("winner.csv")).unwrap();
    assert!(column(&winner, "Output Tokens/Second")[0].parse::<f64>().unwrap() > 0.0, "{winner}");
    let md = std::fs::read_to_string(dir.join("search.md")).unwrap();
    assert!(md.contains("| max_num_seqs |") && md.contains("Output tokens/s") && md.contains("ttft_p99"), "{md}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("output tokens/s"), "{stdout}");

    // What only a generative sweep measures is refused elsewhere; a parameter the model lacks too.
    assert_fails(&["search", "-m", "simple", "--latency-budget", "itl_p99=1s"], 2, "needs a generative sweep");
    let lacking = dir.with_file_name("lacking");
    let lacking = ["search", "-m", "llm", "--endpoint-type", "chat", "--latency-budget", "ttft_p99=1s"]
        .into_iter()
        .chain(["--parameter", "max_num_seq=1,2", "--out", lacking.to_str().unwrap()])
        .collect::<Vec<_>>();
    assert_fails(&lacking, 2, "has no parameter 'max_num_seq'");
}
