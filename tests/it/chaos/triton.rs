//! The fault proxy in front of a real Triton (the interop suite's, named in
//! `PERFBENCH_TRITON_HTTP`): perfbench's client and NVIDIA perf_analyzer (`PERFBENCH_PA`) both run
//! through a proxy that resets every connection once 20 KB of requests have passed on it.

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{column_sum, runtime, spawn_online, wait_at_most};
use crate::proxy::{Cut, CutKind, Direction, Fault, Proxy};

/// Reset every connection after this many bytes of requests (some 60 identity requests).
const RESET_AFTER: u64 = 20_000;

/// Through the reset proxy, `perfbench online` over HTTP at concurrency 1..3 finishes with exit 0,
/// a row per point, and the resets in its `Failed Reset` column; perf_analyzer through the same
/// proxy sees the resets too (it names the failed request and stops, exit 99: its way). Triton
/// stays up, so our rows are not flagged `Interrupted` (a reset is a failed request once the
/// server answers a probe). Broken (ours stops at the first reset, or miscounts it), the exit
/// status or the column differs.
#[test]
#[ignore = "needs a real Triton and perf_analyzer: tests/interop/test_chaos_triton.py runs it"]
fn a_reset_proxy_in_front_of_real_triton() {
    let triton: std::net::SocketAddr = std::env::var("PERFBENCH_TRITON_HTTP")
        .expect("PERFBENCH_TRITON_HTTP names a real Triton's HTTP host:port (the interop suite sets it)")
        .parse()
        .expect("PERFBENCH_TRITON_HTTP is host:port");
    let pa = std::env::var("PERFBENCH_PA").expect("PERFBENCH_PA names perf_analyzer (scripts/interop.sh sets it)");
    let runtime = runtime();
    let reset = Fault {
        cut: Some(Cut { direction: Direction::Up, after_bytes: RESET_AFTER, kind: CutKind::Reset }),
        ..Default::default()
    };
    let proxy = runtime.block_on(Proxy::start(triton, reset));
    let through = proxy.addr.to_string();

    let dir = tempfile::tempdir().unwrap();
    let rule = ["--concurrency", "1..3", "--stop-when", "stable", "-s", "100", "--measurement-mode", "time_windows"];
    let args: Vec<&str> = rule.iter().chain(&["-p", "1000"]).copied().collect();
    let mut ours = spawn_online(&through, &args, dir.path());
    let (status, err) = wait_at_most(&mut ours, Duration::from_secs(300), "perfbench through the reset proxy");
    let report = std::fs::read_to_string(dir.path().join("report.csv")).unwrap_or_default();
    let rows = report.lines().count().saturating_sub(1);
    let (failed, resets_counted) = (column_sum(&report, "Failed"), column_sum(&report, "Failed Reset"));
    let ours_resets = proxy.counters().cut.load(Ordering::Relaxed);
    println!(
        "perfbench: exit {:?}, {rows} rows, Failed {failed}, Failed Reset {resets_counted}; proxy resets {ours_resets}\n{report}",
        status.code()
    );

    let before_pa = proxy.counters().cut.load(Ordering::Relaxed);
    let pa_csv = dir.path().join("pa.csv");
    let mut theirs = Command::new(&pa)
        .args(["-m", "identity", "-u", &through, "-i", "http", "--shape", "INPUT0:4"])
        .args(["--concurrency-range", "1:3", "--measurement-mode", "time_windows", "-p", "1000"])
        .args(["-f", pa_csv.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs perf_analyzer");
    let pa_out = theirs.stdout.take().map(|mut s| {
        std::thread::spawn(move || {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut s, &mut text).unwrap();
            text
        })
    });
    let (pa_status, pa_err) =
        wait_at_most(&mut theirs, Duration::from_secs(300), "perf_analyzer through the reset proxy");
    let pa_text = pa_out.map(|t| t.join().unwrap()).unwrap_or_default() + &pa_err;
    let pa_resets = proxy.counters().cut.load(Ordering::Relaxed) - before_pa;
    println!("perf_analyzer: exit {:?}; proxy resets {pa_resets}\n{pa_text}", pa_status.code());

    assert!(status.success(), "perfbench keeps going through resets: {err}");
    assert_eq!(rows, 3, "a row per point: {report}");
    assert!(ours_resets >= 1, "the proxy reset perfbench's connections");
    assert!(resets_counted >= 1, "perfbench counts the resets by kind: {report}");
    assert_eq!(failed, resets_counted, "every failure here is a reset: {report}");
    assert!(pa_resets >= 1, "the proxy reset perf_analyzer's connections");
    // perf_analyzer's way with a failed request: it names it and exits non-zero.
    assert!(!pa_status.success() && pa_text.contains("had error"), "perf_analyzer reports the reset: {pa_text}");
}
