//! Faults on the wire (issue 32): the client and the server through the fault-injecting proxy
//! (`proxy.rs`), over HTTP, gRPC unary and gRPC streaming. Each test is one promise and fails when
//! it is broken. Bounds on time are generous (a loaded 2-core CI box): each is far below what the
//! broken behaviour takes; `scripts/chaos.sh` prints the strict figures.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use perfbench::server::listen::ConnectionSettings;
use perfbench::server::serve::{self, RunningServer, ServeConfig};

use crate::proxy::{Fault, Proxy};

mod resets;
mod triton;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

fn start_server(runtime: &tokio::runtime::Runtime, connections: ConnectionSettings) -> RunningServer {
    runtime.block_on(serve::start(ServeConfig { connections, ..Default::default() })).expect("server starts")
}

/// The three wire paths, as `perfbench profile` flags, and which front end each talks to.
const WIRES: [(&str, &[&str]); 3] =
    [("http", &[]), ("grpc", &["-i", "grpc"]), ("grpc-streaming", &["-i", "grpc", "--streaming"])];

fn front_end(server: &RunningServer, wire: &str) -> SocketAddr {
    if wire == "http" {
        server.http_addr
    } else {
        server.grpc_addr
    }
}

/// `perfbench COMMAND -u URL -m identity --shape INPUT0:4 ARGS...`, its stderr piped.
fn spawn_perfbench(command: &str, url: &str, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args([command, "-u", url, "-m", "identity", "--shape", "INPUT0:4"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("runs perfbench {command}: {e}"))
}

/// `perfbench profile` of `identity` against `url`, perf_analyzer's CSV to `csv`.
fn spawn_profile(url: &str, wire_flags: &[&str], extra: &[&str], csv: &Path) -> Child {
    let args: Vec<&str> = wire_flags.iter().chain(extra).copied().chain(["-f", csv.to_str().unwrap()]).collect();
    spawn_perfbench("profile", url, &args)
}

/// `perfbench online` of `identity` against `url`, its results folder `out`.
fn spawn_online(url: &str, args: &[&str], out: &Path) -> Child {
    let args: Vec<&str> = args.iter().copied().chain(["--out", out.to_str().unwrap()]).collect();
    spawn_perfbench("online", url, &args)
}

/// Rows in perf_analyzer's CSV so far (its header line excluded).
fn rows(csv: &Path) -> usize {
    std::fs::read_to_string(csv).map_or(0, |text| text.lines().count().saturating_sub(1))
}

/// Sum of one column of a CSV written by perfbench (no quoted fields in its number rows); 0 when
/// there is no CSV.
fn column_sum(text: &str, column: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let at = header.iter().position(|h| *h == column).unwrap_or_else(|| panic!("no column {column} in {text}"));
    lines.map(|l| l.split(',').nth(at).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0)).sum()
}

/// Waits for `child` up to `limit`; kills it and fails past that.
fn wait_at_most(child: &mut Child, limit: Duration, what: &str) -> (ExitStatus, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status, err);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One row of `scripts/chaos.sh`'s table: what was measured, and whether it met the strict
/// figure of the promise (the test's own assertion is looser, for a loaded CI box).
fn table_row(scenario: &str, wire: &str, promise: &str, measured: String, strict: bool) {
    println!("CHAOS|{scenario}|{wire}|{promise}|{measured}|{}", if strict { "pass" } else { "fail" });
}

fn wait_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Client, never hangs: the server goes silent mid-sweep (the proxy black-holes every
/// connection); with `--request-timeout 2` the run ends with exit 3 and keeps its rows, within
/// the timeout and one window. Broken, it waits for the 120 s stall guard (or longer).
#[test]
fn a_black_holed_server_ends_the_run_with_exit_3_and_its_rows() {
    let runtime = runtime();
    let server = start_server(&runtime, ConnectionSettings::default());
    for (wire, flags) in WIRES {
        let proxy = runtime.block_on(Proxy::start(front_end(&server, wire), Fault::default()));
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("pa.csv");
        let extra = ["--concurrency-range", "1:64", "-p", "300", "--request-timeout", "2"];
        let mut child = spawn_profile(&proxy.addr.to_string(), flags, &extra, &csv);
        wait_until(Duration::from_secs(60), "two rows measured", || rows(&csv) >= 2);
        proxy.black_hole_now();
        let silent_since = Instant::now();
        let (status, err) = wait_at_most(&mut child, Duration::from_secs(60), wire);
        let took = silent_since.elapsed();
        let kept = rows(&csv);
        table_row(
            "black-holed mid-sweep, --request-timeout 2, 0.3 s windows",
            wire,
            "exit 3 with the rows, within timeout + one window",
            format!("exit {:?} after {:.2} s, {kept} rows kept", status.code(), took.as_secs_f64()),
            status.code() == Some(3) && kept >= 2 && took < Duration::from_millis(2300 + 1000),
        );
        assert_eq!(status.code(), Some(3), "{wire}: {err}");
        assert!(err.contains("--request-timeout"), "{wire}: {err}");
        assert!(rows(&csv) >= 2, "{wire}: the measured rows stay on disk");
        // Timeout (2 s) + a window (0.3 s), with room for a loaded machine; broken: >= 120 s.
        assert!(took < Duration::from_secs(30), "{wire}: ended {took:?} after the server went silent");
    }
    runtime.block_on(server.shutdown());
}

/// Client, counts what happened: through a proxy that resets every connection once 50 KB of
/// requests have passed on it, `perfbench online` against `perfbench serve` finishes every point
/// (exit 0, a row per point) and counts each failure by kind: they are all resets, so
/// `Failed Reset` equals `Failed` in report.csv, and report.md shows the column. The server
/// stays up and answers the client's probe, so no point is flagged `Interrupted`. Broken (a reset
/// counted as another kind, the run stopping at the first reset, or a reset from a live server
/// taken for a lost server), the columns, the flag or the exit differ.
#[test]
fn resets_are_counted_by_kind_and_the_run_goes_on() {
    use crate::proxy::{Cut, CutKind, Direction};
    use std::sync::atomic::Ordering;
    let runtime = runtime();
    let server = start_server(&runtime, ConnectionSettings::default());
    for (wire, flags) in WIRES {
        let reset = Fault {
            cut: Some(Cut { direction: Direction::Up, after_bytes: 50_000, kind: CutKind::Reset }),
            ..Default::default()
        };
        let proxy = runtime.block_on(Proxy::start(front_end(&server, wire), reset));
        let dir = tempfile::tempdir().unwrap();
        let rule =
            ["--concurrency", "1..3", "--stop-when", "stable", "-s", "100", "--measurement-mode", "time_windows"];
        let args: Vec<&str> = flags.iter().chain(&rule).chain(&["-p", "500"]).copied().collect();
        let mut child = spawn_online(&proxy.addr.to_string(), &args, dir.path());
        let (status, err) = wait_at_most(&mut child, Duration::from_secs(120), wire);
        let report = std::fs::read_to_string(dir.path().join("report.csv")).unwrap_or_default();
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap_or_default();
        let rows = report.lines().count().saturating_sub(1);
        let (failed, resets) = (column_sum(&report, "Failed"), column_sum(&report, "Failed Reset"));
        let cut = proxy.counters().cut.load(Ordering::Relaxed);
        let interrupted = report.lines().skip(1).filter(|row| row.ends_with(",true")).count();
        table_row(
            "proxy resets every connection after 50 KB of requests",
            wire,
            "run goes on, no point interrupted; failures counted by kind (Failed Reset)",
            format!(
                "exit {:?}, {rows} of 3 rows, {interrupted} interrupted, Failed {failed}, Failed Reset {resets}; \
                 proxy resets {cut}",
                status.code()
            ),
            status.success() && rows == 3 && interrupted == 0 && resets >= 1 && failed == resets,
        );
        assert!(status.success(), "{wire}: the run goes on through resets: {err}");
        assert_eq!(rows, 3, "{wire}: a row per point: {report}");
        assert!(cut >= 1, "{wire}: the proxy reset connections");
        assert!(resets >= 1, "{wire}: the resets are counted by kind: {report}");
        assert_eq!(failed, resets, "{wire}: every failure here is a reset: {report}");
        assert!(md.contains("Failed Reset"), "{wire}: report.md shows the kinds: {md}");
        // The server stayed up: a reset is a failed request, not a lost server.
        assert_eq!(interrupted, 0, "{wire}: a reset from a live server interrupted a point: {report}\n{err}");
    }
    runtime.block_on(server.shutdown());
}

/// Client, never hangs: against a server that accepts connections and never answers, with no
/// `--request-timeout`, SIGTERM still ends the run (exit 130) at once.
#[test]
fn sigterm_ends_a_run_against_a_black_holed_server() {
    let runtime = runtime();
    let server = start_server(&runtime, ConnectionSettings::default());
    for (wire, flags) in WIRES {
        let proxy =
            runtime.block_on(Proxy::start(front_end(&server, wire), Fault { black_hole: true, ..Default::default() }));
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn_profile(&proxy.addr.to_string(), flags, &[], &dir.path().join("pa.csv"));
        wait_until(Duration::from_secs(30), "the client connected", || {
            proxy.counters().accepted.load(std::sync::atomic::Ordering::Relaxed) > 0
        });
        std::thread::sleep(Duration::from_millis(500));
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let signalled = Instant::now();
        let (status, err) = wait_at_most(&mut child, Duration::from_secs(60), wire);
        let took = signalled.elapsed();
        table_row(
            "black hole from the start, no --request-timeout, SIGTERM",
            wire,
            "SIGTERM ends the run",
            format!("exit {:?} {:.2} s after SIGTERM", status.code(), took.as_secs_f64()),
            status.code() == Some(130) && took < Duration::from_secs(6),
        );
        assert_eq!(status.code(), Some(130), "{wire}: {err}");
        // STOP_GRACE (5 s) with room; broken, it waits on the silent server for good.
        assert!(signalled.elapsed() < Duration::from_secs(30), "{wire}: {:?}", signalled.elapsed());
    }
    runtime.block_on(server.shutdown());
}

/// Sends one complete request on `stream` and reads the response head's status line.
fn ready(stream: &mut TcpStream) -> bool {
    if stream.write_all(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n").is_err() {
        return false;
    }
    // The answer has no body: its head ends the response.
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return false,
        }
    }
    head.starts_with(b"HTTP/1.1 200")
}

/// The loopback TCP sockets on local `port` in `state` (/proc/net/tcp's code: 0A LISTEN, 08
/// CLOSE_WAIT), and the sum of their receive queues (for a listener: connections not yet accepted).
fn sockets(port: u16, state: &str) -> (usize, u64) {
    let port = format!(":{port:04X}");
    let mut found = (0, 0);
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table).unwrap_or_default().lines().skip(1) {
            // sl, local_address, rem_address, st, tx_queue:rx_queue, ...
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() > 4 && fields[1].ends_with(&port) && fields[3] == state {
                found.0 += 1;
                found.1 += fields[4].split(':').nth(1).and_then(|rx| u64::from_str_radix(rx, 16).ok()).unwrap_or(0);
            }
        }
    }
    found
}

/// p50 and p99 of `took`.
fn p50_p99(took: &mut [Duration]) -> (Duration, Duration) {
    took.sort();
    (took[took.len() / 2], took[took.len() * 99 / 100])
}

/// Opens 1,000 connections to `server`, half HTTP and half gRPC, each with half a request head
/// (or half the HTTP/2 preface) sent.
fn open_slow_clients(server: &RunningServer) -> Vec<TcpStream> {
    (0..1000)
        .map(|i| {
            let addr = if i % 2 == 0 { server.http_addr } else { server.grpc_addr };
            let mut s = TcpStream::connect(addr).unwrap();
            let half: &[u8] = if i % 2 == 0 { b"GET /v2/health/ready HTTP/1.1\r\nHo" } else { b"PRI * HTTP/2.0\r\n" };
            s.write_all(half).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s
        })
        .collect()
}

/// Server, slow clients don't starve fast ones: 1,000 connections that send half a request head
/// and wait hold nothing but themselves. The promise is about a normal client while they *wait*,
/// so ten rounds each measure the normal client alone (1,000 requests on one keep-alive
/// connection), open the 1,000 slow ones, wait until the server has accepted all of them (its
/// listeners' accept queues are empty) and 100 ms more, and measure it again while they wait.
/// The strict figure is the median over rounds of each round's p99 rise: the two halves of a
/// round are a few hundred milliseconds apart, so they see the same noise of a shared machine,
/// and a burst of other work that hits one half of one round does not decide the result. Both
/// halves start 100 ms after the server settled: the first nine rounds close the slow
/// connections themselves and wait until the server has closed its ends (measured right after
/// that, the next round's alone half read p50 45 us against 8 us while waiting: the server was
/// still tearing 1,000 connections down). The last round leaves them to the header-read timeout
/// (3 s here, set through `ConnectionSettings`), which must close them all, over HTTP and before
/// the gRPC preface. The 300 requests sent while the server was still accepting each burst are
/// reported apart: that is accept work on the same two cores, not waiting.
#[test]
fn slow_clients_do_not_starve_fast_ones_and_are_closed() {
    const ROUNDS: usize = 10;
    const SAMPLES: usize = 1000;
    let timeout = Duration::from_secs(3);
    let runtime = runtime();
    let settings = ConnectionSettings { header_read_timeout: timeout, ..Default::default() };
    let server = start_server(&runtime, settings);
    let ports = [server.http_addr.port(), server.grpc_addr.port()];
    let normal_client = |n: usize| -> Vec<Duration> {
        let mut stream = TcpStream::connect(server.http_addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        assert!(ready(&mut stream), "a normal client is answered");
        (0..n)
            .map(|_| {
                let start = Instant::now();
                assert!(ready(&mut stream), "a normal client is answered");
                start.elapsed()
            })
            .collect()
    };
    let (mut alone, mut waiting, mut burst) = (Vec::new(), Vec::new(), Vec::new());
    // Each round's p99 while they waited over its p99 alone, minus one.
    let mut rises = Vec::new();
    let (mut accepted_within, mut measured_by) = (Duration::ZERO, Duration::ZERO);
    let mut last = Vec::new();
    let mut opened = Instant::now();
    for round in 0..ROUNDS {
        let mut alone_now = normal_client(SAMPLES);
        let slow = open_slow_clients(&server);
        opened = Instant::now();
        burst.extend(normal_client(300));
        wait_until(Duration::from_secs(10), "the server accepts the slow connections", || {
            ports.iter().map(|&p| sockets(p, "0A").1).sum::<u64>() == 0
        });
        accepted_within = accepted_within.max(opened.elapsed());
        std::thread::sleep(Duration::from_millis(100));
        let mut waiting_now = normal_client(SAMPLES);
        rises.push(p50_p99(&mut waiting_now).1.as_secs_f64() / p50_p99(&mut alone_now).1.as_secs_f64() - 1.0);
        alone.extend(alone_now);
        waiting.extend(waiting_now);
        measured_by = measured_by.max(opened.elapsed());
        if round + 1 == ROUNDS {
            last = slow;
        } else {
            drop(slow);
            wait_until(Duration::from_secs(10), "the server closes its ends", || {
                ports.iter().map(|&p| sockets(p, "08").0).sum::<usize>() == 0
            });
            // The same settle as before the half while they wait: like with like.
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // Every slow connection of the last round is closed by the server within the timeout (with room).
    let closed_by = Instant::now() + Duration::from_secs(15);
    for mut s in last {
        let mut buf = [0u8; 512];
        let ended = loop {
            match s.read(&mut buf) {
                Ok(0) => break true,
                Ok(_) => continue,
                Err(e) => break !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
            }
        };
        assert!(ended && Instant::now() < closed_by, "a slow connection was left open");
    }
    let closed_within = opened.elapsed();
    let ((alone_p50, alone_p99), (waiting_p50, waiting_p99)) = (p50_p99(&mut alone), p50_p99(&mut waiting));
    let (_, burst_p99) = p50_p99(&mut burst);
    rises.sort_by(f64::total_cmp);
    let rise = rises[rises.len() / 2];
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    table_row(
        "1,000 connections with half a request head, waiting (all accepted)",
        "http + grpc",
        "a normal client's p99 rises <= 20%",
        format!(
            "p99 rise {:+.0}% (median of {ROUNDS} alternating rounds of {SAMPLES} requests alone / waiting; rounds \
             {:+.0}%..{:+.0}%); pooled p99 {:.0} -> {:.0} us, p50 {:.0} -> {:.0} us; accepted within {:.2} s; \
             while accepting: p99 {:.0} us",
            rise * 100.0,
            rises[0] * 100.0,
            rises[rises.len() - 1] * 100.0,
            us(alone_p99),
            us(waiting_p99),
            us(alone_p50),
            us(waiting_p50),
            accepted_within.as_secs_f64(),
            us(burst_p99),
        ),
        rise <= 0.20 && measured_by < timeout,
    );
    // The measurement was taken while the slow connections waited.
    assert!(measured_by < timeout, "measured {measured_by:?} after opening, past the {timeout:?} timeout");
    // Loose for a loaded box (chaos.sh reports the strict 20%); starved, the normal client would
    // wait for a slow one's timeout (3 s) or fail.
    assert!(
        waiting_p99 < alone_p99 * 5 + Duration::from_millis(50),
        "p99 {waiting_p99:?} while slow clients wait vs {alone_p99:?}"
    );
    table_row(
        "1,000 connections with half a request head",
        "http + grpc",
        "closed by --header-read-timeout (3 s)",
        format!("all closed within {:.1} s of the last one opening", closed_within.as_secs_f64()),
        closed_within < timeout + Duration::from_secs(1),
    );
    runtime.block_on(server.shutdown());
}

fn identity_spec() -> perfbench::client::RequestSpec {
    use perfbench::client::{InputSource, OutputTarget, RequestSpec};
    RequestSpec {
        model_name: "identity".into(),
        model_version: String::new(),
        inputs: vec![(
            "INPUT0".into(),
            InputSource::Inline(perfbench::tensor::Tensor::from_f32(vec![1, 3], &[1.0, 2.0, 3.0])),
        )],
        outputs: vec![("OUTPUT0".into(), OutputTarget::Inline)],
        decoupled: false,
    }
}

/// Server, gRPC keepalive and max-age are settable: behind a proxy that resets connections idle
/// for 1 s (the 30 s of a cloud load balancer, shortened), server pings every 300 ms keep the
/// client's one connection up through idle gaps of 2.5 s, and no request fails; a 1 s max age
/// replaces the connection (GOAWAY) and again no request fails. Without keepalive, every idle gap
/// costs a connection.
#[test]
fn grpc_keepalive_and_max_age_cost_no_failed_request() {
    use perfbench::client::grpc::GrpcClient;
    use perfbench::client::{ConnectOptions, InferClient};
    use std::sync::atomic::Ordering;
    let runtime = runtime();
    let keepalive =
        ConnectionSettings { grpc_keepalive_interval: Some(Duration::from_millis(300)), ..Default::default() };
    let aged = ConnectionSettings { grpc_max_connection_age: Some(Duration::from_secs(1)), ..keepalive.clone() };
    for (name, settings) in [("keepalive 0.3 s", keepalive), ("keepalive 0.3 s, max age 1 s", aged)] {
        let server = start_server(&runtime, settings);
        let idle_cut = Fault { idle_cut: Some(Duration::from_secs(1)), ..Default::default() };
        let proxy = runtime.block_on(Proxy::start(server.grpc_addr, idle_cut));
        let (failed, accepted) = runtime.block_on(async {
            let client = GrpcClient::new(&proxy.addr.to_string(), &ConnectOptions::default()).unwrap();
            let request = client.prepare(&identity_spec()).unwrap();
            let mut failed = 0;
            for _ in 0..3 {
                for _ in 0..20 {
                    failed += client.infer(&request, false).await.0.is_err() as usize;
                }
                tokio::time::sleep(Duration::from_millis(2500)).await;
            }
            (failed, proxy.counters().accepted.load(Ordering::Relaxed))
        });
        let cut = proxy.counters().idle_cut.load(Ordering::Relaxed);
        let aging = name.contains("max age");
        // Three bursts 2.5 s apart: kept alive, one connection; aged at 1 s, one per burst.
        let most = if aging { 3 } else { 1 };
        table_row(
            &format!("proxy resets connections idle 1 s; server {name}"),
            "grpc",
            "no failed request; keepalive keeps the connection",
            format!("{failed} failed of 60, {accepted} connection(s), {cut} idle cut(s)"),
            failed == 0 && accepted <= most as u64,
        );
        assert_eq!(failed, 0, "{name}: requests failed");
        assert!(accepted <= most as u64, "{name}: {accepted} connections ({cut} cut idle)");
        if aging {
            assert!(accepted >= 2, "{name}: max age never replaced the connection");
        } else {
            assert_eq!(cut, 0, "{name}: keepalive should keep the connection from idling");
        }
        drop(proxy);
        runtime.block_on(server.shutdown());
    }
}

/// An identity request of `n` floats (4·n bytes of body and as much of answer).
fn identity_spec_of(n: usize) -> perfbench::client::RequestSpec {
    use perfbench::client::InputSource;
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let mut spec = identity_spec();
    spec.inputs[0].1 = InputSource::Inline(perfbench::tensor::Tensor::from_f32(vec![1, n as i64], &values));
    spec
}

/// A column of the first row of perf_analyzer's CSV, by header name (µs).
fn csv_value(csv: &Path, column: &str) -> f64 {
    let text = std::fs::read_to_string(csv).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().expect("one row").split(',').collect();
    let at = header.iter().position(|h| *h == column).unwrap_or_else(|| panic!("no column {column}"));
    row[at].parse().unwrap()
}

/// Client, measures what was added: with 10 ms added each way by the proxy, p50 rises by 20 ms
/// (strict: ± 0.5 ms; asserted within 19..26 ms), and the rise is in the network stage, not in
/// the server's queue or compute. The baseline is the same server through the same proxy with no
/// fault, same run, at the same load: 100 requests/s, so in both runs every hop wakes a thread
/// that idled for milliseconds. (At concurrency 1 the baseline ran back to back on threads kept
/// warm, and the delayed run's wake-ups after 10 ms idle read +0.3..+0.6 ms with the proxy on time.)
#[test]
fn ten_ms_each_way_adds_twenty_ms_to_p50_in_the_network_stage() {
    let runtime = runtime();
    let server = start_server(&runtime, ConnectionSettings::default());
    for (wire, flags) in WIRES {
        let delayed = runtime.block_on(Proxy::start(
            front_end(&server, wire),
            Fault { delay: Duration::from_millis(10), ..Default::default() },
        ));
        let dir = tempfile::tempdir().unwrap();
        let measure = |url: String, name: &str| {
            let csv = dir.path().join(name);
            let extra = [
                "--measurement-mode",
                "count_windows",
                "--measurement-request-count",
                "100",
                "-s",
                "100",
                "--request-rate-range",
                "100",
            ];
            let mut child = spawn_profile(&url, flags, &extra, &csv);
            let (status, err) = wait_at_most(&mut child, Duration::from_secs(120), wire);
            assert!(status.success(), "{wire}: {err}");
            csv
        };
        // The baseline goes through the same proxy with no fault, so only the delay differs.
        let plain = runtime.block_on(Proxy::start(front_end(&server, wire), Fault::default()));
        let direct = measure(plain.addr.to_string(), "direct.csv");
        let through = measure(delayed.addr.to_string(), "delayed.csv");
        let rise_ms = (csv_value(&through, "p50 latency") - csv_value(&direct, "p50 latency")) / 1000.0;
        let network_ms =
            (csv_value(&through, "Network+Server Send/Recv") - csv_value(&direct, "Network+Server Send/Recv")) / 1000.0;
        let server_ms = |csv: &Path| {
            ["Server Queue", "Server Compute Input", "Server Compute Infer", "Server Compute Output"]
                .iter()
                .map(|c| csv_value(csv, c))
                .sum::<f64>()
                / 1000.0
        };
        let server_rise_ms = server_ms(&through) - server_ms(&direct);
        let late_us = delayed.counters().mean_late_us();
        table_row(
            "10 ms added each way by the proxy",
            wire,
            "p50 rises 20 ms +- 0.5 ms, in the network stage",
            format!(
                "p50 {rise_ms:+.2} ms; network stage {network_ms:+.2} ms; server {server_rise_ms:+.3} ms; \
                 proxy's chunks {late_us:.0} us late on average"
            ),
            (rise_ms - 20.0).abs() <= 0.5 && (network_ms - 20.0).abs() <= 0.5 && server_rise_ms.abs() < 0.5,
        );
        assert!((19.0..26.0).contains(&rise_ms), "{wire}: p50 rose {rise_ms} ms");
        assert!((19.0..26.0).contains(&network_ms), "{wire}: network stage rose {network_ms} ms");
        assert!(server_rise_ms.abs() < 2.0, "{wire}: the server's stages moved {server_rise_ms} ms");
    }
    runtime.block_on(server.shutdown());
}

/// A free loopback port (bound once and let go), for a server restarted on the same ports.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `perfbench serve` of `identity` on `http`/`grpc`, in its own process (so it can be killed);
/// returns once it answers ready.
fn serve_process(http: u16, grpc: u16) -> Child {
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(["serve", "--models", "identity", "--metrics-port", "0"])
        .args(["--http-port", &http.to_string(), "--grpc-port", &grpc.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("runs perfbench serve");
    let addr: SocketAddr = ([127, 0, 0, 1], http).into();
    wait_until(Duration::from_secs(60), "perfbench serve answers ready", || {
        assert!(child.try_wait().unwrap().is_none(), "perfbench serve exited");
        TcpStream::connect(addr).is_ok_and(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ready(&mut s)
        })
    });
    child
}

/// Client, reconnects: the server is killed (SIGKILL) mid-sweep and started again on the same
/// ports a second later. The sweep waits for it, rebuilds its HTTP pool / gRPC channels and
/// streams, registers its shared-memory regions again, and measures every remaining point:
/// report.csv has a row per point, exactly one flagged `Interrupted` (and not stable), and the
/// rows after it have no failure (with shared memory, a region not registered again fails
/// every request). Broken (no reconnect), the run ends with exit 3 after the interrupted point.
#[test]
fn a_server_restarted_mid_sweep_costs_one_interrupted_row() {
    let shm: &[&str] = &["--shared-memory", "system"];
    let cases: [(&str, &[&str], &[&str]); 5] = [
        ("http", &[], &[]),
        ("grpc", &["-i", "grpc"], &[]),
        ("grpc-streaming", &["-i", "grpc", "--streaming"], &[]),
        ("http + shm", &[], shm),
        ("grpc + shm", &["-i", "grpc"], shm),
    ];
    const LEVELS: usize = 5;
    for (wire, flags, extra) in cases {
        let (http, grpc) = (free_port(), free_port());
        let mut server = serve_process(http, grpc);
        let dir = tempfile::tempdir().unwrap();
        let url = if wire.starts_with("http") { format!("127.0.0.1:{http}") } else { format!("127.0.0.1:{grpc}") };
        let levels = format!("1..{LEVELS}");
        let rule =
            ["--concurrency", &levels, "--stop-when", "stable", "-s", "100", "--measurement-mode", "time_windows"];
        let args: Vec<&str> = flags.iter().chain(extra).chain(&rule).chain(&["-p", "500"]).copied().collect();
        let mut child = spawn_online(&url, &args, dir.path());
        let csv = dir.path().join("perf_analyzer.csv");
        wait_until(Duration::from_secs(90), "two rows measured", || rows(&csv) >= 2);
        // Mid-way through the third point's first window.
        std::thread::sleep(Duration::from_millis(200));
        server.kill().unwrap();
        server.wait().unwrap();
        let killed = Instant::now();
        std::thread::sleep(Duration::from_secs(1));
        let mut server = serve_process(http, grpc);
        let (status, err) = wait_at_most(&mut child, Duration::from_secs(120), wire);
        let _ = server.kill();
        let _ = server.wait();
        let (table, _) = perfbench::report::read_table(&dir.path().join("report.csv")).unwrap();
        let interrupted: Vec<usize> = (0..table.len()).filter(|&i| table[i].interrupted).collect();
        let after_clean =
            interrupted.first().is_some_and(|&i| table[i + 1..].iter().all(|r| r.failed == 0 && r.requests > 0));
        let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap_or_default();
        table_row(
            "server killed mid-sweep, restarted on its ports 1 s later",
            wire,
            "reconnects; every point measured; one row marked interrupted",
            format!(
                "exit {:?}, {} of {LEVELS} rows, interrupted {:?}, rows after it clean: {after_clean}, {:.1} s after the kill",
                status.code(),
                table.len(),
                interrupted.iter().map(|&i| i + 1).collect::<Vec<_>>(),
                killed.elapsed().as_secs_f64()
            ),
            status.success() && table.len() == LEVELS && interrupted.len() == 1 && after_clean,
        );
        assert!(status.success(), "{wire}: {err}");
        assert_eq!(table.len(), LEVELS, "{wire}: every point has its row");
        assert_eq!(interrupted.len(), 1, "{wire}: one interrupted row: {table:?}");
        let broken = &table[interrupted[0]];
        assert!(!broken.stable, "{wire}: an interrupted row is never stable");
        assert!(interrupted[0] >= 2, "{wire}: the rows before the kill are whole");
        assert!(after_clean, "{wire}: the points after the restart failed requests: {table:?}");
        assert!(md.contains("Interrupted"), "{wire}: report.md says which row: {md}");
    }
}

/// Client, stays open-loop: `perfbench serve` is stopped (SIGSTOP) for 2 s in the middle of a
/// `--request-rate-range 100` run of 600 requests (one window of 6 s). Requests keep their
/// schedule: the send lag (intended to actual send) stays small and none is skipped; latency
/// counts from the intended send time, so the stall shows in p99 (a request sent as the stall
/// began waited about 2 s). Broken (requests held back by the stall, or latency timed from a
/// late send), the send lag grows to the stall or p99 stays at the unstalled sub-millisecond.
/// Full mode only (`scripts/chaos.sh`): over HTTP its send lag read 227 ms alone and 1.3 s
/// beside other tests on the loaded 2-core machine, so in `cargo test` it measured the machine.
#[test]
#[ignore = "load-sensitive: scripts/chaos.sh runs it"]
fn an_open_loop_keeps_its_schedule_through_a_two_second_server_stall() {
    for (wire, flags) in [("http", &[][..]), ("grpc", &["-i", "grpc"][..])] {
        let (http, grpc) = (free_port(), free_port());
        let mut server = serve_process(http, grpc);
        let dir = tempfile::tempdir().unwrap();
        let url = if wire == "http" { format!("127.0.0.1:{http}") } else { format!("127.0.0.1:{grpc}") };
        let rate = ["--request-rate-range", "100", "--request-count", "600", "--warmup-request-count", "0"];
        let args: Vec<&str> = flags.iter().chain(&rate).copied().collect();
        let mut child = spawn_online(&url, &args, dir.path());
        // The load runs 6 s from about half a second after the start: stall its middle.
        std::thread::sleep(Duration::from_millis(2000));
        let pid = server.id() as i32;
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(2));
        unsafe { libc::kill(pid, libc::SIGCONT) };
        let (status, err) = wait_at_most(&mut child, Duration::from_secs(120), wire);
        let _ = server.kill();
        let _ = server.wait();
        assert!(status.success(), "{wire}: {err}");
        let (table, _) = perfbench::report::read_table(&dir.path().join("report.csv")).unwrap();
        let row = &table[0];
        let (lag_ms, p99_ms, p50_ms) = (row.client.send_lag_p99_us / 1e3, row.p99_us / 1e3, row.p50_us / 1e3);
        table_row(
            "server stopped (SIGSTOP) 2 s during a 100 req/s run",
            wire,
            "schedule kept (send lag p99 <= 5 ms, all 600 answered); the stall shows in p99 (>= 1.5 s)",
            format!("send lag p99 {lag_ms:.2} ms, {} answered, p50 {p50_ms:.2} ms, p99 {p99_ms:.0} ms", row.requests),
            lag_ms <= 5.0 && row.requests == 600 && p99_ms >= 1500.0,
        );
        assert_eq!(row.requests + row.failed, 600, "{wire}: every request ended: {row:?}");
        assert_eq!(row.failed, 0, "{wire}: {row:?}");
        // A request sent as the stall began waited ~2 s; loose for a loaded box.
        assert!(p99_ms >= 1000.0, "{wire}: the stall is missing from p99: {row:?}");
        // Held back by the stall, the lag would be ~2 s.
        assert!(lag_ms < 200.0, "{wire}: requests fell behind their schedule: {row:?}");
    }
}

/// Peak and current resident memory of process `pid`, in bytes (VmHWM, VmRSS).
fn memory_of(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        let line = status.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("no {name}"));
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    };
    (field("VmHWM:"), field("VmRSS:"))
}

/// One upload of `data` (FP32 values) to `identity` over HTTP with binary tensor data; the
/// answer's status code and body length.
fn upload(addr: SocketAddr, data: &[u8]) -> std::io::Result<(u16, usize)> {
    let header = format!(
        r#"{{"inputs":[{{"name":"INPUT0","shape":[1,{}],"datatype":"FP32","parameters":{{"binary_data_size":{}}}}}],"outputs":[{{"name":"OUTPUT0","parameters":{{"binary_data":true}}}}]}}"#,
        data.len() / 4,
        data.len()
    );
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(300)))?;
    let head = format!(
        "POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n\
         Inference-Header-Content-Length: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        header.len(),
        header.len() + data.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(header.as_bytes())?;
    stream.write_all(data)?;
    // The answer, read and dropped as it comes.
    let mut buf = vec![0u8; 1 << 20];
    let mut head = Vec::new();
    let mut total = 0usize;
    loop {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        if head.len() < 16 {
            head.extend_from_slice(&buf[..n.min(16)]);
        }
        total += n;
    }
    let code = std::str::from_utf8(&head[9..12.min(head.len())]).ok().and_then(|c| c.parse().ok()).unwrap_or(0);
    Ok((code, total))
}

/// Server, bounded memory under big bodies: `clients` clients each upload 64 MiB at once to
/// `perfbench serve --max-body-bytes-in-flight budget`. Every one is answered 200 with its data,
/// and the server's peak resident memory rises by at most 4 × the budget (the bodies in
/// flight, the batches gathered from them, the answers). Broken (no budget), it holds every
/// body at once, and their copies.
fn uploads_stay_within_the_body_budget(clients: usize, budget_mib: u64) {
    const BODY: usize = 64 << 20;
    let (http, grpc) = (free_port(), free_port());
    let mut server = Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(["serve", "--models", "identity", "--metrics-port", "0"])
        .args(["--http-port", &http.to_string(), "--grpc-port", &grpc.to_string()])
        .args(["--max-body-bytes-in-flight", &(budget_mib << 20).to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], http).into();
    wait_until(Duration::from_secs(60), "perfbench serve answers ready", || {
        TcpStream::connect(addr).is_ok_and(|mut s| {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            ready(&mut s)
        })
    });
    let (_, baseline) = memory_of(server.id());
    let data: std::sync::Arc<Vec<u8>> = std::sync::Arc::new((0..BODY).map(|i| (i % 251) as u8).collect());
    let started = Instant::now();
    let answers: Vec<std::io::Result<(u16, usize)>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                let data = data.clone();
                scope.spawn(move || upload(addr, &data))
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let (peak, _) = memory_of(server.id());
    let _ = server.kill();
    let _ = server.wait();
    let ok = answers.iter().filter(|a| matches!(a, Ok((200, n)) if *n > BODY)).count();
    let rise_mib = peak.saturating_sub(baseline) >> 20;
    let bound_mib = 4 * budget_mib;
    table_row(
        &format!("{clients} clients upload 64 MiB each at once, --max-body-bytes-in-flight {budget_mib} MiB"),
        "http",
        "all answered; server memory rises <= 4 x the budget",
        format!(
            "{ok} of {clients} answered 200 in {:.1} s; peak RSS +{rise_mib} MiB (bound {bound_mib} MiB)",
            took.as_secs_f64()
        ),
        ok == clients && rise_mib <= bound_mib,
    );
    let failed: Vec<_> = answers.iter().filter(|a| !matches!(a, Ok((200, n)) if *n > BODY)).take(3).collect();
    assert_eq!(ok, clients, "every upload answered with its data: {failed:?}");
    assert!(rise_mib <= bound_mib, "peak RSS rose {rise_mib} MiB with a {budget_mib} MiB budget");
}

/// The short variant: 32 uploads of 64 MiB (2 GiB) through a 256 MiB budget.
#[test]
fn large_uploads_at_once_stay_within_the_body_budget() {
    uploads_stay_within_the_body_budget(32, 256);
}

/// The full promise: 256 uploads of 64 MiB (16 GiB) through the default 2 GiB budget; minutes
/// of loopback copying, so run by `scripts/chaos.sh` (full mode) only.
#[test]
#[ignore]
fn two_hundred_fifty_six_uploads_of_64_mib_stay_within_the_default_budget() {
    uploads_stay_within_the_body_budget(256, 2048);
}
