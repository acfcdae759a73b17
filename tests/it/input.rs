//! `--input-data` end to end against the bundled server, with the interop corpus' own data
//! files (tests/interop/data): several files, directories, streams, batching of data steps,
//! `validation_data`, and perf_analyzer's sentence leading every refusal.

use crate::common::{perfbench, stderr};

const DATA: &str = "tests/interop/data";

/// `perfbench profile` with short count windows, stable at once.
fn profile(args: &[&str]) -> std::process::Output {
    let mut argv = vec!["profile"];
    argv.extend(args);
    argv.extend(["--measurement-mode", "count_windows", "--measurement-request-count", "20", "-s", "100"]);
    perfbench(&argv)
}

fn data(name: &str) -> String {
    format!("{DATA}/{name}")
}

fn assert_ok(args: &[&str]) {
    let out = profile(args);
    assert!(out.status.success(), "perfbench {args:?}\nstderr: {}", stderr(&out));
}

/// Fails non-zero with one line that starts with perf_analyzer's sentence.
fn assert_refused(args: &[&str], sentence: &str) {
    let out = profile(args);
    let err = stderr(&out);
    assert!(!out.status.success(), "perfbench {args:?} passed");
    assert_eq!(err.lines().count(), 1, "perfbench {args:?}: one line expected, got:\n{err}");
    assert!(err.contains(sentence), "perfbench {args:?}: expected '{sentence}' in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn files_streams_and_directories_are_sent() {
    let (a, steps, streams) = (data("identity_a.json"), data("identity_steps.json"), data("identity_streams.json"));
    assert_ok(&["-m", "identity", "--input-data", &a, "--input-data", &steps, "--shape", "INPUT0:16"]);
    assert_ok(&["-m", "identity", "-i", "grpc", "--input-data", &streams, "--shape", "INPUT0:16"]);
    assert_ok(&["-m", "identity", "-b", "2", "--input-data", &steps, "--shape", "INPUT0:16"]);
    assert_ok(&["-m", "identity", "--input-data", &data("dir_identity"), "--shape", "INPUT0:16"]);
    assert_ok(&["-m", "add_sub", "-i", "grpc", "--input-data", &data("dir_add_sub")]);
    assert_ok(&["-m", "identity_bytes", "--input-data", &data("dir_bytes"), "--shape", "INPUT0:3"]);
    let optional = ["--shape", "INPUT0:16", "--shape", "INPUT1:16"];
    assert_ok(
        &[&["-m", "optional", "-i", "grpc", "--input-data", &data("optional_mixed.json")][..], &optional].concat(),
    );
}

#[test]
fn validation_data_passes_when_right_and_fails_the_run_when_wrong() {
    assert_ok(&["-m", "add_sub", "--input-data", &data("add_sub_valid.json")]);
    let steps = data("add_sub_steps.json");
    assert_ok(&["-m", "add_sub", "-i", "grpc", "-a", "--input-data", &steps, "--concurrency-range", "2"]);
    let wrong = data("add_sub_wrong.json");
    assert_refused(&["-m", "add_sub", "--input-data", &wrong], "Output doesn't match expected output");
    assert_refused(
        &["-m", "add_sub", "-i", "grpc", "-a", "--input-data", &wrong, "--concurrency-range", "2"],
        "Output doesn't match expected output",
    );
    assert_refused(
        &["-m", "add_sub", "-b", "4", "--input-data", &data("add_sub_valid.json")],
        "Output size doesn't match expected size",
    );
}

#[test]
fn bad_data_is_refused_in_perf_analyzer_words() {
    let shape = ["--shape", "INPUT0:16"];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["-m".into(), "identity".into(), "-b".into(), "2".into(), "--input-data".into(), data("identity_shaped.json")],
            "can not batch tensors with different shapes together (input 'INPUT0' expected shape [16] and received [8]",
        ),
        (
            vec!["-m".into(), "var_shape".into(), "-i".into(), "grpc".into(), "-b".into(), "2".into(), "--input-data".into(), data("var_shape.json")],
            "can not batch tensors with different shapes together (input 'INPUT0' expected shape [2,3] and received [3,4]",
        ),
        (
            vec!["-m".into(), "add_sub".into(), "--input-data".into(), data("add_sub_short.json")],
            "mismatch in the data provided for INPUT0. Expected: 64 bytes, Got: 32 bytes",
        ),
        (
            vec!["-m".into(), "identity".into(), "--input-data".into(), data("identity_a.json"), "--input-data".into(), data("identity_b.json"), shape[0].into(), shape[1].into()],
            "mismatch in the data provided for INPUT0. Expected: 64 bytes, Got: 32 bytes",
        ),
        (
            vec!["-m".into(), "identity_bytes".into(), "--input-data".into(), data("bytes.json"), "--shape".into(), "INPUT0:3".into()],
            "The supplied shape of [2] for input \"INPUT0\" is incompatible with the model's input shape of [3]",
        ),
        (
            vec!["-m".into(), "identity".into(), "--input-data".into(), data("identity_valid_misaligned.json"), shape[0].into(), shape[1].into()],
            "The 'validation_data' field doesn't align with 'data' field in the json file",
        ),
        (
            vec!["-m".into(), "add_sub".into(), "-i".into(), "grpc".into(), "--input-data".into(), data("add_sub_valid_misaligned.json")],
            "The 'validation_data' field doesn't align with 'data' field in the json file",
        ),
        (
            vec!["-m".into(), "add_sub".into(), "--input-data".into(), data("add_sub_valid_wrongsize.json")],
            "mismatch in the data provided for OUTPUT0. Expected: 64 bytes, Got: 32 bytes",
        ),
        (
            vec!["-m".into(), "identity".into(), "--input-data".into(), data("identity_valid.json"), shape[0].into(), shape[1].into()],
            "The variable-sized tensor \"OUTPUT0\" with model shape [-1] needs to have its shape fully defined. See the --shape option.",
        ),
        (
            vec!["-m".into(), "optional".into(), "-b".into(), "2".into(), "--input-data".into(), data("optional_mixed.json"), shape[0].into(), shape[1].into(), "--shape".into(), "INPUT1:16".into()],
            "For batch sizes larger than 1, the same set of inputs must be specified for each batch. You cannot use different set of optional inputs for each individual batch.",
        ),
        (
            vec!["-m".into(), "identity".into(), shape[0].into(), shape[1].into(), "--input-data".into(), data("no_such_file.json")],
            "Failed to parse --input-data. Unsupported type provided:",
        ),
        (
            vec!["-m".into(), "identity_nobatch".into(), "-b".into(), "2".into(), shape[0].into(), shape[1].into()],
            "can not specify batch size > 1 as the model does not support batching",
        ),
        (
            vec!["-m".into(), "identity".into(), "-b".into(), "65".into(), shape[0].into(), shape[1].into()],
            "inference request batch-size must be <= 64 for 'identity'",
        ),
        (
            vec!["-m".into(), "add_sub".into(), "-i".into(), "grpc".into(), "-b".into(), "9".into()],
            "inference request batch-size must be <= 8 for 'add_sub'",
        ),
        (
            vec!["-m".into(), "var_shape".into(), "-i".into(), "grpc".into()],
            "input INPUT0 contains dynamic shape, provide shapes to send along with the request",
        ),
        (
            vec!["-m".into(), "optional".into(), shape[0].into(), shape[1].into()],
            "input INPUT1 contains dynamic shape, provide shapes to send along with the request",
        ),
    ];
    for (args, sentence) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(&args, sentence);
    }
}

#[test]
fn several_input_data_round_trip_through_print_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (data("identity_a.json"), data("identity_steps.json"));
    let out = perfbench(&["profile", "-m", "identity", "--input-data", &a, "--input-data", &b, "--print-plan"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(&format!("data = [\"{a}\", \"{b}\"]")), "{text}");
    let plan = dir.path().join("plan.toml");
    std::fs::write(&plan, &text).unwrap();
    let again = perfbench(&["run", plan.to_str().unwrap(), "--print-plan"]);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(String::from_utf8(again.stdout).unwrap(), text);
    // One --input-data stays a plain string.
    let out = perfbench(&["profile", "-m", "identity", "--input-data", "zero", "--print-plan"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("data = \"zero\""));
}
