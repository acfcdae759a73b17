//! Sequence models from the command line: the sequence flags in the typed plan and back, and
//! `--validate-outputs` refusing a run with nothing to validate against.

use crate::common::{assert_fails, perfbench, stderr};

#[test]
fn sequence_flags_round_trip_through_print_plan() {
    let out = perfbench(&[
        "profile",
        "-m",
        "accumulate",
        "--sequence-length",
        "5",
        "--sequence-length-variation",
        "10",
        "--sequence-id-range",
        "100:200",
        "--num-of-sequences",
        "6",
        "--serial-sequences",
        "--validate-outputs",
        "--request-rate-range",
        "50",
        "--print-plan",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    for line in [
        "[sweeps.sequences]",
        "length = 5",
        "length_given = true",
        "length_variation_pct = 10.0",
        "id_start = 100",
        "id_end = 200",
        "count = 6",
        "serial = true",
        "validate_outputs = true",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let dir = tempfile::tempdir().unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, &text).unwrap();
    let again = perfbench(&["run", plan.to_str().unwrap(), "--print-plan"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
}

#[test]
fn validate_outputs_with_nothing_to_validate_is_a_one_line_error() {
    let args = ["profile", "-m", "identity", "--service-kind", "inprocess", "--shape", "INPUT0:4"];
    let args = [&args[..], &["--validate-outputs", "--request-count", "5"]].concat();
    assert_fails(&args, 2, "--validate-outputs has nothing to validate against");
}

/// Runs `perfbench profile` on the bundled `accumulate` with short count windows.
fn profile_accumulate(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "profile",
        "-m",
        "accumulate",
        "--measurement-mode",
        "count_windows",
        "--measurement-request-count",
        "200",
    ];
    args.extend(["-s", "100"]);
    args.extend(extra);
    perfbench(&args)
}

/// Issue H's acceptance: the bundled sequence batcher and `accumulate`, driven in sequences of
/// 20 at concurrency 4, answer every request with the running sum the client expects, over
/// HTTP, gRPC and gRPC streaming (a single mismatch would end the run non-zero).
#[test]
fn accumulate_running_sums_hold_over_http_grpc_and_streaming() {
    for protocol in [&["-i", "http"][..], &["-i", "grpc"], &["-i", "grpc", "--streaming"]] {
        let mut extra = vec!["--sequence-length", "20", "--sequence-length-variation", "0"];
        extra.extend(["--concurrency-range", "4", "--validate-outputs"]);
        extra.extend(protocol);
        let out = profile_accumulate(&extra);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{protocol:?}: {}\n{text}", stderr(&out));
        assert!(text.contains("perfbench: 0 failed"), "{protocol:?}: {text}");
        assert!(text.contains("average length 20.0 requests"), "{protocol:?}: {text}");
    }
}

/// The check can fail: validation_data that is not the running sum is caught on every answer
/// with --validate-outputs (counted, exit 3), and ends the run at the first one without it.
#[test]
fn a_wrong_running_sum_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("wrong.json");
    std::fs::write(
        &data,
        r#"{"data": [[{"INPUT0": [1]}, {"INPUT0": [2]}]], "validation_data": [[{"OUTPUT0": [1]}, {"OUTPUT0": [4]}]]}"#,
    )
    .unwrap();
    let data = data.to_str().unwrap();
    let counted = profile_accumulate(&["--input-data", data, "--validate-outputs", "-i", "grpc", "--streaming"]);
    assert_eq!(counted.status.code(), Some(3), "{}", stderr(&counted));
    assert!(stderr(&counted).contains("did not match the expected output"), "{}", stderr(&counted));
    let first = profile_accumulate(&["--input-data", data]);
    assert_eq!(first.status.code(), Some(2), "{}", stderr(&first));
    assert!(stderr(&first).contains("Output doesn't match expected output"), "{}", stderr(&first));
}
