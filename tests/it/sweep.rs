//! `perfbench offline`, `online` and `run` end to end against the embedded server: each writes
//! a complete results folder whose rows are consistent; bad syntax and bad scenarios exit 2.

use std::path::Path;
use std::process::Output;

use crate::common::{perfbench, stderr};
use perfbench::results::csv::REPORT_COLUMNS;
use perfbench::results::{LoadPoint, ReportRow};

/// Runs the sweep `args` with short windows, writing its results folder to `out`.
fn sweep(args: &[&str], out: &Path) -> Output {
    let mut argv = args.to_vec();
    argv.extend(["--measurement-request-count", "20", "--warmup-request-count", "2", "--out", out.to_str().unwrap()]);
    perfbench(&argv)
}

/// Checks the folder's files and returns its rows.
fn check_folder(dir: &Path, plots: &[&str]) -> Vec<ReportRow> {
    for file in ["perf_analyzer.csv", "report.csv", "report.md", "report.toml"] {
        assert!(dir.join(file).is_file(), "{} lacks {file}", dir.display());
    }
    for plot in plots {
        let png = dir.join("plots").join(format!("{plot}.png"));
        assert!(png.is_file(), "missing {}", png.display());
    }
    let csv = std::fs::read_to_string(dir.join("report.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for column in REPORT_COLUMNS {
        assert!(header.contains(&column), "report.csv lacks '{column}'");
    }
    let pa = std::fs::read_to_string(dir.join("perf_analyzer.csv")).unwrap();
    assert!(pa.starts_with("Concurrency,Inferences/Second,"), "{pa}");
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    for parameter in ["Backend", "Precision", "Max batch size", "Number of model instances"] {
        assert!(md.contains(parameter), "report.md lacks {parameter}");
    }
    let (rows, _) = perfbench::report::read_table(&dir.join("report.csv")).unwrap();
    assert_eq!(pa.lines().count(), rows.len() + 1, "one CSV line per row");
    for row in &rows {
        let stages = row.client_send_us
            + row.network_us
            + row.server_queue_us
            + row.server_compute_input_us
            + row.server_compute_infer_us
            + row.server_compute_output_us
            + row.client_recv_us;
        // Network is what remains of the average, floored at 0: the stages add up to the
        // average unless the floor applied (then they may exceed it).
        let rounding = 0.01 * row.avg_us + 5.0;
        if row.network_us > 0.0 {
            assert!((stages - row.avg_us).abs() <= rounding, "{row:?}");
        } else {
            assert!(stages + rounding >= row.avg_us, "{row:?}");
        }
        assert!(row.throughput > 0.0, "{row:?}");
        assert_eq!(row.failed, 0, "{row:?}");
    }
    rows
}

#[test]
fn offline_sweep_writes_a_complete_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("offline");
    let run = sweep(&["offline", "-m", "identity", "--batch-sizes", "1,8,16", "--shape", "INPUT0:16"], &out);
    assert!(run.status.success(), "{}", stderr(&run));
    let rows = check_folder(&out, &["throughput_vs_batch", "latency_vs_batch", "throughput_vs_latency"]);
    let points: Vec<(u64, LoadPoint)> = rows.iter().map(|r| (r.batch, r.load)).collect();
    assert_eq!(points, [1, 8, 16].map(|b| (b, LoadPoint::Concurrency(1))).to_vec());
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("Inferences/Second"), "summary table");
}

#[test]
fn online_sweep_writes_a_complete_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let run = sweep(&["online", "-m", "identity", "-b", "2", "--concurrency", "8..64", "--shape", "INPUT0:16"], &out);
    assert!(run.status.success(), "{}", stderr(&run));
    let rows = check_folder(&out, &["latency_vs_concurrency"]);
    let levels: Vec<LoadPoint> = rows.iter().map(|r| r.load).collect();
    assert_eq!(levels, (1..=8).map(|i| LoadPoint::Concurrency(8 * i)).collect::<Vec<_>>());
    assert!(rows.iter().all(|r| r.batch == 2));
}

#[test]
fn online_sweep_takes_headers_streaming_and_metrics_flags() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let base = ["online", "-m", "identity", "--concurrency", "1,2", "--shape", "INPUT0:16"];
    let mut args = base.to_vec();
    args.extend(["-i", "grpc", "--streaming", "-H", "x-perfbench-test: 1", "--collect-metrics"]);
    let run = sweep(&args, &out);
    assert!(run.status.success(), "{}", stderr(&run));
    check_folder(&out, &["latency_vs_concurrency"]);
    // --collect-metrics adds perf_analyzer's GPU columns (empty on a machine without GPUs).
    let pa = std::fs::read_to_string(out.join("perf_analyzer.csv")).unwrap();
    assert!(
        pa.lines()
            .next()
            .unwrap()
            .ends_with(",Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory"),
        "{pa}"
    );

    let bad: [(&[&str], &str); 2] =
        [(&["-i", "grpc", "-H", "no-colon"], "bad -H"), (&["-i", "http"], "Streaming is only allowed with gRPC")];
    for (extra, needle) in bad {
        let mut args = base.to_vec();
        args.extend(["--streaming", "--out", out.to_str().unwrap()]);
        args.extend(extra);
        let run = perfbench(&args);
        assert_eq!(run.status.code(), Some(2), "{extra:?}");
        assert!(stderr(&run).contains(needle), "{}", stderr(&run));
        assert_eq!(stderr(&run).trim().lines().count(), 1, "{}", stderr(&run));
    }
}

#[test]
fn scenario_quick_profile_writes_offline_and_online_folders() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let run = perfbench(&["run", "scenarios/wide_deep.toml", "--profile", "quick", "--out", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", stderr(&run));
    let offline = check_folder(&out.join("offline"), &["throughput_vs_batch"]);
    assert_eq!(offline.iter().map(|r| r.batch).collect::<Vec<_>>(), [1, 256, 1024]);
    let online = check_folder(&out.join("online"), &["latency_vs_concurrency"]);
    assert_eq!(online.len(), 3);
}

#[test]
fn bad_concurrency_is_one_line_and_exit_2() {
    for bad in ["8..4", "0..8", "a,b", "8..64:0"] {
        let run = perfbench(&["online", "-m", "identity", "--concurrency", bad]);
        assert_eq!(run.status.code(), Some(2), "{bad}");
        let err = stderr(&run);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("--concurrency"), "{err}");
    }
}

#[test]
fn bad_scenarios_are_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "name = \"bad\"\n[model]\nname = \"identity\"\n[offline]\nbatch_sizes = [1]\nbatchsize = 3\n",
    )
    .unwrap();
    let run = perfbench(&["run", path.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("batchsize"), "{}", stderr(&run));
    let run = perfbench(&["run", "scenarios/wide_deep.toml", "--profile", "nope"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(stderr(&run).contains("no profile 'nope'"), "{}", stderr(&run));
    let run = perfbench(&["run", "scenarios/missing.toml"]);
    assert_eq!(run.status.code(), Some(2));
}

/// `--label NAME=VALUE` is a row of report.md's configuration table, kept in the folder's plan;
/// one without `=` is refused before anything runs.
#[test]
fn labels_are_rows_of_the_configuration_table() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("labelled");
    let args = ["offline", "-m", "identity", "--batch-sizes", "1", "--shape", "INPUT0:16"];
    let run = sweep(&[&args[..], &["--label", "commit=4f2a1c", "--label", "driver=550"]].concat(), &out);
    assert!(run.status.success(), "{}", stderr(&run));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for (name, value) in [("commit", "4f2a1c"), ("driver", "550")] {
        let row = md.lines().find(|l| l.starts_with(&format!("| {name} "))).unwrap_or_else(|| panic!("{md}"));
        assert!(row.contains(&format!("| {value} ")), "{row}");
    }
    let plan = std::fs::read_to_string(out.join("plan.toml")).unwrap();
    assert!(plan.contains("[sweeps.plain.output]\nlabels = [\"commit=4f2a1c\", \"driver=550\"]"), "{plan}");
    let kept = perfbench::plan::Plan::from_toml(&plan).unwrap();
    assert_eq!(kept.sweeps[0].plain.output.labels.as_ref().map(Vec::len), Some(2));
    // A plan file's plain part knows its keys.
    let typo = perfbench::plan::Plan::from_toml(&plan.replace("labels = ", "lables = ")).unwrap_err();
    assert!(typo.to_string().contains("unknown field `lables`"), "{typo}");
    let bad = perfbench(&[&args[..], &["--label", "commit", "--print-plan"]].concat());
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(stderr(&bad).contains("bad --label 'commit': expected NAME=VALUE"), "{}", stderr(&bad));
}
