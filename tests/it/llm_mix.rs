//! Several models in one generative load (`-m a,b`), checked against the twin's own records of
//! which model served what, and the over-saturation stop on a twin whose capacity the test sets.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::common::{perfbench, ServeProcess};

fn succeeds(args: &[&str]) -> String {
    let out = perfbench(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{args:?}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    stdout
}

fn jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// How many lines name each model under `key`.
fn per_model(lines: &[Value], key: impl Fn(&Value) -> &Value) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for line in lines {
        *counts.entry(key(line).as_str().unwrap_or("<none>").to_string()).or_insert(0) += 1;
    }
    counts
}

/// The cells of the console's per-model table row that starts with `name`.
fn table_row<'a>(stdout: &'a str, name: &str) -> Vec<&'a str> {
    let table = stdout.split("Per model").nth(1).unwrap_or_else(|| panic!("no per-model table: {stdout}"));
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&name))
        .unwrap_or_else(|| panic!("no row {name}: {stdout}"))
}

#[test]
fn a_weighted_mix_splits_one_load_as_the_twins_own_records_count_it() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("requests.jsonl");
    let serve = ServeProcess::start(&["--models", "llm,llm_reasoning", "--record-requests", record.to_str().unwrap()]);
    let artifacts = dir.path().join("mix");
    let url = format!("http://{}", serve.http);
    let stdout = succeeds(&[
        "llm",
        "-u",
        &url,
        "-m",
        "llm,llm_reasoning",
        "--model-selection-strategy",
        "weighted",
        "--model-weights",
        "llm:3,llm_reasoning:1",
        "--streaming",
        "--concurrency",
        "4",
        "--request-count",
        "80",
        "--output-tokens-mean",
        "4",
        "--synthetic-input-tokens-mean",
        "16",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let server = per_model(&jsonl(&record), |l| &l["model"]);
    let client = per_model(&jsonl(&artifacts.join("profile_export.jsonl")), |l| &l["metadata"]["model_name"]);
    assert_eq!(server, client, "the client's split is the one the server served");
    assert_eq!(server.values().sum::<usize>(), 80, "{server:?}");
    // The split asked for, within four standard deviations of a binomial share of 80.
    let share = server["llm"] as f64 / 80.0;
    let bound = 4.0 * (0.75f64 * 0.25 / 80.0).sqrt();
    assert!((share - 0.75).abs() < bound, "llm's share {share} of {server:?}");
    // The console's rows: each model's count is the server's, and they add up to the total.
    for (model, count) in &server {
        assert_eq!(table_row(&stdout, model)[1], count.to_string(), "{model}: {stdout}");
    }
    assert_eq!(table_row(&stdout, "all")[1], "80", "{stdout}");
    let rates: f64 = server.keys().map(|m| table_row(&stdout, m)[4].parse::<f64>().unwrap()).sum();
    let total: f64 = table_row(&stdout, "all")[4].parse().unwrap();
    assert!((rates - total).abs() <= 0.011, "one clock: the models' requests/s add up to the total's: {stdout}");
}

#[test]
fn a_mixed_sweep_writes_a_row_per_model_that_adds_up_and_readers_keep_the_levels() {
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("sweep");
    succeeds(&[
        "llm",
        "-m",
        "llm,llm_reasoning",
        "--streaming",
        "--concurrency",
        "1,2",
        "--request-count",
        "6",
        "--output-tokens-mean",
        "4",
        "--synthetic-input-tokens-mean",
        "16",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(artifacts.join("report.csv")).unwrap();
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let column = |name: &str| lines[0].iter().position(|h| *h == name).unwrap_or_else(|| panic!("{name}: {csv}"));
    let (model, requests) = (column("Model"), column("Requests"));
    assert_eq!(lines.len(), 1 + 2 * 3, "a total and two models per level: {csv}");
    for level in lines[1..].chunks(3) {
        let names: Vec<&str> = level.iter().map(|row| row[model]).collect();
        assert_eq!(names, ["all", "llm", "llm_reasoning"], "{csv}");
        // Round-robin over 6 one-turn sessions: exactly 3 each.
        let counts: Vec<&str> = level.iter().map(|row| row[requests]).collect();
        assert_eq!(counts, ["6", "3", "3"], "{csv}");
    }
    let rows = perfbench::results::csv::read_csv(&artifacts.join("report.csv"), perfbench::results::csv::Unit::Us)
        .expect("report.csv reads");
    assert_eq!(rows.len(), 2, "readers keep one row per level, not the models' parts");
    let md = std::fs::read_to_string(artifacts.join("report.md")).unwrap();
    assert!(md.contains("concurrency 2 · llm_reasoning"), "{md}");
}

/// The zoo's `llm` made slow and narrow: two sequences at a time, 20 ms a step (about 16
/// requests/s of 5 tokens).
fn slow_repository(dir: &Path) {
    let zoo = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/server/zoo/llm.pbtxt")).unwrap();
    let slow = zoo
        .replace(
            r#"key: "max_num_seqs" value { string_value: "256" }"#,
            r#"key: "max_num_seqs" value { string_value: "2" }"#,
        )
        .replace(
            r#"key: "step_us" value { string_value: "7000" }"#,
            r#"key: "step_us" value { string_value: "20000" }"#,
        );
    assert_ne!(slow, zoo, "the zoo's llm still has the parameters this test narrows");
    std::fs::create_dir_all(dir.join("slow")).unwrap();
    std::fs::write(dir.join("slow/config.pbtxt"), slow).unwrap();
}

#[test]
fn the_over_saturation_stop_marks_the_level_past_capacity_and_not_the_one_under_it() {
    let dir = tempfile::tempdir().unwrap();
    let repository = dir.path().join("models");
    slow_repository(&repository);
    let serve = ServeProcess::start(&["--model-repository", repository.to_str().unwrap(), "--models", "slow"]);
    let artifacts = dir.path().join("watched");
    let stdout = succeeds(&[
        "online",
        "-u",
        &serve.http,
        "-m",
        "slow",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--request-rate-range",
        "4:40:36",
        "--benchmark-duration",
        "12",
        "--output-tokens-mean",
        "5",
        "--synthetic-input-tokens-mean",
        "16",
        "--over-saturation",
        "min_seconds=3,min_latency=0.3",
        "--artifact-dir",
        artifacts.to_str().unwrap(),
    ]);
    let csv = std::fs::read_to_string(artifacts.join("report.csv")).unwrap();
    let lines: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    let saturated = lines[0].iter().position(|h| *h == "Saturated").unwrap_or_else(|| panic!("{csv}"));
    let marks: Vec<(&str, &str)> = lines[1..].iter().map(|row| (row[0], row[saturated])).collect();
    assert_eq!(marks, [("4", "no"), ("40", "yes")], "4/s is under the twin's ~16/s, 40/s far over it: {csv}\n{stdout}");
    let md = std::fs::read_to_string(artifacts.join("report.md")).unwrap();
    assert!(md.contains("request rate 40/s (saturated)") && md.contains("SATURATED"), "{md}");
}

#[test]
fn the_stop_refuses_a_closed_loop_and_bad_settings() {
    for (args, needle) in [
        (&["--concurrency", "2", "--over-saturation"][..], "open loop"),
        (&["--request-rate", "2", "--over-saturation", "mode=stop"], "--over-saturation"),
        (&["-m", "a,b", "--model-selection-strategy", "weighted"], "--model-weights"),
        (&["-m", "a,b", "--model-weights", "a:1"], "no weight to 'b'"),
    ] {
        let mut all = vec!["llm"];
        if !args.contains(&"-m") {
            all.extend(["-m", "llm"]);
        }
        all.extend_from_slice(args);
        let out = perfbench(&all);
        assert_eq!(out.status.code(), Some(2), "{all:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(needle) && stderr.lines().count() <= 3, "{all:?}: {stderr}");
    }
}
