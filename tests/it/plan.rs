//! The typed plan end to end: `--print-plan` and `run PLAN.toml`, a descending range refused
//! before anything starts, one connection context per sweep (shared memory registered and
//! metadata fetched once for many points), and Ctrl-C: exit 130 with the finished rows on disk
//! and no shared-memory segment left behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{perfbench, stderr};
use perfbench::results::LoadPoint;
use perfbench::server::serve::{self, ServeConfig};

fn report_rows(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("report.csv")).map(|t| t.lines().count().saturating_sub(1)).unwrap_or(0)
}

#[test]
fn a_printed_plan_runs_back_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let printed = perfbench(&[
        "offline",
        "-m",
        "identity",
        "--shape",
        "INPUT0:16",
        "--batch-sizes",
        "1,8",
        "--measurement-request-count",
        "20",
        "--out",
        out.to_str().unwrap(),
        "--print-plan",
    ]);
    assert_eq!(printed.status.code(), Some(0), "{}", stderr(&printed));
    assert!(!out.exists(), "--print-plan must not run anything");
    let text = String::from_utf8(printed.stdout).unwrap();
    let plan_file = dir.path().join("p.toml");
    std::fs::write(&plan_file, &text).unwrap();
    let plan = perfbench::plan::Plan::from_toml(&text).unwrap();
    assert_eq!(plan.sweeps[0].batch_sizes.values(0), vec![1, 8]);

    let ran = perfbench(&["run", plan_file.to_str().unwrap()]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let (rows, _) = perfbench::report::read_table(&out.join("report.csv")).unwrap();
    assert_eq!(rows.iter().map(|r| r.batch).collect::<Vec<_>>(), vec![1, 8]);
    assert!(out.join("report.md").is_file() && out.join("perf_analyzer.csv").is_file());
    // Printing the plan of a plan file gives the same plan back.
    let again = perfbench(&["run", plan_file.to_str().unwrap(), "--print-plan"]);
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
}

#[test]
fn a_ramp_is_a_field_of_the_plan_and_checked_against_its_loop() {
    let printed = perfbench(&[
        "online",
        "-m",
        "identity",
        "--request-rate-range",
        "50",
        "--request-rate-ramp-duration",
        "2",
        "--print-plan",
    ]);
    assert_eq!(printed.status.code(), Some(0), "{}", stderr(&printed));
    let plan = perfbench::plan::Plan::from_toml(&String::from_utf8(printed.stdout).unwrap()).unwrap();
    assert_eq!(plan.sweeps[0].shape.request_rate_ramp_duration, Some(2.0));
    // A scenario key, the same field.
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("ramp.toml");
    let text = "name = \"ramp\"\n[model]\nname = \"identity\"\n[online]\nconcurrency = \"1,4\"\nconcurrency_ramp_duration = 1.5\n";
    std::fs::write(&scenario, text).unwrap();
    let printed = perfbench(&["run", scenario.to_str().unwrap(), "--print-plan"]);
    assert_eq!(printed.status.code(), Some(0), "{}", stderr(&printed));
    let plan = perfbench::plan::Plan::from_toml(&String::from_utf8(printed.stdout).unwrap()).unwrap();
    assert_eq!(plan.sweeps[0].shape.concurrency_ramp_duration, Some(1.5));
    for (args, why) in [
        (["--concurrency", "4", "--request-rate-ramp-duration", "2"], "open loop"),
        (["--request-rate-range", "50", "--concurrency-ramp-duration", "2"], "closed loop"),
        (["--concurrency", "4", "--concurrency-ramp-duration", "0"], "seconds > 0"),
    ] {
        let out = perfbench(&[&["online", "-m", "identity"][..], &args[..], &["--print-plan"]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(why) && err.lines().count() == 1, "{args:?}: {err}");
    }
}

#[test]
fn a_descending_range_is_refused_before_anything_starts() {
    let out = perfbench(&["online", "--concurrency", "8..2", "--print-plan"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("descending"), "{err}");
    let bad_plan = perfbench(&["run", "Cargo.toml"]);
    assert_eq!(bad_plan.status.code(), Some(2), "{}", stderr(&bad_plan));
}

#[test]
fn a_sweep_registers_shared_memory_and_reads_metadata_once() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(serve::start(ServeConfig::default())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plan = perfbench::cli::parse_plan([
        "perfbench",
        "online",
        "-m",
        "identity",
        "--shape",
        "INPUT0:16",
        "--concurrency",
        "1..8",
        "--shared-memory",
        "system",
        "--measurement-request-count",
        "20",
        "-s",
        "100",
        "-u",
        &server.http_addr.to_string(),
        "--out",
        dir.path().to_str().unwrap(),
    ])
    .unwrap();
    let (registered, metadata) = (server.core.shm.registrations(), server.core.metadata_requests());
    let outcomes = runtime.block_on(perfbench::run::execute_async(&plan)).unwrap();
    assert_eq!(outcomes[0].rows.len(), 8);
    // identity: one input region (one data step) and one output region, for all eight points.
    assert_eq!(server.core.shm.registrations() - registered, 2);
    assert_eq!(server.core.metadata_requests() - metadata, 1);
    runtime.block_on(server.shutdown());
}

/// This process's shared-memory segments (perfbench names them perfbench_<pid>_...).
fn segments_of(pid: u32) -> Vec<String> {
    let prefix = format!("perfbench_{pid}_");
    std::fs::read_dir("/dev/shm")
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_else(|_| Vec::new())
        .into_iter()
        .filter(|n: &String| n.starts_with(&prefix))
        .collect()
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn interrupt(child: &Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

fn wait_for_rows(child: &mut Child, dir: &Path, rows: usize) {
    // Generous: only a hang should fail here, never a slow machine.
    let deadline = Instant::now() + Duration::from_secs(300);
    while report_rows(dir) < rows {
        assert!(child.try_wait().unwrap().is_none(), "perfbench ended before {rows} rows");
        assert!(Instant::now() < deadline, "no {rows} rows in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An online sweep of the zoo's `delay` model over `concurrency`, with short windows.
fn delay_sweep(out: &Path, shm: &str, concurrency: &str) -> Child {
    spawn(&[
        "online",
        "-m",
        "delay",
        "--concurrency",
        concurrency,
        "--measurement-request-count",
        "20",
        "-s",
        "100",
        // perf_analyzer's rule, so each point ends after three short windows: under the default
        // interval rule the first of 64 points may borrow minutes from the sweep's time bank.
        "--stop-when",
        "stable",
        "--shared-memory",
        shm,
        "--out",
        out.to_str().unwrap(),
    ])
}

/// [`delay_sweep`] in a new temporary folder, once `rows` rows are on disk: (folder kept alive,
/// results folder, the running child).
fn sweep_with_rows(shm: &str, rows: usize) -> (tempfile::TempDir, PathBuf, Child) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let mut child = delay_sweep(&out, shm, "1..64");
    wait_for_rows(&mut child, &out, rows);
    (dir, out, child)
}

#[test]
fn ctrl_c_exits_130_with_the_finished_rows_and_no_segments() {
    for shm in ["none", "system"] {
        let (_dir, out, child) = sweep_with_rows(shm, 2);
        interrupt(&child);
        let pid = child.id();
        let output = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(130), "{shm}: {err}");
        let rows = report_rows(&out);
        assert!((2..64).contains(&rows), "{shm}: {rows} rows");
        let pa = std::fs::read_to_string(out.join("perf_analyzer.csv")).unwrap();
        assert_eq!(pa.lines().count() - 1, rows, "{shm}: perf_analyzer.csv and report.csv agree");
        assert!(out.join("report.md").is_file(), "{shm}: report.md is written on interruption");
        assert_eq!(segments_of(pid), Vec::<String>::new(), "{shm}");
    }
}

#[test]
fn sigkill_mid_sweep_keeps_every_finished_row() {
    let (_dir, out, mut child) = sweep_with_rows("none", 2);
    child.kill().unwrap(); // SIGKILL: nothing runs after it
    child.wait().unwrap();
    // report.csv is replaced atomically after each row, so it is whole; perf_analyzer.csv is
    // appended first, so it may hold the one row being written when the kill came.
    let rows = report_rows(&out);
    assert!((2..64).contains(&rows), "{rows} rows");
    let report = perfbench::gate::results::read_results(&out.join("report.csv"), 1).unwrap();
    assert_eq!(report.len(), rows);
    let pa = perfbench::gate::results::read_results(&out.join("perf_analyzer.csv"), 1).unwrap();
    assert!(pa.len() == rows || pa.len() == rows + 1, "{} perf_analyzer rows, {rows} report rows", pa.len());
    for (a, b) in report.iter().zip(&pa) {
        assert_eq!((a.batch, &a.load), (b.batch, &b.load));
    }
}

#[test]
fn resume_finishes_a_killed_sweep_with_the_points_of_a_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let mut child = delay_sweep(&out, "none", "1..8");
    wait_for_rows(&mut child, &out, 2);
    child.kill().unwrap();
    child.wait().unwrap();
    let before = std::fs::read_to_string(out.join("report.csv")).unwrap();
    assert!(before.lines().count() - 1 < 8, "the kill came after the last point");

    // From another working directory: the folder's plan names its paths absolutely.
    let resumed = Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(["run", "--resume", out.to_str().unwrap()])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(stderr(&resumed).contains("kept from the results folder"), "{}", stderr(&resumed));
    let after = std::fs::read_to_string(out.join("report.csv")).unwrap();
    let kept: Vec<&str> = before.lines().collect();
    assert_eq!(after.lines().take(kept.len()).collect::<Vec<_>>(), kept, "kept rows stay as written");
    let whole_run: Vec<(u64, LoadPoint)> = (1..=8).map(|c| (1, LoadPoint::Concurrency(c))).collect();
    for csv in ["report.csv", "perf_analyzer.csv"] {
        let rows = perfbench::gate::results::read_results(&out.join(csv), 1).unwrap();
        assert_eq!(rows.iter().map(|r| (r.batch, r.load)).collect::<Vec<_>>(), whole_run, "{csv}");
    }
    assert!(out.join("report.md").is_file());

    let nothing = perfbench(&["run", "--resume", dir.path().to_str().unwrap()]);
    assert_eq!(nothing.status.code(), Some(2), "{}", stderr(&nothing));
    assert!(stderr(&nothing).contains("no plan.toml"), "{}", stderr(&nothing));
}

#[test]
fn a_second_ctrl_c_exits_at_once() {
    let (_dir, _out, child) = sweep_with_rows("system", 1);
    interrupt(&child);
    interrupt(&child);
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(segments_of(pid), Vec::<String>::new());
}

/// `run --resume` of a generative sweep killed during its second level: the first level's row
/// and files stay as written (summarized again from its records.json), the second is measured.
#[test]
fn resume_of_a_generative_sweep_keeps_its_finished_levels_and_measures_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("g");
    let sweep = [
        "online",
        "--endpoint-type",
        "chat",
        "--streaming",
        "--concurrency",
        "1,2",
        "--request-count",
        "6",
        "--isl",
        "16",
        "--osl",
        "6",
        "--out",
        out.to_str().unwrap(),
    ];
    let run = perfbench(&sweep);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let before = std::fs::read_to_string(out.join("report.csv")).unwrap();
    let first = std::fs::read_to_string(out.join("concurrency1/profile_export.jsonl")).unwrap();
    // Killed while the second level ran: its records were never written.
    std::fs::remove_file(out.join("concurrency2/records.json")).unwrap();
    let resumed = perfbench(&["run", "--resume", out.to_str().unwrap()]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert!(stderr(&resumed).contains("1 measured level(s) kept"), "{}", stderr(&resumed));
    let after = std::fs::read_to_string(out.join("report.csv")).unwrap();
    let (before, after): (Vec<&str>, Vec<&str>) = (before.lines().collect(), after.lines().collect());
    assert_eq!(after.len(), 3, "{after:?}");
    assert_eq!(after[..2], before[..2], "the kept level's row is the one measured before");
    assert_ne!(after[2], before[2], "the second level was measured again");
    assert_eq!(std::fs::read_to_string(out.join("concurrency1/profile_export.jsonl")).unwrap(), first);
    assert!(out.join("concurrency2/records.json").is_file());
}
