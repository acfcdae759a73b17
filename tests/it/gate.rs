//! `perfbench gate` end to end: the real binary on synthetic results CSVs, checking exit codes,
//! the Markdown summary on stdout, the one-line verdict on stderr and the JUnit file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quick_xml::events::Event;
use quick_xml::Reader;
use tempfile::TempDir;

const PA_HEADER: &str = "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency";
const REPORT_HEADER: &str = "Batch,Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,avg latency,Failed,Stable,Throughput Spread (%),p99 Spread (%),avg Spread (%)";

/// One sweep point with the numbers the gate reads; the breakdown sums to `avg_us`.
#[derive(Clone, Copy)]
struct Point {
    concurrency: u64,
    throughput: f64,
    p99_us: f64,
    avg_us: f64,
    spread_pct: [f64; 3],
}

fn point(concurrency: u64, throughput: f64, p99_us: f64, avg_us: f64) -> Point {
    Point { concurrency, throughput, p99_us, avg_us, spread_pct: [0.0; 3] }
}

/// A perf_analyzer `-f` CSV (no batch, no avg, no spread columns).
fn pa_csv(points: &[Point]) -> String {
    let mut text = format!("{PA_HEADER}\n");
    for p in points {
        let (send, recv, queue, infer) = (10.0, 10.0, 20.0, p.avg_us * 0.5);
        let network = p.avg_us - send - recv - queue - infer;
        text.push_str(&format!(
            "{},{},{send},{network},{queue},0,{infer},0,{recv},{},{},{},{}\n",
            p.concurrency,
            p.throughput,
            p.avg_us,
            p.p99_us * 0.9,
            p.p99_us * 0.95,
            p.p99_us
        ));
    }
    text
}

/// A perfbench report.csv with spreads.
fn report_csv(points: &[Point]) -> String {
    let mut text = format!("{REPORT_HEADER}\n");
    for p in points {
        let [tp, p99, avg] = p.spread_pct;
        text.push_str(&format!(
            "1,{},{},10,{},20,0,{},0,10,{},{},{},{},{},0,true,{tp},{p99},{avg}\n",
            p.concurrency,
            p.throughput,
            p.avg_us * 0.5 - 40.0,
            p.avg_us * 0.5,
            p.avg_us,
            p.p99_us * 0.9,
            p.p99_us * 0.95,
            p.p99_us,
            p.avg_us
        ));
    }
    text
}

fn sweep() -> Vec<Point> {
    vec![point(1, 1000.0, 1500.0, 1000.0), point(2, 1800.0, 1800.0, 1100.0), point(4, 2500.0, 2600.0, 1600.0)]
}

struct Case {
    dir: TempDir,
}

impl Case {
    fn new() -> Self {
        Self { dir: tempfile::tempdir().expect("temp dir") }
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write fixture");
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn gate(baseline: &Path, current: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .arg("gate")
        .arg("--baseline")
        .arg(baseline)
        .arg("--current")
        .arg(current)
        .args(extra)
        .output()
        .expect("run perfbench")
}

/// Asserts the exit code, showing the command's output when it differs.
fn expect_exit(out: &Output, code: i32) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stdout:\n{stdout}\nstderr:\n{stderr}");
    (stdout, stderr)
}

#[test]
fn identical_runs_pass() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let (stdout, stderr) = expect_exit(&gate(&base, &base, &[]), 0);
    assert!(stdout.starts_with("# perfbench gate: PASS"), "{stdout}");
    assert_eq!(stdout.matches(": pass\n").count(), 3, "{stdout}");
    assert_eq!(stderr.trim(), "gate: pass (3 rows matched, 0 unmatched)");
}

#[test]
fn thirty_percent_throughput_drop_fails() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let mut slower = sweep();
    slower[1].throughput *= 0.7;
    let cur = case.file("cur.csv", &pa_csv(&slower));
    let (stdout, stderr) = expect_exit(&gate(&base, &cur, &[]), 1);
    assert!(stdout.starts_with("# perfbench gate: FAIL"), "{stdout}");
    assert!(stdout.contains("## batch 1, concurrency 2: REGRESSION"), "{stdout}");
    assert!(stdout.contains("| throughput (infer/s) | 1800.0 | 1260.0 | -30.0% |"), "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("REGRESSION in 1 of 3 rows: batch 1, concurrency 2 (throughput (infer/s) -30.0%)"),
        "{stderr}"
    );
}

#[test]
fn p99_rise_beyond_threshold_fails_and_threshold_flag_can_allow_it() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let mut slower = sweep();
    slower[2].p99_us *= 1.2;
    let cur = case.file("cur.csv", &pa_csv(&slower));
    let (_, stderr) = expect_exit(&gate(&base, &cur, &[]), 1);
    assert!(stderr.contains("batch 1, concurrency 4 (p99 latency (µs) +20.0%)"), "{stderr}");
    expect_exit(&gate(&base, &cur, &["--max-p99-rise", "25"]), 0);
}

#[test]
fn the_same_drop_passes_when_the_runs_recorded_that_much_noise() {
    let case = Case::new();
    let mut noisy_base = sweep();
    for p in &mut noisy_base {
        p.spread_pct = [25.0, 5.0, 5.0];
    }
    let mut dropped = noisy_base.clone();
    dropped[0].throughput *= 0.8;
    // Without spread columns a 20% drop is a regression; with a recorded 25% spread it is noise.
    let quiet = gate(&case.file("qb.csv", &pa_csv(&noisy_base)), &case.file("qc.csv", &pa_csv(&dropped)), &[]);
    expect_exit(&quiet, 1);
    let noisy = gate(&case.file("nb.csv", &report_csv(&noisy_base)), &case.file("nc.csv", &report_csv(&dropped)), &[]);
    let (stdout, _) = expect_exit(&noisy, 0);
    assert!(stdout.contains("| -20.0% | ±25.0% | drop ≤ 10% | within noise |"), "{stdout}");
}

#[test]
fn change_beyond_threshold_but_within_current_noise_passes() {
    let case = Case::new();
    let base = case.file("base.csv", &report_csv(&sweep()));
    let mut cur_points = sweep();
    cur_points[0].p99_us *= 1.25;
    cur_points[0].spread_pct = [2.0, 30.0, 2.0];
    let cur = case.file("cur.csv", &report_csv(&cur_points));
    let (stdout, _) = expect_exit(&gate(&base, &cur, &[]), 0);
    assert!(
        stdout.contains("| p99 latency (µs) | 1500.0 | 1875.0 | +25.0% | ±30.0% | rise ≤ 15% | within noise |"),
        "{stdout}"
    );
}

#[test]
fn perf_analyzer_baseline_gates_a_report_csv() {
    let case = Case::new();
    let base = case.file("pa.csv", &pa_csv(&sweep()));
    let cur = case.file("report.csv", &report_csv(&sweep()));
    let (stdout, _) = expect_exit(&gate(&base, &cur, &[]), 0);
    assert!(stdout.contains("| avg latency (µs) | 1000.0 | 1000.0 | +0.0% |"), "{stdout}");
}

#[test]
fn missing_rows_are_reported_and_do_not_fail() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let mut other = sweep();
    other[2].concurrency = 8;
    let cur = case.file("cur.csv", &pa_csv(&other));
    let (stdout, stderr) = expect_exit(&gate(&base, &cur, &[]), 0);
    assert!(stdout.contains("- only in baseline: batch 1, concurrency 4"), "{stdout}");
    assert!(stdout.contains("- only in current: batch 1, concurrency 8"), "{stdout}");
    assert!(stderr.contains("2 rows matched, 2 unmatched"), "{stderr}");
}

/// A `composing.csv` for [`sweep`]'s points: `dense_us` and a fixed 200 µs `lookup` per point.
fn composing_csv(dense_us: f64) -> String {
    let mut text = String::from("Batch,Concurrency,Model,Inference Count,Execution Count,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Share of Latency\n");
    for p in sweep() {
        text.push_str(&format!(
            "1,{c},dense,100,100,10,5,{dense_us},5,50\n1,{c},lookup,100,100,10,5,180,5,20\n",
            c = p.concurrency
        ));
    }
    text
}

#[test]
fn one_composing_model_can_fail_the_gate() {
    let case = Case::new();
    let (base_dir, cur_dir) = (case.path("base"), case.path("cur"));
    for (dir, dense_us) in [(&base_dir, 400.0), (&cur_dir, 700.0)] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("report.csv"), report_csv(&sweep())).unwrap();
        std::fs::write(dir.join("composing.csv"), composing_csv(dense_us)).unwrap();
    }
    let (base, cur) = (base_dir.join("report.csv"), cur_dir.join("report.csv"));
    // The ensemble's rows are unchanged: without the flag the gate passes.
    expect_exit(&gate(&base, &cur, &[]), 0);
    // dense went from 420 to 720 µs per request (+71%), lookup is unchanged.
    let (stdout, stderr) = expect_exit(&gate(&base, &cur, &["--composing-model", "dense"]), 1);
    assert!(
        stderr.contains("REGRESSION in 3 of 6 rows")
            && stderr.contains("composing model dense, batch 1, concurrency 1"),
        "{stderr}"
    );
    assert!(stdout.contains("## composing model dense, batch 1, concurrency 2: REGRESSION"), "{stdout}");
    expect_exit(&gate(&base, &cur, &["--composing-model", "lookup"]), 0);
    expect_exit(&gate(&base, &cur, &["--composing-model", "dense", "--max-avg-rise", "80"]), 0);
    // A model the files lack, or no composing.csv at all, is bad input.
    let (_, stderr) = expect_exit(&gate(&base, &cur, &["--composing-model", "nope"]), 2);
    assert!(stderr.contains("no rows for composing model nope"), "{stderr}");
    std::fs::remove_file(cur_dir.join("composing.csv")).unwrap();
    let (_, stderr) = expect_exit(&gate(&base, &cur, &["--composing-model", "dense"]), 2);
    assert!(stderr.contains("composing.csv"), "{stderr}");
}

#[test]
fn missing_file_is_bad_input() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let (_, stderr) = expect_exit(&gate(&base, &case.path("nope.csv"), &[]), 2);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot read") && stderr.contains("nope.csv"), "{stderr}");
    assert_eq!(stderr.matches("No such file").count(), 1, "the cause once: {stderr}");
}

#[test]
fn wrong_columns_are_bad_input() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let cur = case.file("cur.csv", "Concurrency,Throughput,latency\n1,1000,900\n");
    let (_, stderr) = expect_exit(&gate(&base, &cur, &[]), 2);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("cur.csv") && stderr.contains("Inferences/Second") && stderr.contains("p99 latency"),
        "{stderr}"
    );
}

#[test]
fn garbage_and_empty_files_are_bad_input() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    for (name, text) in
        [("empty.csv", ""), ("header.csv", PA_HEADER), ("cell.csv", &pa_csv(&sweep()).replace("1800", "n/a"))]
    {
        let cur = case.file(name, text);
        let (_, stderr) = expect_exit(&gate(&base, &cur, &[]), 2);
        assert!(stderr.starts_with("error: ") && stderr.contains(name), "{stderr}");
    }
}

#[test]
fn no_matching_rows_is_bad_input() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let (_, stderr) = expect_exit(&gate(&base, &base, &["--batch", "1"]), 0);
    assert!(stderr.contains("pass"));
    let cur = case.file("cur.csv", &report_csv(&sweep()).replace("\n1,", "\n8,"));
    let (_, stderr) = expect_exit(&gate(&base, &cur, &[]), 2);
    assert!(stderr.contains("no row of the current results matches"), "{stderr}");
    assert!(stderr.contains("only in current: batch 8, concurrency 1"), "{stderr}");
}

#[test]
fn scenario_gate_table_sets_thresholds_and_flags_override_it() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let mut slower = sweep();
    slower[0].avg_us *= 1.3;
    let cur = case.file("cur.csv", &pa_csv(&slower));
    let lenient = case.file("lenient.toml", "[gate]\nmax_avg_rise = 50\n");
    let scenario = lenient.to_str().unwrap();
    expect_exit(&gate(&base, &cur, &[]), 1);
    expect_exit(&gate(&base, &cur, &["--scenario", scenario]), 0);
    expect_exit(&gate(&base, &cur, &["--scenario", scenario, "--max-avg-rise", "20"]), 1);
    let typo = case.file("typo.toml", "[gate]\nmax_avg = 50\n");
    let (_, stderr) = expect_exit(&gate(&base, &cur, &["--scenario", typo.to_str().unwrap()]), 2);
    assert!(stderr.contains("bad [gate] table") && stderr.contains("max_avg"), "{stderr}");
}

#[test]
fn markdown_and_junit_files_are_written() {
    let case = Case::new();
    let base = case.file("base.csv", &pa_csv(&sweep()));
    let mut other = sweep();
    other[0].throughput *= 0.5;
    other[2].concurrency = 16;
    let cur = case.file("cur.csv", &pa_csv(&other));
    let (md, junit) = (case.path("gate.md"), case.path("junit.xml"));
    let out = gate(&base, &cur, &["--markdown", md.to_str().unwrap(), "--junit", junit.to_str().unwrap()]);
    let (stdout, _) = expect_exit(&out, 1);
    assert_eq!(std::fs::read_to_string(&md).unwrap(), stdout);

    let xml = std::fs::read_to_string(&junit).unwrap();
    let junit = parse_junit(&xml);
    assert_eq!(
        junit.cases,
        ["batch 1, concurrency 1", "batch 1, concurrency 2", "batch 1, concurrency 4", "batch 1, concurrency 16"],
        "{xml}"
    );
    assert_eq!((junit.failures, junit.skipped), (1, 2), "{xml}");
    assert!(xml.contains("tests=\"4\" failures=\"1\" errors=\"0\" skipped=\"2\""), "{xml}");
}

/// What a CI reporter would see in a JUnit file.
struct Junit {
    cases: Vec<String>,
    failures: usize,
    skipped: usize,
}

/// Parses the JUnit XML back; quick-xml checks that every end tag matches its start tag.
fn parse_junit(xml: &str) -> Junit {
    let mut reader = Reader::from_str(xml);
    let mut junit = Junit { cases: Vec::new(), failures: 0, skipped: 0 };
    loop {
        match reader.read_event().unwrap_or_else(|e| panic!("malformed JUnit ({e}):\n{xml}")) {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testcase" => {
                    let name = e.try_get_attribute("name").unwrap().expect("testcase has a name");
                    let name = name.decode_and_unescape_value(reader.decoder()).unwrap();
                    junit.cases.push(name.into_owned());
                }
                b"failure" => junit.failures += 1,
                b"skipped" => junit.skipped += 1,
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    junit
}
