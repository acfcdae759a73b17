//! `perfbench profile`: perf_analyzer's command line. Its flags are the sections of
//! [`Settings`](crate::plan::settings::Settings) (shared with `offline` and `online`) plus
//! perf_analyzer's quirk flags ([`PaCompat`]), resolved into a one-sweep [`Plan`]; defaults not
//! given on the command line come from the one defaults table ([`crate::plan::defaults`]), which
//! follows perf_analyzer for `profile`.

use clap::Args;

use super::common::{target, CommonArgs, SweepSections};
use super::pa_compat::PaCompat;
use crate::plan::settings::resolve;
use crate::plan::validate::check_model_given;
use crate::plan::{Model, Plan, PlanError, SweepKind};

/// `perfbench profile`: a drop-in for `perf_analyzer` (same flag names). With no `-u`, the
/// bundled server is started in this process on ephemeral loopback ports and profiled over the
/// chosen protocol.
#[derive(Args, Debug, Clone)]
pub struct ProfileArgs {
    /// Model to profile (required; checked when the plan resolves, in perf_analyzer's words).
    #[arg(short = 'm', long = "model-name")]
    pub model: Option<String>,
    /// Model version (empty: the latest).
    #[arg(short = 'x', long = "model-version", default_value = "")]
    pub model_version: String,
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub sections: SweepSections,
    #[command(flatten)]
    pub pa: PaCompat,
}

impl ProfileArgs {
    /// Resolves the flags into a one-sweep plan. No file is created and no socket opened,
    /// except reading the `--request-intervals` trace.
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let model = check_model_given(self.model.as_deref())?.to_string();
        let mut settings = self.common.settings(&self.sections.load, &self.sections.output);
        self.pa.apply(&mut settings, self.common.model_repository.is_some())?;
        let target = target(&self.common.url, &self.pa.service_kind, &self.common.model_repository)?;
        let mut sweep = resolve(SweepKind::Profile, &settings, &target)?;
        self.pa.finish(&mut sweep, &model)?;
        let plan = Plan {
            shard: None,
            resume: false,
            target,
            model: Model { name: model, version: self.model_version.clone(), config: None },
            sweeps: vec![sweep],
            gate: None,
        };
        plan.validate()?;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::shm::SharedMemoryKind;
    use crate::plan::Target;
    use crate::plan::{Distribution, Levels, Load, ModelRef, Periodic, Protocol, WindowKind};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ProfileArgs,
    }

    /// The plan of a command line; a value refused as the flags are parsed is an error too, in
    /// the one line `main` prints.
    fn resolve(line: &str) -> Result<Plan, PlanError> {
        let argv = std::iter::once("profile").chain(line.split_whitespace());
        match Cli::try_parse_from(argv) {
            Ok(cli) => cli.args.plan(),
            Err(e) => Err(PlanError::Invalid(crate::cli::usage_error(&e))),
        }
    }

    #[test]
    fn defaults_follow_perf_analyzer() {
        let plan = resolve("-m identity").unwrap();
        assert_eq!(plan.target, Target::Embedded { model_repository: None });
        let s = &plan.sweeps[0];
        assert_eq!(s.protocol, Protocol::Http);
        assert_eq!(s.load, Load::Concurrency { levels: Levels::one(1) });
        assert_eq!((s.measurement.mode, s.measurement.interval_ms), (WindowKind::TimeWindows, 5000));
        assert_eq!((s.measurement.stability_percentage, s.measurement.max_trials), (10.0, 10));
        assert_eq!(s.measurement.total_requests, None);
        assert_eq!(s.measurement.warmup_requests, 0);
        assert_eq!(s.input.shared_memory, SharedMemoryKind::None);
    }

    #[test]
    fn sequence_flags_resolve_with_perf_analyzers_defaults() {
        let s = resolve("-m m").unwrap().sweeps[0].sequences.clone();
        assert_eq!((s.length, s.length_given, s.length_variation_pct), (20, false, 20.0));
        assert_eq!((s.id_start, s.id_end, s.count, s.serial), (1, None, 4, false));
        assert_eq!(s.id_range(), u32::MAX as u64);
        let plan = resolve("-m m --sequence-length 5 --sequence-id-range 7:15 --num-of-sequences 2 --serial-sequences --request-rate-range 10 --validate-outputs").unwrap();
        let s = &plan.sweeps[0].sequences;
        assert_eq!(
            (s.length, s.length_given, s.id_start, s.id_end, s.count, s.serial),
            (5, true, 7, Some(15), 2, true)
        );
        assert!(plan.sweeps[0].validate_outputs);
        // Sequence id 0 means "no sequence": perf_analyzer starts at 1 instead.
        assert_eq!(resolve("-m m --sequence-id-range 0").unwrap().sweeps[0].sequences.id_start, 1);
    }

    #[test]
    fn client_threads_follow_concurrency_cores_and_max_threads() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let threads = |line: &str| {
            let plan = resolve(line).unwrap();
            crate::run::worker_threads(&plan.sweeps[0], &plan.target)
        };
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1:16"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64"), cores.min(4));
        assert_eq!(threads("-m m -u h:1 --concurrency-range 64 --max-threads 1"), 1);
        assert_eq!(threads("-m m -u h:1 --concurrency-range 1 --max-threads 64"), cores);
        // The bundled server runs on the same runtime: it keeps every core.
        assert_eq!(threads("-m m --concurrency-range 1"), cores);
        assert_eq!(threads("-m m --concurrency-range 1 --max-threads 1"), 1);
    }

    #[test]
    fn periodic_concurrency_resolves_with_perf_analyzers_default_period() {
        let line = "-m repeat -i grpc --streaming --periodic-concurrency-range 2:6:2 --profile-export-file x.json";
        let plan = resolve(line).unwrap();
        let want = Periodic { start: 2, end: 6, step: 2, request_period: 10 };
        assert_eq!(plan.sweeps[0].load, Load::Periodic(want));
        let plan = resolve(&format!("{line} --request-period 3")).unwrap();
        assert_eq!(plan.sweeps[0].load, Load::Periodic(Periodic { request_period: 3, ..want }));
        // A range without a step grows by one.
        let plan =
            resolve("-m r -i grpc --streaming --periodic-concurrency-range 1:3 --profile-export-file x").unwrap();
        assert_eq!(plan.sweeps[0].load, Load::Periodic(Periodic { start: 1, end: 3, step: 1, request_period: 10 }));
        assert!(plan.sweeps[0].output.no_closing_report);
    }

    #[test]
    fn deprecated_t_overrides_the_periodic_range_as_in_perf_analyzer() {
        let line = "-m r -i grpc --streaming --periodic-concurrency-range 1:4 --profile-export-file x -f p.csv -t 3";
        let sweep = &resolve(line).unwrap().sweeps[0];
        assert_eq!(sweep.load, Load::Concurrency { levels: Levels::parse_colon("3:1").unwrap() });
        // perf_analyzer still writes no closing list or CSV for such a line.
        assert!(sweep.output.no_closing_report);
        assert!(!resolve("-m r --concurrency-range 2 -f p.csv").unwrap().sweeps[0].output.no_closing_report);
    }

    #[test]
    fn ranges_modes_and_services_resolve() {
        let plan = resolve("-m m -u localhost:8001 -i grpc --concurrency-range 2:8:2 --measurement-mode count_windows --measurement-request-count 30 -l 5 --percentile 95").unwrap();
        assert_eq!(plan.target, Target::Remote { url: "localhost:8001".into() });
        let s = &plan.sweeps[0];
        assert_eq!(s.load, Load::Concurrency { levels: "2:8:2".parse().unwrap() });
        assert_eq!((s.measurement.mode, s.measurement.request_count), (WindowKind::CountWindows, 30));
        assert_eq!(s.latency_limit_ms, Some(5.0));
        assert_eq!(s.measurement.percentile, Some(95.0));
        let plan =
            resolve("-m m --request-rate-range 100:200:50 --request-distribution poisson --service-kind inprocess")
                .unwrap();
        assert_eq!(
            plan.sweeps[0].load,
            Load::RequestRate { start: 100.0, end: 200.0, step: 50.0, distribution: Distribution::Poisson, seed: 1 }
        );
        assert_eq!(plan.target, Target::InProcess { model_repository: None });
    }

    #[test]
    fn deprecated_t_c_d_resolve_as_perf_analyzer_2_50_reads_them() {
        let levels = |line: &str| match resolve(line).map(|p| p.sweeps[0].load.clone()) {
            Ok(Load::Concurrency { levels }) => Ok(levels.to_string()),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.to_string()),
        };
        let range = |text: &str| Ok(Levels::parse_colon(text).unwrap().to_string());
        assert_eq!(levels("-m m -t 3"), range("3"));
        // -c is -d's end: alone it changes nothing.
        assert_eq!(levels("-m m -c 3"), range("1"));
        assert_eq!(levels("-m m -t 2 -c 4"), range("2"));
        assert_eq!(levels("-m m -d -c3"), range("1:3"));
        assert_eq!(levels("-m m -d -t 2 -c 4"), range("2:4"));
        // A start above the end is measured alone, as perf_analyzer's do-while does.
        assert_eq!(levels("-m m -d -t 4 -c 2"), range("4"));
        // No end: up to the latency limit, which it then needs.
        assert_eq!(levels("-m m -d -l 5"), range("1:0"));
        assert_eq!(levels("-m m -d -c x -l 5"), range("1:0"));
        let e = levels("-m m -d").unwrap_err();
        assert!(e.starts_with("The end of the search range and the latency limit can not be both 0"), "{e}");
        for (line, want) in [
            ("-m m -t 2 --concurrency-range 4", "Cannot use deprecated options with --concurrency-range."),
            ("-m m --request-rate-range 5 -d", "Cannot use concurrency options with --request-rate-range."),
            ("-m m -c 2 --request-intervals f", "Cannot use deprecated options with --request-intervals."),
        ] {
            assert_eq!(levels(line).unwrap_err(), want, "{line}");
        }
    }

    #[test]
    fn bls_composing_models_are_read_as_perf_analyzer_reads_them() {
        let refs = |line: &str| resolve(line).map(|p| p.sweeps[0].bls_composing_models.clone());
        let r = |name: &str, version: &str| ModelRef { name: name.into(), version: version.into() };
        assert_eq!(refs("-m bls").unwrap(), []);
        assert_eq!(refs("-m bls --bls-composing-models a:3,b").unwrap(), [r("a", "3"), r("b", "")]);
        // Spaces are dropped wherever they are.
        let plan = Cli::try_parse_from(["profile", "-m", "bls", "--bls-composing-models", " a , b:1"]).unwrap();
        assert_eq!(plan.args.plan().unwrap().sweeps[0].bls_composing_models, [r("a", ""), r("b", "1")]);
        let e = refs("-m bls --bls-composing-models=a,").unwrap_err().to_string();
        assert!(e.contains("Not Found (a name is empty)"), "{e}");
        let e = refs("-m bls --bls-composing-models a,bls:1").unwrap_err().to_string();
        assert!(e.contains("'bls' is the model under test"), "{e}");
    }

    #[test]
    fn unsupported_flags_are_named() {
        let e = resolve("-m m --max-threads 0").unwrap_err();
        assert_eq!(e, PlanError::Invalid("--max-threads must be at least 1".into()));
        let e = resolve("-m m -i grpc --ssl-grpc-use-ssl").unwrap_err().to_string();
        assert!(e.contains("needs -u"), "{e}");
        let plan = resolve("-m m -u h:1 -i grpc --ssl-grpc-use-ssl --grpc-compression-algorithm gzip").unwrap();
        assert!(plan.sweeps[0].call.tls.grpc.use_ssl);
        let e = resolve("-m m -u h:1 --ssl-https-private-key-file k.pem").unwrap_err().to_string();
        assert!(e.contains("go together"), "{e}");
        // A line that passes perf_analyzer's checks of another service kind is not supported.
        for line in [
            "-m m --service-kind openai --input-data d.json --endpoint v1/chat/completions -a",
            "-m m --service-kind tfserving -i grpc -u h:1",
            "-m m --service-kind triton_c_api --triton-server-directory /opt/tritonserver --model-repository r",
        ] {
            let kind = line.split_whitespace().nth(3).unwrap();
            assert_eq!(resolve(line).unwrap_err().to_string(), format!("not supported: --service-kind {kind}"));
        }
        assert!(resolve("-m m --streaming")
            .unwrap_err()
            .to_string()
            .starts_with("Streaming is only allowed with gRPC"));
        assert!(resolve("-m m -i grpc --streaming").unwrap().sweeps[0].call.streaming);
    }

    #[test]
    fn request_parameters_resolve_typed_and_a_later_name_wins() {
        use crate::client::{ParameterValue, RequestParameter};
        let plan = resolve("-m m -i grpc --request-parameter n:1:int --request-parameter b:false:Bool --request-parameter s:hi:string --request-parameter n:-3:INT").unwrap();
        let p = |name: &str, value| RequestParameter { name: name.into(), value };
        assert_eq!(
            plan.sweeps[0].call.request_parameters,
            vec![
                p("b", ParameterValue::Bool(false)),
                p("s", ParameterValue::String("hi".into())),
                p("n", ParameterValue::Int(-3))
            ]
        );
    }

    #[test]
    fn flags_perf_analyzer_ignores_for_triton_are_accepted() {
        let plan = resolve("-m m --model-signature-name serving_default --endpoint v1/x --percentile -1").unwrap();
        assert_eq!(plan.sweeps[0].measurement.percentile, None);
    }

    #[test]
    fn a_descending_range_measures_its_start_as_perf_analyzer_does() {
        let plan = resolve("-m m --concurrency-range 4:2").unwrap();
        let Load::Concurrency { levels } = &plan.sweeps[0].load else { panic!("{:?}", plan.sweeps[0].load) };
        assert_eq!(levels.values(0), vec![4]);
        let plan = resolve("-m m --request-rate-range 100:50:10").unwrap();
        let Load::RequestRate { start, end, .. } = plan.sweeps[0].load else { panic!("{:?}", plan.sweeps[0].load) };
        assert_eq!((start, end), (100.0, 100.0));
    }

    #[test]
    fn bad_values_are_one_line_errors() {
        for (line, needle) in [
            ("-m m --concurrency-range 0:4", "The start of the search range must be > 0"),
            ("-m m --concurrency-range a:2", "Failed to parse --concurrency-range. Invalid value provided: a:2"),
            ("-m m --concurrency-range 1:2:3:4", "The value does not match <start:end:step>."),
            ("-m m -b -1", "Failed to parse -b (batch size). The value must be > 0."),
            ("-m m -z --input-data d.json", "The -z flag cannot be set when --data-directory is provided."),
            ("-m m --input-data zero --data-directory d", "The -z flag cannot be set when --data-directory"),
            ("-m m --request-count 10 --concurrency-range 1:2", "not supported with multiple concurrency values"),
            ("-m m --request-count 1 --concurrency-range 2", "request-count can not be less than concurrency"),
            ("-m m --request-count 5 --request-rate-range 10", "request-count can not be less than request-rate"),
            ("-m m --binary-search --concurrency-range 4:1 -l 5", "can not be less than start of the range"),
            ("-m m -i grpc --streaming --sync", "can not use streaming with synchronous API"),
            ("-m m --metrics-interval 100", "Must specify --collect-metrics when using the --metrics-interval"),
            ("-m m --metrics-url h:1", "Must specify --collect-metrics when using the --metrics-url option."),
            ("-m m --service-kind tfserving", "perf_analyzer supports only grpc protocol for TensorFlow Serving."),
            ("-m m --service-kind tfserving -i grpc -a", "does not support async API for TensorFlow Serving."),
            ("-m m --service-kind torchserve", "--input-data should be provided with a json file"),
            ("-m m --service-kind triton_c_api", "--model-repository should not be empty"),
            ("-m m --service-kind openai --input-data d.json", "Must supply --endpoint for OpenAI service kind."),
            // Streaming over HTTP comes first, before the kind's own checks (no -a here).
            (
                "-m m --service-kind openai --streaming",
                "Streaming is only allowed with gRPC protocol and Triton C API.",
            ),
            (
                "-m m --service-kind openai --input-data d.json --endpoint e -a --periodic-concurrency-range 1:2",
                "The --periodic-concurrency-range option requires bi-directional gRPC streaming.",
            ),
            (
                "-m m --service-kind openai -u h:1 -i grpc --streaming --periodic-concurrency-range 1:2",
                "Must provide --profile-export-file when using the --periodic-concurrency-range option.",
            ),
            (
                "-m m --service-kind openai --request-intervals no_such_file",
                "Failed to parse --request-intervals. The value must be a valid file path",
            ),
            ("-m m --service-kind bogus", "Failed to parse --service-kind. Unsupported type provided: 'bogus'."),
            ("-m m --concurrency-range 4:0", "needs -l"),
            ("-m m -i udp", "Failed to parse -i (protocol)"),
            ("-m m --measurement-mode both", "Failed to parse --measurement-mode"),
            ("-m m --concurrency-range 1:2 --request-rate-range 5", "Cannot specify more then one inference load mode"),
            ("-m m --shape INPUT0:x", "--shape"),
            ("-m m --percentile 100", "Failed to parse --percentile"),
            ("-m m -r 0", "Failed to parse --max-trials (-r)"),
            ("-m m -p 0", "Failed to parse --measurement-interval (-p)"),
            (
                "-m m --measurement-mode count_windows --measurement-request-count 0",
                "Failed to parse --measurement-request-count",
            ),
            ("-m m --request-rate-range 0", "Failed to parse --request-rate-range"),
            ("-m m --request-rate-range 10 --request-distribution uniform", "Failed to parse --request-distribution"),
            (
                "-m m --binary-search --concurrency-range 1:8",
                "The --latency-threshold cannot be 0 for binary search mode",
            ),
            ("-m m --service-kind inprocess -u h:1", "-u"),
            ("-m m --shared-memory gpu", "--shared-memory"),
            ("-m m -b 0", "Failed to parse -b (batch size)"),
            ("-m m --sync --async", "Cannot specify --async and --sync simultaneously"),
            (
                "-m m --grpc-compression-algorithm gzip",
                "Using compression algorithm is only allowed with gRPC protocol",
            ),
            ("-m m --shape INPUT0:-3", "Failed to parse --shape. The dimensions of input tensor must be > 0"),
            ("-m m --sequence-length 0", "Failed to parse --sequence-length"),
            ("-m m --sequence-length-variation=-1", "Failed to parse --sequence-length-variation"),
            ("-m m --sequence-id-range 5:2", "Failed to parse --sequence-id-range"),
            ("-m m --sequence-id-range 1:2:3", "Failed to parse --sequence-id-range"),
            ("-m m --sequence-id-range 1:3 -t 4", "sequence id collision"),
            ("-m m --num-of-sequences 0", "Failed to parse --num-of-sequences"),
            ("-m m --periodic-concurrency-range 1", "Both <start> and <end> values must be provided."),
            ("-m m --periodic-concurrency-range 1:2:3:4", "The value does not match <start:end:step>."),
            ("-m m --periodic-concurrency-range a:2", "Invalid value provided: a:2"),
            ("-m m --periodic-concurrency-range 1:2:0", "The <step> value must be > 0."),
            ("-m m --periodic-concurrency-range 3:2", "The <start> must be <= <end>."),
            ("-m m --periodic-concurrency-range 1:4:2", "The <step> value must be a factor of the range size"),
            ("-m m --request-period 0", "Failed to parse --request-period. The value must be > 0"),
            (
                "-m m --periodic-concurrency-range 1:2 --concurrency-range 2",
                "--periodic-concurrency-range, --request-rate-range",
            ),
            ("-m m --periodic-concurrency-range 1:2 -t 2", "requires bi-directional gRPC streaming."),
            ("-m m --periodic-concurrency-range 1:2", "requires bi-directional gRPC streaming."),
            ("-m m -i grpc --streaming --periodic-concurrency-range 1:2", "Must provide --profile-export-file"),
            (
                "-m m --request-parameter a:1:int",
                "The --request-parameter option is currently only supported by gRPC protocol.",
            ),
            (
                "-m m -i grpc --request-parameter a:1",
                "Failed to parse --request-parameter. The value does not match <name:value:type>.",
            ),
            ("-m m -i grpc --request-parameter a:x:int", "is not an int"),
            ("-m m -i grpc --request-parameter a:yes:bool", "is not a bool"),
            ("-m m -i grpc --request-parameter a:1.5:float", "Unsupported type provided: 'float'"),
            ("-m m -i grpc --service-kind inprocess --request-parameter a:1:int", "--service-kind inprocess"),
        ] {
            let err = resolve(line).unwrap_err().to_string();
            assert!(err.contains(needle), "{line}: {err}");
            assert!(!err.contains('\n'), "{line}: {err}");
        }
    }

    #[test]
    fn flags_plan_toml_plan_is_identity() {
        for line in [
            "-m identity",
            "-m m -u localhost:8001 -i grpc --concurrency-range 2:8:2 -l 5 --percentile 95 -H X:1 --streaming",
            "-m m --request-rate-range 100:200:50 --request-distribution poisson --shared-memory system -b 4",
            "-m m --concurrency-range 4:0 -l 10 --collect-metrics --metrics-url h:1 -f x.csv --verbose-csv",
            "-m identity --shape INPUT0:16 --input-data zero --request-count 10 --max-threads 2",
            "-m accumulate --sequence-length 5 --sequence-length-variation 0 --sequence-id-range 10:20 -t 4",
            "-m accumulate --request-rate-range 50 --num-of-sequences 8 --serial-sequences --validate-outputs",
            "-m m -i grpc --request-parameter n:5:int --request-parameter b:true:bool --request-parameter s:5:string",
            "-m repeat -i grpc --streaming --periodic-concurrency-range 2:6:2 --request-period 3 --profile-export-file x.json",
        ] {
            let plan = resolve(line).unwrap();
            let text = plan.to_toml();
            assert_eq!(Plan::from_toml(&text).unwrap(), plan, "{line}:\n{text}");
        }
    }
}
