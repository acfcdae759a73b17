//! `perfbench search`: finds that batching pays on the `delay` model, writes its folder, leaves
//! the model's config as it was (at the end and on Ctrl-C), and refuses a target that refuses
//! loads without changing anything.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use perfbench::server::serve::{start, RunningServer, ServeConfig};
use perfbench::server::ServerOptions;

use super::common::{perfbench, stderr};

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
    assert!(String::from_utf8_lossy(&run.stdout).contains("Best of"), "{}", String::from_utf8_lossy(&run.stdout));
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
