//! The request builder's tests: flags, generated data, data files, batching and validation data.

use std::path::{Path, PathBuf};

use base64::Engine;

use super::*;
use crate::proto::inference::ModelInput;
use crate::tensor::encode_json_values;

fn meta(dtype: &str, shape: Vec<i64>) -> ModelMetadataResponse {
    let t = |n: &str| TensorMetadata { name: n.into(), datatype: dtype.into(), shape: shape.clone() };
    ModelMetadataResponse {
        name: "m".into(),
        inputs: vec![t("INPUT0")],
        outputs: vec![t("OUTPUT0")],
        ..Default::default()
    }
}

fn config(max_batch_size: i32) -> ModelConfig {
    ModelConfig {
        name: "m".into(),
        max_batch_size,
        input: vec![ModelInput { name: "INPUT0".into(), ..Default::default() }],
        ..Default::default()
    }
}

fn inline(spec: &RequestSpec) -> &Tensor {
    match &spec.inputs[0].1 {
        InputSource::Inline(t) => t,
        other => panic!("not inline: {other:?}"),
    }
}

fn files(paths: &[&Path]) -> Vec<InputData> {
    paths.iter().map(|p| InputData::File(p.to_path_buf())).collect()
}

/// Writes `text` to `name` in `dir` and returns the path.
fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn error(meta: &ModelMetadataResponse, config: &ModelConfig, opts: &InputOptions) -> String {
    let e = build_request_set(meta, config, opts, "").unwrap_err().to_string();
    assert!(!e.contains('\n'), "{e}");
    e
}

#[test]
fn shape_flag_parses_and_rejects() {
    let s: ShapeOverride = "INPUT0:2,16".parse().unwrap();
    assert_eq!(s, ShapeOverride { name: "INPUT0".into(), dims: vec![2, 16] });
    assert!("INPUT0".parse::<ShapeOverride>().unwrap_err().to_string().contains("NAME:d1"));
    assert!("INPUT0:2,x".parse::<ShapeOverride>().unwrap_err().to_string().contains("'x'"));
    assert!("INPUT0:-1".parse::<ShapeOverride>().is_err());
}

#[test]
fn batch_dim_is_prepended_and_shape_resolved() {
    let opts = InputOptions {
        data: vec![InputData::Zero],
        shapes: vec!["INPUT0:16".parse().unwrap()],
        batch_size: 4,
        ..Default::default()
    };
    let specs = build_requests(&meta("FP32", vec![-1, -1]), &config(8), &opts, "").unwrap();
    assert_eq!(specs.len(), 1);
    let t = inline(&specs[0]);
    assert_eq!(t.shape, vec![4, 16]);
    assert_eq!(t.data.len(), 4 * 16 * 4);
    assert_eq!(specs[0].outputs, vec![("OUTPUT0".to_string(), OutputTarget::Inline)]);
}

#[test]
fn unknown_dim_and_bad_shape_name_the_input() {
    let opts = InputOptions::default();
    let e = error(&meta("FP32", vec![-1, -1]), &config(8), &opts);
    assert!(
        e.starts_with("input INPUT0 contains dynamic shape, provide shapes to send along with the request")
            && e.contains("--shape"),
        "{e}"
    );
    let opts = InputOptions { shapes: vec!["NOPE:3".parse().unwrap()], ..Default::default() };
    let e = error(&meta("FP32", vec![-1, -1]), &config(8), &opts);
    assert!(e.contains("'NOPE'") && e.contains("INPUT0"), "{e}");
    let opts = InputOptions { shapes: vec!["INPUT0:3".parse().unwrap()], ..Default::default() };
    let e = error(&meta("FP32", vec![-1, 16]), &config(8), &opts);
    assert!(e.contains("does not fit"), "{e}");
}

#[test]
fn batch_size_limits_in_perf_analyzer_words() {
    let opts = InputOptions { batch_size: 2, shapes: vec!["INPUT0:4".parse().unwrap()], ..Default::default() };
    let e = error(&meta("FP32", vec![-1]), &config(0), &opts);
    assert!(e.starts_with("can not specify batch size > 1 as the model does not support batching"), "{e}");
    let opts = InputOptions { batch_size: 9, ..opts };
    let e = error(&meta("FP32", vec![-1, 4]), &config(8), &opts);
    assert!(e.starts_with("inference request batch-size must be <= 8 for 'm'"), "{e}");
    let opts = InputOptions { batch_size: 0, ..opts };
    let e = error(&meta("FP32", vec![-1, 4]), &config(8), &opts);
    assert_eq!(e, "Failed to parse -b (batch size). The value must be > 0.");
}

#[test]
fn random_data_is_dtype_correct_and_deterministic() {
    for dtype in ["FP16", "BYTES", "BOOL", "INT8", "FP64"] {
        let opts =
            InputOptions { shapes: vec!["INPUT0:5".parse().unwrap()], string_length: 3, seed: 7, ..Default::default() };
        let a = build_requests(&meta(dtype, vec![-1]), &config(0), &opts, "").unwrap();
        let b = build_requests(&meta(dtype, vec![-1]), &config(0), &opts, "").unwrap();
        assert_eq!(a, b);
        let t = inline(&a[0]);
        match DataType::parse(dtype).unwrap().element_size() {
            Some(size) => assert_eq!(t.data.len(), 5 * size),
            None => assert!(crate::tensor::bytes_tensor_is_valid(&t.data, 5) && t.data.len() == 5 * 7),
        }
    }
    let opts = InputOptions { shapes: vec!["INPUT0:64".parse().unwrap()], ..Default::default() };
    let specs = build_requests(&meta("FP16", vec![-1]), &config(0), &opts, "").unwrap();
    let values: Vec<f32> =
        inline(&specs[0]).data.chunks(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect();
    assert!(values.iter().all(|v| (0.0..=1.0).contains(v)) && values.iter().any(|&v| v > 0.0));
}

#[test]
fn json_file_steps_content_shape_and_b64() {
    let dir = tempfile::tempdir().unwrap();
    let raw = base64::engine::general_purpose::STANDARD
        .encode([1i32, 2].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
    let path = write(
        dir.path(),
        "data.json",
        &format!(
            r#"{{"data":[{{"INPUT0":{{"content":[1,2,3],"shape":[3]}}}},{{"INPUT0":{{"content":[[4,5],[6,7]],"shape":[4]}}}},{{"INPUT0":{{"b64":"{raw}","shape":[2]}}}}]}}"#
        ),
    );
    let opts = InputOptions { data: files(&[&path]), ..Default::default() };
    let specs = build_requests(&meta("INT32", vec![-1, -1]), &config(4), &opts, "1").unwrap();
    assert_eq!(specs.len(), 3);
    assert_eq!(inline(&specs[0]).to_i32(), vec![1, 2, 3]);
    assert_eq!(inline(&specs[0]).shape, vec![1, 3]);
    assert_eq!(inline(&specs[1]).shape, vec![1, 4]);
    assert_eq!(inline(&specs[2]).to_i32(), vec![1, 2]);
    assert_eq!(specs[2].model_version, "1");

    // As in perf_analyzer, a bare array takes the model's shape, so a variable one needs --shape.
    let m = meta("INT32", vec![-1, -1]);
    std::fs::write(&path, r#"{"data":[{"INPUT0":[1,2,3]}]}"#).unwrap();
    let e = error(&m, &config(4), &opts);
    assert!(e.starts_with("The variable-sized tensor \"INPUT0\" with model shape [-1] needs to have its shape"), "{e}");
    let shaped = InputOptions { shapes: vec!["INPUT0:3".parse().unwrap()], ..opts.clone() };
    assert_eq!(inline(&build_requests(&m, &config(4), &shaped, "").unwrap()[0]).shape, vec![1, 3]);
    std::fs::write(&path, r#"{"data":[{"INPUT0":[1.5]}]}"#).unwrap();
    let e = error(&m, &config(4), &opts);
    assert!(e.contains("INPUT0") && e.contains("not an integer"), "{e}");
    std::fs::write(&path, r#"{"data":[{"OTHER":[1]}]}"#).unwrap();
    let e = error(&m, &config(4), &opts);
    assert!(e.starts_with("The input or output 'OTHER' is not found in the model configuration"), "{e}");
    std::fs::write(&path, r#"{"data":[{}, {"INPUT0":[1]}]}"#).unwrap();
    let e = error(&m, &config(4), &opts);
    assert!(e.starts_with("missing tensor INPUT0 ( Location stream id: 0, step id: 0)"), "{e}");
    std::fs::write(&path, r#"{"data":[{"INPUT0":7}]}"#).unwrap();
    assert!(error(&m, &config(4), &opts).contains("Input data file is malformed."));
    std::fs::write(&path, "{").unwrap();
    let e = error(&m, &config(4), &opts);
    assert!(e.starts_with("failed to parse the specified json file for reading provided data"), "{e}");
    std::fs::write(&path, r#"{"nodata":[]}"#).unwrap();
    assert!(error(&m, &config(4), &opts).starts_with("The json file doesn't contain data field"));
}

#[test]
fn shapes_and_sizes_are_checked_in_perf_analyzer_words() {
    let dir = tempfile::tempdir().unwrap();
    let short = write(dir.path(), "short.json", r#"{"data":[{"INPUT0":[1,2]}]}"#);
    let opts = InputOptions { data: files(&[&short]), ..Default::default() };
    let e = error(&meta("FP32", vec![-1, 4]), &config(8), &opts);
    assert!(e.starts_with("mismatch in the data provided for INPUT0. Expected: 16 bytes, Got: 8 bytes"), "{e}");

    let bytes = write(
        dir.path(),
        "bytes.json",
        r#"{"data":[{"INPUT0":{"content":["a","b","c"],"shape":[3]}},{"INPUT0":{"content":["a","b"],"shape":[2]}}]}"#,
    );
    let opts = InputOptions { data: files(&[&bytes]), shapes: vec!["INPUT0:3".parse().unwrap()], ..Default::default() };
    let e = error(&meta("BYTES", vec![-1, -1]), &config(8), &opts);
    assert!(
        e.starts_with(
            "The supplied shape of [2] for input \"INPUT0\" is incompatible with the model's input shape of [3]"
        ),
        "{e}"
    );
    // Without --shape both steps are fine, each its own request.
    let opts = InputOptions { shapes: vec![], ..opts };
    assert_eq!(build_requests(&meta("BYTES", vec![-1, -1]), &config(8), &opts, "").unwrap().len(), 2);

    let missing = dir.path().join("no_such.json");
    let opts = InputOptions { data: files(&[&missing]), ..Default::default() };
    let e = error(&meta("FP32", vec![-1, 4]), &config(8), &opts);
    assert_eq!(
        e,
        format!(
            "Failed to parse --input-data. Unsupported type provided: '{}'. The available options are 'zero', \
             'random', path to a directory, or a json file.",
            missing.display()
        )
    );
}

#[test]
fn several_files_and_streams_are_consecutive_steps() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.json", r#"{"data":[{"INPUT0":[1,1]},{"INPUT0":[2,2]}]}"#);
    let b = write(dir.path(), "b.json", r#"{"data":[{"INPUT0":[3,3]}]}"#);
    let streams = write(dir.path(), "s.json", r#"{"data":[[{"INPUT0":[4,4]},{"INPUT0":[5,5]}],[{"INPUT0":[6,6]}]]}"#);
    let m = meta("INT32", vec![-1, 2]);
    let values = |opts: &InputOptions| -> Vec<Vec<i32>> {
        build_requests(&m, &config(8), opts, "").unwrap().iter().map(|s| inline(s).to_i32()).collect()
    };
    let opts = InputOptions { data: files(&[&a, &b]), ..Default::default() };
    assert_eq!(values(&opts), vec![vec![1, 1], vec![2, 2], vec![3, 3]]);
    let opts = InputOptions { data: files(&[&streams]), ..Default::default() };
    assert_eq!(values(&opts), vec![vec![4, 4], vec![5, 5], vec![6, 6]]);
    // A file of steps and a file of streams cannot be mixed (perf_analyzer's rule).
    let opts = InputOptions { data: files(&[&a, &streams]), ..Default::default() };
    assert!(error(&m, &config(8), &opts).starts_with("Inconsistency in input-data provided."));
    // -b 2 over three steps: [1,2] [3,1] [2,3], perf_analyzer's order.
    let opts = InputOptions { data: files(&[&a, &b]), batch_size: 2, ..Default::default() };
    assert_eq!(values(&opts), vec![vec![1, 1, 2, 2], vec![3, 3, 1, 1], vec![2, 2, 3, 3]]);
    // -b 2 over four steps: two requests.
    let opts = InputOptions { data: files(&[&a, &a]), batch_size: 2, ..Default::default() };
    assert_eq!(values(&opts), vec![vec![1, 1, 2, 2], vec![1, 1, 2, 2]]);
    let opts = InputOptions { data: files(&[&a, &b, &b]), batch_size: 2, ..Default::default() };
    assert_eq!(values(&opts), vec![vec![1, 1, 2, 2], vec![3, 3, 3, 3]]);
}

#[test]
fn batches_need_one_shape_and_one_set_of_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let shaped = write(
        dir.path(),
        "shaped.json",
        r#"{"data":[{"INPUT0":{"content":[1,2,3,4],"shape":[4]}},{"INPUT0":{"content":[1,2],"shape":[2]}}]}"#,
    );
    let opts = InputOptions { data: files(&[&shaped]), batch_size: 2, ..Default::default() };
    let e = error(&meta("INT32", vec![-1, -1]), &config(8), &opts);
    assert!(
        e.starts_with(
            "can not batch tensors with different shapes together (input 'INPUT0' expected shape [4] and received [2]"
        ),
        "{e}"
    );

    let mut two = meta("FP32", vec![-1, 2]);
    two.inputs.push(TensorMetadata { name: "INPUT1".into(), datatype: "FP32".into(), shape: vec![-1, 2] });
    let mut cfg = config(8);
    cfg.input.push(ModelInput { name: "INPUT1".into(), optional: true, ..Default::default() });
    let mixed = write(dir.path(), "mixed.json", r#"{"data":[{"INPUT0":[1,2],"INPUT1":[3,4]},{"INPUT0":[5,6]}]}"#);
    let opts = InputOptions { data: files(&[&mixed]), ..Default::default() };
    let specs = build_requests(&two, &cfg, &opts, "").unwrap();
    assert_eq!((specs[0].inputs.len(), specs[1].inputs.len()), (2, 1));
    let opts = InputOptions { batch_size: 2, ..opts };
    let e = error(&two, &cfg, &opts);
    assert!(
        e.starts_with(
            "For batch sizes larger than 1, the same set of inputs must be specified for each batch. You cannot \
             use different set of optional inputs for each individual batch."
        ),
        "{e}"
    );
}

#[test]
fn a_directory_holds_one_raw_file_per_input() {
    let dir = tempfile::tempdir().unwrap();
    let values: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.path().join("INPUT0"), &values).unwrap();
    let opts = InputOptions {
        data: files(&[dir.path()]),
        shapes: vec!["INPUT0:4".parse().unwrap()],
        batch_size: 2,
        ..Default::default()
    };
    let specs = build_requests(&meta("FP32", vec![-1, -1]), &config(8), &opts, "").unwrap();
    assert_eq!(specs.len(), 1);
    assert_eq!(inline(&specs[0]).shape, vec![2, 4]);
    assert_eq!(inline(&specs[0]).data.len(), 32);
    let opts = InputOptions { shapes: vec!["INPUT0:3".parse().unwrap()], batch_size: 1, ..opts };
    let e = error(&meta("FP32", vec![-1, -1]), &config(8), &opts);
    assert!(e.starts_with("provided data for input INPUT0 has byte size 16, expect 12"), "{e}");
    let opts = InputOptions { shapes: vec![], ..opts };
    let e = error(&meta("FP32", vec![-1, -1]), &config(8), &opts);
    assert!(e.starts_with("input INPUT0 contains dynamic shape"), "{e}");

    let text = tempfile::tempdir().unwrap();
    std::fs::write(text.path().join("INPUT0"), "first line\nsecond\nthird\n").unwrap();
    let opts =
        InputOptions { data: files(&[text.path()]), shapes: vec!["INPUT0:3".parse().unwrap()], ..Default::default() };
    let specs = build_requests(&meta("BYTES", vec![-1]), &config(0), &opts, "").unwrap();
    let t = inline(&specs[0]);
    assert_eq!(t.shape, vec![3]);
    assert_eq!(&t.data[..14], b"\x0a\0\0\0first line");
    std::fs::write(text.path().join("NOPE"), "x").unwrap();
    let e = error(&meta("BYTES", vec![-1]), &config(0), &opts);
    assert!(e.starts_with("Provided data file 'NOPE' does not correspond to a valid model input or output."), "{e}");
}

fn add_sub() -> (ModelMetadataResponse, ModelConfig) {
    let t = |n: &str| TensorMetadata { name: n.into(), datatype: "INT32".into(), shape: vec![-1, 2] };
    let meta = ModelMetadataResponse {
        name: "add_sub".into(),
        inputs: vec![t("INPUT0")],
        outputs: vec![t("OUTPUT0"), t("OUTPUT1")],
        ..Default::default()
    };
    (meta, config(8))
}

fn answer(out0: &[i32], out1: &[i32]) -> InferResult {
    let t = |v: &[i32]| Tensor {
        dtype: DataType::Int32,
        shape: vec![1, v.len() as i64],
        data: v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
    };
    InferResult { outputs: vec![("OUTPUT0".into(), t(out0)), ("OUTPUT1".into(), t(out1))], ..Default::default() }
}

#[test]
fn validation_data_is_read_checked_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let (m, cfg) = add_sub();
    let good = write(
        dir.path(),
        "good.json",
        r#"{"data":[{"INPUT0":[1,2]},{"INPUT0":[3,4]}],
            "validation_data":[{"OUTPUT0":[1,2],"OUTPUT1":[0,0]},{"OUTPUT0":[3,4],"OUTPUT1":[0,0]}]}"#,
    );
    let opts = InputOptions { data: files(&[&good]), ..Default::default() };
    let set = build_request_set(&m, &cfg, &opts, "").unwrap();
    let expected = set.expected.unwrap();
    assert_eq!(expected.len(), 2);
    assert_eq!(expected[0].check(&answer(&[1, 2], &[0, 0])), Ok(()));
    let e = expected[1].check(&answer(&[1, 2], &[0, 0])).unwrap_err();
    assert!(e.starts_with("Output doesn't match expected output"), "{e}");
    let e = expected[1].check(&answer(&[3, 4, 5], &[0, 0])).unwrap_err();
    assert!(e.starts_with("Output size doesn't match expected size"), "{e}");
    let e = expected[1].check(&InferResult::default()).unwrap_err();
    assert!(e.starts_with("Output size doesn't match expected size"), "{e}");
    // perf_analyzer 2.50 compares each batch item with the start of the output, so a
    // batched, validated run fails: on the values, or on the size when the items agree.
    let opts = InputOptions { batch_size: 2, ..opts };
    let expected = build_request_set(&m, &cfg, &opts, "").unwrap().expected.unwrap();
    assert_eq!(expected.len(), 1);
    let e = expected[0].check(&answer(&[1, 2, 3, 4], &[0, 0, 0, 0])).unwrap_err();
    assert!(e.starts_with("Output doesn't match expected output"), "{e}");
    let one = write(
        dir.path(),
        "one.json",
        r#"{"data":[{"INPUT0":[1,2]}],"validation_data":[{"OUTPUT0":[1,2],"OUTPUT1":[0,0]}]}"#,
    );
    let opts = InputOptions { data: files(&[&one]), batch_size: 2, ..Default::default() };
    let expected = build_request_set(&m, &cfg, &opts, "").unwrap().expected.unwrap();
    let e = expected[0].check(&answer(&[1, 2, 1, 2], &[0, 0, 0, 0])).unwrap_err();
    assert!(e.starts_with("Output size doesn't match expected size"), "{e}");
    // No validation data: nothing to check.
    let plain = write(dir.path(), "plain.json", r#"{"data":[{"INPUT0":[1,2]}]}"#);
    let opts = InputOptions { data: files(&[&plain]), ..Default::default() };
    assert_eq!(build_request_set(&m, &cfg, &opts, "").unwrap().expected, None);

    for (text, start) in [
        (
            r#"{"data":[{"INPUT0":[1,2]},{"INPUT0":[3,4]}],"validation_data":[{"OUTPUT0":[1,2],"OUTPUT1":[0,0]}]}"#,
            "The 'validation_data' field doesn't align with 'data' field in the json file",
        ),
        (
            r#"{"data":[{"INPUT0":[1,2]}],"validation_data":[{"OUTPUT0":[1],"OUTPUT1":[0,0]}]}"#,
            "mismatch in the data provided for OUTPUT0. Expected: 8 bytes, Got: 4 bytes",
        ),
        (
            r#"{"data":[[{"INPUT0":[1,2]}]],"validation_data":[[]]}"#,
            "The 'validation_data' field doesn't align with 'data' field in the json file",
        ),
        (r#"{"data":[{"INPUT0":[1,2]}],"validation_data":[{"OUTPUT0":[1,2]}]}"#, "missing tensor OUTPUT1"),
    ] {
        let path = write(dir.path(), "bad.json", text);
        let opts = InputOptions { data: files(&[&path]), ..Default::default() };
        let e = error(&m, &cfg, &opts);
        assert!(e.starts_with(start), "{text}: {e}");
    }

    // An output of variable size cannot be validated (its size comes from the model).
    let path = write(
        dir.path(),
        "var.json",
        r#"{"data":[{"INPUT0":{"content":[1,2],"shape":[2]}}],"validation_data":[{"OUTPUT0":{"content":[1,2],"shape":[2]}}]}"#,
    );
    let opts = InputOptions { data: files(&[&path]), ..Default::default() };
    let e = error(&meta("INT32", vec![-1, -1]), &config(8), &opts);
    assert!(
        e.starts_with(
            "The variable-sized tensor \"OUTPUT0\" with model shape [-1] needs to have its shape fully defined. \
             See the --shape option."
        ),
        "{e}"
    );
}

#[test]
fn input_data_lists_round_trip_as_one_string_or_a_list() {
    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    struct Holder {
        #[serde(with = "one_or_many")]
        data: Vec<InputData>,
    }
    let one: Holder = toml::from_str(r#"data = "zero""#).unwrap();
    assert_eq!(one.data, vec![InputData::Zero]);
    assert_eq!(toml::to_string(&one).unwrap().trim(), r#"data = "zero""#);
    let two: Holder = toml::from_str(r#"data = ["a.json", "dir"]"#).unwrap();
    assert_eq!(two.data, files(&[Path::new("a.json"), Path::new("dir")]));
    assert_eq!(toml::from_str::<Holder>(&toml::to_string(&two).unwrap()).unwrap(), two);
}

#[test]
fn json_bytes_and_fp16_values() {
    let (data, n) = encode_json_values(DataType::Bytes, &serde_json::json!(["ab", ""])).unwrap();
    assert_eq!(n, 2);
    assert_eq!(data, vec![2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
    let (data, _) = encode_json_values(DataType::Fp16, &serde_json::json!([1.0])).unwrap();
    assert_eq!(data, half::f16::from_f32(1.0).to_le_bytes());
    assert!(encode_json_values(DataType::Uint8, &serde_json::json!([300])).is_err());
}
