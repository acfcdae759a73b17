use super::*;

#[test]
fn defaults_are_aiperfs() {
    let s = GenerativeSettings { endpoint_type: Some(EndpointType::Chat), ..Default::default() };
    let g = resolve(&s, None, None).unwrap().unwrap();
    assert_eq!(g.input_tokens, TokenLength { mean: 550.0, stddev: 0.0 });
    assert_eq!(g.request_count, Some(10));
    assert_eq!(g.block_size, 512);
    assert_eq!(g.tokenizer, crate::tokenize::DEFAULT_TOKENIZER);
    let timed = GenerativeSettings { benchmark_duration: Some(5.0), ..s.clone() };
    assert_eq!(resolve(&timed, None, None).unwrap().unwrap().request_count, None);
    assert_eq!(resolve(&GenerativeSettings::default(), Some(3), None).unwrap(), None, "a tensor sweep");
}

#[test]
fn bad_settings_get_one_line_reasons() {
    let chat = GenerativeSettings { endpoint_type: Some(EndpointType::Chat), ..Default::default() };
    for (settings, needle) in [
        (GenerativeSettings { goodput: Some("nope:1".into()), ..chat.clone() }, "unknown metric"),
        (GenerativeSettings { extra_inputs: Some(vec!["novalue".into()]), ..chat.clone() }, "key:value"),
        (GenerativeSettings { output_tokens_mean: Some(0.0), ..chat.clone() }, "--output-tokens-mean"),
        (GenerativeSettings { benchmark_duration: Some(-1.0), ..chat.clone() }, "--benchmark-duration"),
        (GenerativeSettings { output_tokens_mean: Some(8.0), ..Default::default() }, "need --endpoint-type"),
        (
            GenerativeSettings {
                endpoint_type: Some(EndpointType::Kserve),
                endpoint: Some("v1/x".into()),
                ..Default::default()
            },
            "gRPC",
        ),
    ] {
        let err = resolve(&settings, None, None).unwrap_err().to_string();
        assert!(err.contains(needle), "{settings:?}: {err}");
    }
    assert!(resolve(&chat, Some(0), None).unwrap_err().to_string().contains("--request-count"));
}

#[test]
fn trace_flags_need_a_file_and_agree_with_each_other() {
    let file = GenerativeSettings {
        endpoint_type: Some(EndpointType::Chat),
        input_file: Some("t.jsonl".into()),
        ..Default::default()
    };
    let timed = GenerativeSettings {
        custom_dataset_type: Some(DatasetType::MultiTurn),
        fixed_schedule: Some(true),
        replay_speedup: Some(4.0),
        ..file.clone()
    };
    let g = resolve(&timed, None, None).unwrap().unwrap();
    assert_eq!(g.dataset_type, Some(DatasetType::MultiTurn));
    assert_eq!(g.trace_timing, TraceTiming { fixed_schedule: true, speedup: 4.0, ignore_delays: false });
    let plan: Generative = toml::from_str(&toml::to_string(&g).unwrap()).unwrap();
    assert_eq!(plan, g, "the plan file keeps them");
    assert_eq!(resolve(&file, None, None).unwrap().unwrap().trace_timing, TraceTiming::default());
    let chat = GenerativeSettings { input_file: None, ..file.clone() };
    for (settings, needle) in [
        (GenerativeSettings { fixed_schedule: Some(true), ..chat.clone() }, "--fixed-schedule needs an --input-file"),
        (GenerativeSettings { replay_speedup: Some(2.0), ..chat }, "--replay-speedup needs"),
        (GenerativeSettings { replay_speedup: Some(0.0), ..file.clone() }, "positive"),
        (GenerativeSettings { ignore_trace_delays: Some(true), ..timed.clone() }, "drops them"),
        (
            GenerativeSettings { custom_dataset_type: Some(DatasetType::DagJsonl), ..timed.clone() },
            "no --fixed-schedule",
        ),
        (
            GenerativeSettings {
                custom_dataset_type: Some(DatasetType::DagJsonl),
                endpoint_type: Some(EndpointType::Completions),
                ..file.clone()
            },
            "--endpoint-type chat",
        ),
    ] {
        let err = resolve(&settings, None, None).unwrap_err().to_string();
        assert!(err.contains(needle), "{settings:?}: {err}");
    }
    use clap::ValueEnum;
    assert_eq!(DatasetType::from_str("dag-jsonl", false), Ok(DatasetType::DagJsonl), "the issue's spelling");
    assert_eq!(DatasetType::from_str("dag_jsonl", false), Ok(DatasetType::DagJsonl), "AIPerf's");
}

#[test]
fn rankings_take_aiperfs_flags_and_defaults_and_only_for_rankings() {
    let rankings = GenerativeSettings { endpoint_type: Some(EndpointType::CohereRankings), ..Default::default() };
    let fixed = |mean| TokenLength { mean, stddev: 0.0 };
    let g = resolve(&rankings, None, None).unwrap().unwrap();
    let expected = Rankings { passages: fixed(10.0), passage_tokens: fixed(128.0), query_tokens: fixed(32.0) };
    assert_eq!(g.rankings, Some(expected));
    let sized = GenerativeSettings {
        rankings_passages_mean: Some(3.0),
        rankings_passages_stddev: Some(1.0),
        rankings_query_prompt_token_mean: Some(16.0),
        ..rankings.clone()
    };
    let r = resolve(&sized, None, None).unwrap().unwrap().rankings.unwrap();
    assert_eq!((r.passages, r.query_tokens), (TokenLength { mean: 3.0, stddev: 1.0 }, fixed(16.0)));
    let chat = GenerativeSettings { endpoint_type: Some(EndpointType::Chat), ..Default::default() };
    assert_eq!(resolve(&chat, None, None).unwrap().unwrap().rankings, None);
    for (settings, needle) in [
        (GenerativeSettings { rankings_passages_mean: Some(2.0), ..chat }, "need --endpoint-type cohere-rankings"),
        (
            GenerativeSettings { synthetic_input_tokens_mean: Some(9.0), ..rankings.clone() },
            "not --synthetic-input-tokens",
        ),
        (GenerativeSettings { rankings_passages_mean: Some(0.0), ..rankings }, "at least 1"),
    ] {
        let err = resolve(&settings, None, None).unwrap_err().to_string();
        assert!(err.contains(needle), "{settings:?}: {err}");
    }
}

#[test]
fn the_new_endpoint_types_have_aiperfs_names_on_the_command_line_and_in_a_plan() {
    use clap::ValueEnum;
    for (name, endpoint) in [
        ("messages", EndpointType::Messages),
        ("responses", EndpointType::Responses),
        ("cohere-rankings", EndpointType::CohereRankings),
    ] {
        assert_eq!(EndpointType::from_str(name, false), Ok(endpoint));
        assert_eq!(endpoint.name(), name);
        assert_eq!(serde_json::to_value(endpoint).unwrap(), serde_json::json!(name));
    }
}
