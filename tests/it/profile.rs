//! `perfbench profile` end to end: the binary's errors and exit codes, and measurements against
//! the bundled server's `delay` models (known compute time), with count windows and small request
//! counts so each test takes seconds. Timing bounds are generous: CI is a noisy 2-core box.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{assert_fails, perfbench, stderr};
use perfbench::results::{LoadPoint, ReportRow};

/// Runs `perfbench profile` with `args` and short count windows of `requests` requests (stable
/// at once: threshold 100%), writing perf_analyzer's CSV to `csv`.
fn profile_to_csv(args: &[&str], requests: &str, csv: &Path) -> Output {
    let mut argv = vec!["profile"];
    argv.extend(args);
    argv.extend(["--measurement-mode", "count_windows", "--measurement-request-count", requests, "-s", "100"]);
    argv.extend(["-f", csv.to_str().unwrap()]);
    perfbench(&argv)
}

/// Asserts a failed run: exit 2, one line on stderr containing `needle`.
fn assert_bad_input(args: &[&str], needle: &str) {
    assert_fails(args, 2, needle);
}

/// A model repository with `delay` models of known compute time.
fn repository(models: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, config) in models {
        let model_dir = dir.path().join(name);
        std::fs::create_dir(&model_dir).unwrap();
        std::fs::write(model_dir.join("config.pbtxt"), config).unwrap();
    }
    dir
}

fn delay_model(delay_us: u64, max_batch: u32, extra: &str) -> String {
    let batching = if max_batch > 0 { "dynamic_batching { max_queue_delay_microseconds: 0 }" } else { "" };
    format!(
        r#"backend: "delay"
max_batch_size: {max_batch}
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{batching}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters {{ key: "delay_us" value {{ string_value: "{delay_us}" }} }}
parameters {{ key: "delay_per_item_us" value {{ string_value: "0" }} }}
{extra}
"#
    )
}

/// Parses a perfbench command line and runs it in this process.
fn profile(line: &str, repo: &Path) -> Result<Vec<ReportRow>, String> {
    let argv: Vec<String> = ["perfbench", "profile"]
        .map(String::from)
        .into_iter()
        .chain(line.split_whitespace().map(String::from))
        .chain(["--shape", "INPUT0:4", "--model-repository"].map(String::from))
        .chain([repo.display().to_string()])
        .collect();
    let plan = perfbench::cli::parse_plan(argv)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let outcomes = runtime.block_on(perfbench::run::execute_async(&plan)).map_err(|e| e.to_string())?;
    Ok(outcomes.into_iter().flat_map(|o| o.rows).collect())
}

fn within(value: f64, expected: f64, fraction: f64) -> bool {
    (value - expected).abs() <= expected * fraction
}

#[test]
fn a_bad_flag_is_one_line_and_exit_2() {
    assert_bad_input(&["profile", "-m", "identity", "--no-such-flag"], "--no-such-flag");
}

#[test]
fn unsupported_perf_analyzer_flags_are_named() {
    // The C API: perf_analyzer's own check first, then "not supported".
    assert_bad_input(
        &["profile", "-m", "identity", "--service-kind", "triton_c_api", "--triton-server-directory", "a"],
        "--model-repository should not be empty when using service-kind=triton_c_api.",
    );
    assert_bad_input(
        &["profile", "-m", "identity", "--service-kind", "triton_c_api", "--model-repository", "r"],
        "not supported: --service-kind triton_c_api",
    );
    // A trace level perf_analyzer does not know is refused before anything starts, in its words.
    assert_bad_input(&["profile", "-m", "identity", "--trace-level", "LOUD"], "Failed to parse --trace-level");
    assert_bad_input(&["profile", "-u", "localhost:1"], "Failed to parse -m (model name)");
}

#[test]
fn bls_composing_models_are_reported_as_composing_models() {
    let repo = repository(&[("front", &delay_model(200, 8, "")), ("side", &delay_model(200, 8, ""))]);
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("perf.csv");
    let base = ["-m", "front", "--shape", "INPUT0:4", "--model-repository", repo.path().to_str().unwrap()];
    // "side" is never called by "front": asked with its version, it reads as zeros.
    let listed: Vec<&str> = base.iter().copied().chain(["--bls-composing-models", "side:1"]).collect();
    let out = profile_to_csv(&listed, "20", &csv);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", stderr(&out));
    assert!(stdout.contains("Composing models: \n  side, version: 1\n      Request count: 0"), "{stdout}");
    let composing = std::fs::read_to_string(dir.path().join("perf.composing.csv")).unwrap();
    assert!(composing.lines().any(|l| l.starts_with("1,1,side,0,0,")), "{composing}");
    // Without a version, a model that was never called fails the run, as in perf_analyzer.
    let unversioned: Vec<&str> = base.iter().copied().chain(["--bls-composing-models", "side"]).collect();
    let out = profile_to_csv(&unversioned, "20", &csv);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("failed to find the requested model version: composing model 'side'"));
    assert_bad_input(&[&["profile"][..], &base, &["--bls-composing-models", "nope"]].concat(), "nope");
}

#[test]
fn an_unknown_model_is_reported() {
    assert_bad_input(&["profile", "-m", "nope", "--service-kind", "inprocess"], "nope");
    assert_bad_input(&["profile", "-m", "nope", "-p", "200"], "nope");
    assert_bad_input(&["profile", "-m", "identity", "--service-kind", "inprocess"], "--shape");
}

#[test]
fn a_wrong_shape_is_reported() {
    assert_bad_input(&["profile", "-m", "identity", "--service-kind", "inprocess", "--shape", "INPUT0:2,3"], "INPUT0");
    assert_bad_input(&["profile", "-m", "identity", "--service-kind", "inprocess", "--shape", "NOPE:4"], "NOPE");
}

#[test]
fn an_unreachable_server_is_reported() {
    // The target failed: exit 3.
    assert_fails(&["profile", "-m", "identity", "-u", "127.0.0.1:1"], 3, "unreachable");
    assert_fails(&["profile", "-m", "identity", "-u", "127.0.0.1:1", "-i", "grpc"], 3, "unreachable");
}

/// A server that accepts connections and never answers: the start-up's calls share one
/// deadline (`--stall-timeout`), and the run ends with exit 3 naming the call left unanswered,
/// after a progress line saying what it waits for.
#[test]
fn a_silent_server_ends_the_start_up_within_the_stall_limit() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Accepts and keeps every connection, reading what comes and answering nothing.
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut sink = [0u8; 4096];
                while matches!(std::io::Read::read(&mut stream, &mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    let url = format!("127.0.0.1:{port}");
    for protocol in ["http", "grpc"] {
        let args = ["profile", "-m", "identity", "--shape", "INPUT0:16", "-u", &url, "-i", protocol];
        let started = std::time::Instant::now();
        let out = perfbench(&[&args[..], &["--stall-timeout", "2"]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{protocol}: {err}");
        assert!(err.contains("no answer to the server metadata request"), "{protocol}: {err}");
        assert!(err.contains("--stall-timeout"), "{protocol}: {err}");
        assert!(err.contains("waiting for the server to answer the server metadata request"), "{protocol}: {err}");
        // Generous: the limit is 2 s; without one shared deadline it was minutes.
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "{protocol}: {:?}", started.elapsed());
    }
}

#[test]
fn csv_and_summary_come_out_in_perf_analyzer_shape() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pa.csv");
    let export = dir.path().join("export.json");
    let out = profile_to_csv(
        &[
            "-m",
            "identity",
            "--shape",
            "INPUT0:16",
            "--concurrency-range",
            "1:2",
            "--verbose-csv",
            "--profile-export-file",
            export.to_str().unwrap(),
        ],
        "30",
        &csv,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("*** Measurement Settings ***\n  Batch size: 1\n"), "{stdout}");
    assert!(stdout.contains("Request concurrency: 2\n  Client: \n    Request count: "), "{stdout}");
    assert!(stdout.contains("    Avg HTTP time: "), "{stdout}");
    assert!(stdout.contains("  Server: \n    Inference count: "), "{stdout}");
    assert!(
        stdout.contains("Inferences/Second vs. Client Average Batch Latency\nConcurrency: 1, throughput: "),
        "{stdout}"
    );
    let text = std::fs::read_to_string(&csv).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,request/response,response wait,Inferences/Second CI Low,Inferences/Second CI High,p50 latency CI Low,p50 latency CI High,p99 latency CI Low,p99 latency CI High,Achieved Load,Send Lag p50,Send Lag p99,Client CPU (%),Client Limited");
    assert_eq!(lines.len(), 3);
    for line in &lines[1..] {
        let cells: Vec<&str> = line.split(',').collect();
        assert_eq!(cells.len(), 27, "{line}");
        // perf_analyzer's columns after the throughput are whole microseconds; then perfbench's
        // interval bounds: throughput as a double, latencies whole µs (`inf`: not bounded).
        assert!(cells[2..16].iter().all(|v| v.parse::<u64>().is_ok()), "{line}");
        assert!(cells[16..18].iter().all(|v| v.parse::<f64>().is_ok()), "{line}");
        assert!(cells[18..22].iter().all(|v| v.parse::<u64>().is_ok() || *v == "inf"), "{line}");
        // The client's own figures: requests in flight held (about the 1 or 2 asked), send lag,
        // CPU, and the client-limited flag.
        let held: f64 = cells[22].parse().unwrap();
        assert!(held > 0.2 && held <= 2.5, "{line}");
        assert!(cells[23..25].iter().all(|v| v.parse::<u64>().is_ok()), "{line}");
        assert!(cells[25].parse::<f64>().is_ok() && ["0", "1"].contains(&cells[26]), "{line}");
    }
    let export: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let first = &export["experiments"][0];
    assert_eq!(first["experiment"]["mode"], "concurrency");
    let requests = first["requests"].as_array().unwrap();
    assert!(requests.len() >= 30);
    let r = &requests[0];
    assert!(r["response_timestamps"][0].as_u64().unwrap() > r["timestamp"].as_u64().unwrap());
    // perf_analyzer's per-request values: identity answers with exactly what it was sent.
    let sent = r["request_inputs"]["INPUT0"].as_array().expect("request_inputs.INPUT0");
    assert_eq!(sent.len(), 16);
    assert_eq!(r["response_outputs"][0]["OUTPUT0"].as_array().expect("response_outputs[0].OUTPUT0"), sent);
}

#[test]
fn a_sequence_models_export_names_each_requests_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export.json");
    let args = ["-m", "accumulate", "--sequence-length", "3", "--sequence-length-variation", "0"];
    let export_arg = ["--concurrency-range", "2", "--profile-export-file", export.to_str().unwrap()];
    let out = profile_to_csv(&[&args[..], &export_arg].concat(), "30", &dir.path().join("pa.csv"));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = std::fs::read_to_string(&export).unwrap();
    let export: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(export["version"], "", "perf_analyzer 2.50 writes an empty version");
    let ids: Vec<u64> = export["experiments"][0]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["sequence_id"].as_u64().expect("every request names its sequence"))
        .collect();
    let most = ids.iter().map(|id| ids.iter().filter(|i| *i == id).count()).max().unwrap();
    assert!(ids.iter().all(|&id| id > 0) && most == 3, "{ids:?}");
}

#[test]
fn variable_size_outputs_in_shared_memory_are_sized_from_the_answer() {
    // OUTPUT0 has dims [-1]: its region cannot come from the config. 2 × 65536 FP32 = 512 KiB,
    // five times perf_analyzer's --output-shared-memory-size default.
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("pa.csv");
    let out = profile_to_csv(
        &[
            "-m",
            "identity",
            "-b",
            "2",
            "--shape",
            "INPUT0:65536",
            "--shared-memory",
            "system",
            "--concurrency-range",
            "2",
        ],
        "10",
        &csv,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("perfbench: 0 failed"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 2);
    // A size the user gives is kept, as perf_analyzer keeps it: too small fails with the reason.
    let out = profile_to_csv(
        &["-m", "identity", "--shape", "INPUT0:16", "--shared-memory", "system", "--output-shared-memory-size", "4"],
        "10",
        &csv,
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("should be at least 64 bytes"), "{}", stderr(&out));
}

#[test]
fn delay_model_throughput_and_compute_match_the_configured_time() {
    let repo = repository(&[("slow", &delay_model(5000, 8, ""))]);
    for protocol in ["http", "grpc"] {
        let line =
            format!("-m slow -i {protocol} --measurement-mode count_windows --measurement-request-count 40 -s 50 -r 6");
        let rows = profile(&line, repo.path()).unwrap();
        let r = &rows[0];
        // 5 ms per request, one at a time: 200/s at most.
        assert!(r.throughput <= 205.0 && within(r.throughput, 200.0, 0.25), "{protocol}: {} infer/s", r.throughput);
        assert!(
            within(r.server_compute_infer_us, 5000.0, 0.25),
            "{protocol}: compute infer {} µs",
            r.server_compute_infer_us
        );
        assert!(
            r.server_queue_us < 1000.0,
            "{protocol}: nothing should queue at concurrency 1: {} µs",
            r.server_queue_us
        );
        assert_eq!(r.failed, 0);
    }
}

#[test]
fn dynamic_batching_at_concurrency_8_batches_and_queues() {
    // One instance, 4 ms per execution whatever the batch: while one batch runs, the other
    // requests wait and are executed together next.
    let repo = repository(&[("batched", &delay_model(4000, 8, ""))]);
    let rows = profile(
        "-m batched --concurrency-range 8 --measurement-mode count_windows --measurement-request-count 80 -s 50 -r 6",
        repo.path(),
    )
    .unwrap();
    let r = &rows[0];
    assert!(r.server_avg_batch > 3.0, "average batch {}", r.server_avg_batch);
    // Each request waits for the running batch: about one execution time in the queue.
    assert!(r.server_queue_us > 2000.0 && r.server_queue_us < 12000.0, "queue {} µs", r.server_queue_us);
    // 8 requests per ~4 ms: far above the 250/s of one request at a time.
    assert!(r.throughput > 600.0, "throughput {}", r.throughput);
}

#[test]
fn open_loop_latency_grows_with_the_backlog() {
    // 10 ms per request, no batching: capacity 100/s.
    let repo = repository(&[("slow", &delay_model(10_000, 0, ""))]);
    let under = profile("-m slow --request-rate-range 40 --request-count 40", repo.path()).unwrap();
    // perf_analyzer's rule: --request-count at least the rate.
    let over = profile("-m slow --request-rate-range 200 --request-count 200", repo.path()).unwrap();
    let (under, over) = (&under[0], &over[0]);
    assert_eq!((under.requests, over.requests), (40, 200));
    assert!(under.p99_us < 60_000.0, "under capacity p99 {} µs", under.p99_us);
    // 200 requests sent in 1 s take 2 s to serve: the last waited ~1 s. Latency from the
    // intended send time includes that wait.
    assert!(over.p99_us > 400_000.0, "over capacity p99 {} µs", over.p99_us);
    assert!(over.avg_us > 5.0 * under.avg_us);
    assert!(matches!(over.load, LoadPoint::RequestRate(r) if r == 200.0));
}

#[test]
fn a_model_failing_one_request_in_four_completes_with_failures_counted() {
    let repo = repository(&[(
        "flaky",
        &delay_model(500, 0, r#"parameters { key: "fail_every" value { string_value: "4" } }"#),
    )]);
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("flaky.csv");
    let repo_arg = repo.path().to_str().unwrap();
    let out = profile_to_csv(
        &["-m", "flaky", "--shape", "INPUT0:4", "--model-repository", repo_arg, "--concurrency-range", "1:2"],
        "40",
        &csv,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("perfbench: "))
        .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(failed.len(), 2, "{stdout}");
    assert!(failed.iter().all(|&f| f > 0), "{stdout}");
    assert!(stdout.contains("injected failure"), "{stdout}");
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 3);
}

/// Serves a 2 ms `slow` model, runs `perfbench ARGS -u <server>` as a child, and shuts the server
/// down once `csv` holds two rows. Returns the child's exit.
fn kill_server_after_two_rows(args: &[&str], csv: &Path) -> Output {
    let repo = repository(&[("slow", &delay_model(2000, 0, ""))]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime
        .block_on(perfbench::server::serve::start(perfbench::server::serve::ServeConfig {
            options: perfbench::server::ServerOptions {
                model_repository: Some(repo.path().to_path_buf()),
                ..Default::default()
            },
            ..Default::default()
        }))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_perfbench"))
        .args(args)
        .args(["-u", &server.http_addr.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Generous: only a hang should fail here, never a slow machine.
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::read_to_string(csv).map(|t| t.lines().count()).unwrap_or(0) < 3 {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("no rows written in time; stderr: {}", stderr(&out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    runtime.block_on(server.shutdown());
    child.wait_with_output().unwrap()
}

#[test]
fn a_server_killed_mid_sweep_leaves_the_measured_rows() {
    let dir = tempfile::tempdir().unwrap();
    let csv: PathBuf = dir.path().join("partial.csv");
    let csv_arg = csv.to_str().unwrap();
    let out = kill_server_after_two_rows(
        &["profile", "-m", "slow", "--shape", "INPUT0:4", "--concurrency-range", "1:40", "-p", "300", "-s", "100"]
            .into_iter()
            .chain(["-r", "3", "-f", csv_arg])
            .collect::<Vec<_>>(),
        &csv,
    );
    let err = stderr(&out);
    // The target died: exit 3.
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("unreachable"), "{err}");
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.lines().count() >= 3, "{rows}");
    assert!(rows.lines().count() < 41, "the sweep stopped early: {rows}");
}

#[test]
fn grpc_streaming_measures_like_unary_and_counts_server_errors() {
    let repo = repository(&[("slow", &delay_model(2000, 8, "")), ("flaky", &delay_model(0, 8, FAIL_EVERY_4))]);
    let line = "-m slow -i grpc --streaming --concurrency-range 1:2 --measurement-mode count_windows \
                --measurement-request-count 30 -s 50 -r 6";
    let rows = profile(line, repo.path()).unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows.iter() {
        assert_eq!(r.failed, 0);
        assert!(r.requests >= 30, "{} requests", r.requests);
        assert!(within(r.server_compute_infer_us, 2000.0, 0.5), "compute infer {} µs", r.server_compute_infer_us);
    }
    // Errors come back inside the stream; the stream stays usable and the run goes on.
    let line =
        "-m flaky -i grpc --streaming --measurement-mode count_windows --measurement-request-count 40 -s 100 -r 3";
    let rows = profile(line, repo.path()).unwrap();
    let r = &rows[0];
    assert!(r.failed > 0 && r.requests > 0, "{} requests, {} failed", r.requests, r.failed);
}

/// The zoo's decoupled `repeat` model, streamed: a request completes on its final response, so
/// its latency holds every response's delay; without streaming it is refused in perf_analyzer's
/// words.
#[test]
fn decoupled_models_stream_until_the_final_response() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/data/repeat_small.json");
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("repeat.csv");
    let export = dir.path().join("export.json");
    let export_arg = export.to_str().unwrap();
    let args = ["-m", "repeat", "-i", "grpc", "--streaming", "--input-data", data, "--profile-export-file", export_arg];
    let out = profile_to_csv(&args, "20", &csv);
    assert!(out.status.success(), "{}", stderr(&out));
    // The export lists every response of a request, as perf_analyzer does: the step sending
    // IN [1, 2, 3] gets three responses and the empty final one, IN [7] one and the final.
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let requests = json["experiments"][0]["requests"].as_array().unwrap();
    assert!(requests.len() >= 2, "{json}");
    for r in requests {
        let times: Vec<u64> =
            r["response_timestamps"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]) && times[0] >= r["timestamp"].as_u64().unwrap(), "{r}");
        let expected = match r["request_inputs"]["IN"].as_array().map_or(1, Vec::len) {
            3 => serde_json::json!([{"OUT": 1, "IDX": 0}, {"OUT": 2, "IDX": 1}, {"OUT": 3, "IDX": 2}, {}]),
            _ => serde_json::json!([{"OUT": 7, "IDX": 0}, {}]),
        };
        assert_eq!(r["response_outputs"], expected, "{r}");
        assert_eq!(times.len(), expected.as_array().unwrap().len(), "{r}");
    }
    let table = perfbench::results::csv::read_table(&csv, perfbench::results::csv::Unit::Us).unwrap();
    let row = &table.rows[0];
    // Steps alternate: 3 responses 1 ms apart then 2 ms to the final flag (5 ms), and one at
    // once; the p90 is a slow step, which only waiting for the final response can make.
    assert!(row.p90_us >= 4000.0, "p90 {} µs", row.p90_us);
    assert_bad_input(&["profile", "-m", "repeat", "-i", "grpc", "--input-data", data], "Decoupled models must be run");
}

/// `--input-tensor-format json` / `--output-tensor-format json`: the values travel in the JSON
/// header, and the server's statistics count the requests like binary ones.
#[test]
fn json_tensor_formats_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("json.csv");
    let args =
        ["-m", "identity", "--shape", "INPUT0:4", "--input-tensor-format", "json", "--output-tensor-format=json"];
    let out = profile_to_csv(&args, "20", &csv);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = perfbench::results::csv::read_table(&csv, perfbench::results::csv::Unit::Us).unwrap();
    assert!(table.rows[0].throughput > 0.0);
    assert_bad_input(
        &["profile", "-m", "identity", "--input-tensor-format", "xml"],
        "Failed to parse --input-tensor-format",
    );
}

const FAIL_EVERY_4: &str = r#"parameters { key: "fail_every" value { string_value: "4" } }"#;

#[test]
fn an_online_sweep_whose_server_dies_keeps_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("online");
    let out_arg = out.to_str().unwrap();
    let output = kill_server_after_two_rows(
        &["online", "-m", "slow", "--shape", "INPUT0:4", "--concurrency", "1..40", "--measurement-request-count", "10"]
            .into_iter()
            .chain(["-s", "100", "-r", "3", "--stop-when", "stable", "--out", out_arg])
            .collect::<Vec<_>>(),
        &out.join("perf_analyzer.csv"),
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(last.contains("the sweep stopped after") && last.contains("unreachable"), "{err}");
    // The measured points still get report.csv, report.md and their plot.
    let (rows, _) = perfbench::report::read_table(&out.join("report.csv")).unwrap();
    assert!(rows.len() >= 2 && rows.len() < 40, "{rows:?}");
    assert!(out.join("report.md").is_file());
    assert!(out.join("plots").join("latency_vs_concurrency.png").is_file());
}

#[test]
fn perf_analyzer_spellings_verbose_passes_and_legacy_t() {
    let out = perfbench(&[
        "profile",
        "-m",
        "identity",
        "--service-kind",
        "inprocess",
        "--shape=INPUT0:4",
        "-t2",
        "-v",
        "-v",
        "-p100",
        "-s",
        "100",
        "--sequence-length",
        "4",
        "--string-length",
        "8",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    let load = text.find("Request concurrency: 2").expect("the load line");
    let pass = text.find("  Pass [1] throughput: ").expect("a pass line");
    assert!(load < pass, "{text}");
    let line = text.lines().find(|l| l.starts_with("  Pass [1]")).unwrap();
    assert!(line.contains(" infer/sec. Avg latency: ") && line.ends_with(" usec). "), "{line}");
    assert_eq!(text.matches("Request concurrency: 2").count(), 1, "{text}");
}

/// perf_analyzer 2.50 checks a decoupled model's validation_data against the empty final
/// response, so it always fails there; perfbench gives the same verdict in the same words.
#[test]
fn validation_data_on_a_decoupled_model_fails_as_perf_analyzer_does() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/data/repeat_valid.json");
    assert_fails(
        &["profile", "-m", "repeat", "-i", "grpc", "--streaming", "--input-data", data, "-p", "200"],
        2,
        "Output size doesn't match expected size",
    );
}

/// `--periodic-concurrency-range 2:6:2 --request-period 2` on the decoupled `repeat` model: six
/// requests in all, started two at a time, each batch only once every request of the one before
/// has had its second response (read from the export's own timestamps); a request period above
/// a request's responses fails in perf_analyzer's words.
#[test]
fn periodic_concurrency_grows_in_steps_after_each_request_period() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/data/repeat_small.json");
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export.json");
    let export_arg = export.to_str().unwrap();
    let mut args = vec!["profile", "-m", "repeat", "-i", "grpc", "--streaming", "--input-data", data];
    args.extend(["--periodic-concurrency-range", "2:6:2", "--profile-export-file", export_arg]);
    let out = perfbench(&[args.as_slice(), &["--request-period", "2"]].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&export).unwrap()).unwrap();
    let experiments = json["experiments"].as_array().unwrap();
    assert_eq!(experiments.len(), 1, "{json}");
    assert_eq!(experiments[0]["experiment"], serde_json::json!({"mode": "concurrency", "value": 1}));
    assert_eq!(experiments[0]["window_boundaries"], serde_json::json!([0, u64::MAX]));
    // (send time, response times) in send order.
    let mut requests: Vec<(u64, Vec<u64>)> = experiments[0]["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let times = r["response_timestamps"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
            // IN [1, 2, 3]: three responses and the empty final one; IN [7]: one and the final.
            let expected = match r["request_inputs"]["IN"].as_array().map_or(1, Vec::len) {
                3 => 4,
                _ => 2,
            };
            assert_eq!(r["response_timestamps"].as_array().unwrap().len(), expected, "{r}");
            (r["timestamp"].as_u64().unwrap(), times)
        })
        .collect();
    assert_eq!(requests.len(), 6, "{json}");
    requests.sort();
    for (before, after) in requests.chunks(2).zip(requests.chunks(2).skip(1)) {
        let period_reached = before.iter().map(|(_, times)| times[1]).max().unwrap();
        assert!(after.iter().all(|(sent, _)| *sent >= period_reached), "{before:?} then {after:?}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("Inferences/Second vs. Client"), "{stdout}");
    // IN [7] gets two responses: a period of 3 is never reached.
    assert_fails(
        &[args.as_slice(), &["--request-period", "3"]].concat(),
        2,
        "Request received final response before request period was reached. Request period must be at most the \
         total number of responses received by any request.",
    );
}
