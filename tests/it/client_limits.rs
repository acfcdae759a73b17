//! A load generator that reports its own limits: a request rate far beyond what the client can
//! send (pinned to one core when `taskset` exists) is flagged client-limited with its achieved
//! rate and send lag; a comfortable rate is not flagged.

use std::process::{Command, Stdio};

/// Starts `perfbench profile` of the bundled identity model at `rate` requests/s, writing the
/// verbose CSV to `csv`; `pin` runs it on core 0 only.
fn start(rate: &str, window_ms: &str, csv: &std::path::Path, pin: bool) -> std::process::Child {
    let bin = env!("CARGO_BIN_EXE_perfbench");
    let has_taskset = Command::new("taskset").arg("--version").output().is_ok_and(|o| o.status.success());
    let mut cmd = if pin && has_taskset {
        let mut c = Command::new("taskset");
        c.args(["-c", "0", bin]);
        c
    } else {
        Command::new(bin)
    };
    cmd.args(["profile", "-m", "identity", "--shape", "INPUT0:16", "--request-rate-range", rate])
        .args(["-p", window_ms, "--max-trials", "2", "-s", "100", "--verbose-csv", "-f"])
        .arg(csv)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs perfbench")
}

/// The CSV's one data row, by header name.
fn row(csv: &std::path::Path) -> std::collections::HashMap<String, String> {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let cells: Vec<&str> = lines.next().unwrap_or_else(|| panic!("{text}")).split(',').collect();
    header.iter().map(|h| h.to_string()).zip(cells.iter().map(|c| c.to_string())).collect()
}

#[test]
fn an_impossible_rate_is_flagged_and_a_comfortable_one_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let (flood_csv, calm_csv) = (dir.path().join("flood.csv"), dir.path().join("calm.csv"));
    let flood = start("100000", "1000", &flood_csv, true);
    // 20 req/s over 2 s windows: 40 requests each, so the one or two still in flight when a
    // window closes stay well inside the 5% allowance even on a busy box.
    let calm = start("20", "2000", &calm_csv, false);
    let [flood, calm] = [flood, calm].map(|c| c.wait_with_output().unwrap());
    let text = |o: &std::process::Output| {
        format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
    };
    assert!(flood.status.success() && calm.status.success(), "{}\n{}", text(&flood), text(&calm));

    let out = text(&flood);
    assert!(out.contains("  CLIENT-LIMITED: achieved "), "{out}");
    let r = row(&flood_csv);
    let achieved: f64 = r["Achieved Load"].parse().unwrap();
    assert!(achieved > 0.0 && achieved < 95_000.0, "achieved {achieved}");
    let lag_p99: f64 = r["Send Lag p99"].parse().unwrap();
    assert!(lag_p99 >= r["Send Lag p50"].parse::<f64>().unwrap() && lag_p99 > 0.0, "{r:?}");
    assert_eq!(r["Client Limited"], "1", "{r:?}");

    let out = text(&calm);
    assert!(out.contains("  perfbench client: achieved ") && !out.contains("CLIENT-LIMITED"), "{out}");
    let r = row(&calm_csv);
    assert_eq!(r["Client Limited"], "0", "{r:?}");
    let achieved: f64 = r["Achieved Load"].parse().unwrap();
    assert!((19.0..=21.0).contains(&achieved), "achieved {achieved} of 20");
}
