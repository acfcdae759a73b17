//! Sequence models from the command line: the sequence flags in the typed plan and back, and
//! `--validate-outputs` refusing a run with nothing to validate against.

use crate::common::{perfbench, stderr};

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
    let out = perfbench(&[
        "profile",
        "-m",
        "identity",
        "--service-kind",
        "inprocess",
        "--shape",
        "INPUT0:4",
        "--validate-outputs",
        "--request-count",
        "5",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("--validate-outputs has nothing to validate against"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}
