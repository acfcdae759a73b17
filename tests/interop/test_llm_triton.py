"""`perfbench llm` profiling a real Triton (2.51, the pytriton wheel's tritonserver) serving a
decoupled python-backend model with the vLLM backend's tensors (`generative_models/llm`: one
response per token when `stream` is true, each 2 ms after the last; one whole text otherwise),
through both of Triton's generative front ends (issue 31):

- `--endpoint-type generate --streaming`: Triton's `generate_stream`, one SSE event per token;
- `--endpoint-type kserve`: gRPC `ModelStreamInfer` with `text_input` and `sampling_parameters`,
  one response per token streamed, one whole text without `--streaming`.

Each run must complete every request, count exactly the tokens asked for with the client
tokenizer (Triton sends no `usage`), time every token as its own event, never read the last token
before Triton could have sent it, and reach Triton's model exactly once per request (Triton's own
statistics say so).

`perfbench search` over the same model (`--endpoint-type generate`): its config parameter
`token_gap_ms` applied through Triton's repository API in explicit mode, each point a generative
profile, ranked by output tokens/s; the original config is back at the end.
"""

import csv
import json
import urllib.request

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from peers import HERE, perfbench_bin, run_tool, start_triton_repo

REPO = HERE / "generative_models"
# generative_models/llm/1/model.py sleeps this long before each token it sends.
TOKEN_GAP_MS = 2.0
OUTPUT_TOKENS = 12
REQUESTS = 16
CONCURRENCY = 4


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    server = start_triton_repo(tmp_path_factory.mktemp("triton-llm-profile"), repo=REPO, models=["llm"])
    yield server
    server.stop()


def inference_count(server):
    """Requests Triton's `llm` model has taken (its statistics extension, over gRPC)."""
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    return stub.ModelStatistics(pb.ModelStatisticsRequest(name="llm"), timeout=10).model_stats[0].inference_count


@pytest.mark.parametrize("endpoint,streaming", [("generate", True), ("kserve", True), ("kserve", False)])
def test_perfbench_llm_profiles_tritons_decoupled_model(triton, tmp_path, endpoint, streaming):
    out_dir = tmp_path / "llm"
    url = triton.grpc_url if endpoint == "kserve" else triton.http_url
    cmd = [perfbench_bin(), "llm", "-m", "llm", "-u", url, "--endpoint-type", endpoint,
           "--isl", "40", "--osl", str(OUTPUT_TOKENS), "--concurrency", str(CONCURRENCY),
           "--request-count", str(REQUESTS), "--random-seed", "1", "--artifact-dir", str(out_dir)]
    before = inference_count(triton)
    output = run_tool(cmd + (["--streaming"] if streaming else []))

    assert "Request Latency" in output and "Token counts: client tokenizer" in output, output[-3000:]
    # TTFT and ITL are streaming metrics, as in AIPerf.
    assert ("Time to First Token" in output) == streaming, output[-3000:]
    lines = [json.loads(line) for line in (out_dir / "profile_export.jsonl").read_text().splitlines()]
    assert len(lines) == REQUESTS, output[-3000:]
    ids = set()
    for line in lines:
        assert line["error"] is None, line
        assert line["metadata"]["benchmark_phase"] == "profiling", line
        assert line["metadata"]["token_source"] == "client_tokenizer", line
        metrics = line["metrics"]
        assert metrics["output_sequence_length"]["value"] == OUTPUT_TOKENS, line
        assert 38 <= metrics["input_sequence_length"]["value"] <= 42, line
        latency = metrics["request_latency"]["value"]
        ttft = metrics.get("time_to_first_token", {"value": latency})["value"]
        # The model sleeps before every token, so its last one leaves at least this long after
        # the request arrived; a client that read it sooner would be inventing time.
        assert latency >= OUTPUT_TOKENS * TOKEN_GAP_MS, line
        assert 0 < ttft <= latency, line
        gaps = metrics.get("inter_chunk_latency", {"value": []})["value"]
        if streaming:
            # One event per token, each timed on its own (not one per network read).
            assert len(gaps) == OUTPUT_TOKENS - 1, line
            assert abs(sum(gaps) - (latency - ttft)) < 0.01, line
            assert ttft >= TOKEN_GAP_MS, line
        else:
            # One whole answer: its first token arrives with its last.
            assert gaps == [] and ttft == latency, line
        ids.add(line["metadata"]["x_request_id"])
    if endpoint == "generate":
        # An X-Request-ID on every HTTP request (the gRPC path sends no id yet).
        assert len(ids) == REQUESTS, "every request names itself"
    # Triton's model took exactly the requests perfbench sent: none lost, none repeated.
    assert inference_count(triton) - before == REQUESTS

    summary = json.loads((out_dir / "profile_export_aiperf.json").read_text())
    assert summary["request_count"]["avg"] == REQUESTS, summary["request_count"]
    assert summary["output_sequence_length"]["avg"] == OUTPUT_TOKENS, summary["output_sequence_length"]
    assert (out_dir / "profile_export_aiperf.csv").is_file()


def test_perfbench_search_varies_a_decoupled_models_parameter_on_triton(triton, tmp_path):
    out = tmp_path / "search"
    log = run_tool([perfbench_bin(), "search", "-m", "llm", "-u", triton.http_url, "--endpoint-type", "generate",
                    "--streaming", "--latency-budget", "ttft_p99=5s", "--parameter", "token_gap_ms=1,8",
                    "--mode", "brute", "--concurrency", str(CONCURRENCY), "--isl", "40",
                    "--osl", str(OUTPUT_TOKENS), "--request-count", str(REQUESTS), "--out", str(out)],
                   timeout_s=150)
    with open(out / "search.csv") as f:
        rows = list(csv.DictReader(f))
    gaps = [r["token_gap_ms"] for r in rows]
    assert gaps == ["2", "1", "8"], log[-2000:]
    tokens = {r["token_gap_ms"]: float(r["Output Tokens/Second"]) for r in rows}
    # Eight times the wait per token: far fewer tokens per second, on any machine.
    assert tokens["1"] > 2 * tokens["8"], tokens
    assert all(r["Failed"] == "0" and r["Meets Budget"] == "true" for r in rows), rows
    best = (out / "best" / "llm" / "config.pbtxt").read_text()
    assert 'key: "token_gap_ms"' in best and 'string_value: "8"' not in best, best
    with urllib.request.urlopen(f"http://{triton.http_url}/v2/models/llm/config", timeout=30) as r:
        config = json.loads(r.read())
    assert config["parameters"]["token_gap_ms"]["string_value"] == "2", "the original config is back"
