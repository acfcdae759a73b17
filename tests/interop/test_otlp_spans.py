"""`perfbench serve --otlp-traces-endpoint` (issue 46) decoded by a decoder we did not write: the
OpenTelemetry project's `opentelemetry-proto` Python package, behind a small OTLP/HTTP receiver in
this test. One `llm_request` span per request, with vLLM's attribute names, its
`gen_ai.request.id` the X-Request-ID `perfbench llm` sent, and its figures the twin's own record.

Runs under the AIPerf virtualenv (scripts/interop-genai.sh), which scripts/setup-genai-peers.sh
gives `opentelemetry-proto`.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from peers import LOOPBACK, free_port_block, perfbench_bin, run_tool, start_perfbench, write_repository
from twin import metric_ms, read_records, zoo_config

REQUESTS = 12
# vLLM's names (vllm/tracing.py); durations in seconds.
DURATIONS = ["gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
             "gen_ai.latency.time_in_model_prefill", "gen_ai.latency.time_in_model_decode",
             "gen_ai.latency.time_in_model_inference"]
COUNTS = ["gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"]


class Receiver:
    """An OTLP/HTTP traces receiver: decodes each POST and keeps its spans."""

    def __init__(self):
        self.spans, self.problems = [], []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/traces":
                    receiver.problems.append(f"POST to {self.path}")
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    receiver.problems.append(f"Content-Type {self.headers.get('Content-Type')}")
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        receiver.spans.extend(scope.spans)
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://{LOOPBACK}:{self.server.server_address[1]}"


def _attributes(span):
    out = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, kind)
    return out


@pytest.fixture(scope="module")
def traced_twin(tmp_path_factory):
    receiver = Receiver()
    root = tmp_path_factory.mktemp("otlp-repo")
    write_repository(root, {"llm": zoo_config("llm", step_us=5000, decode_us_per_seq=0, prefill_us_per_token=100)})
    record = root / "requests.jsonl"
    server = start_perfbench(root, ["llm"], repository=root, extra_args=[
        "--record-requests", str(record), "--otlp-traces-endpoint", receiver.url])
    server.record, server.receiver = record, receiver
    yield server
    server.stop()
    receiver.server.shutdown()


def test_one_span_per_request_named_as_vllms_and_joined_by_request_id(traced_twin, tmp_path):
    out = tmp_path / "run"
    run_tool([perfbench_bin(), "llm", "-m", "llm", "-u", traced_twin.http_url, "--streaming",
              "--concurrency", "3", "--request-count", str(REQUESTS), "--synthetic-input-tokens-mean", "32",
              "--output-tokens-mean", "8", "--artifact-dir", str(out)])
    sent = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines() if line]
    ids = {r["metadata"]["x_request_id"] for r in sent}
    assert len(ids) == REQUESTS, "perfbench llm sends one X-Request-ID per request"
    # The exporter sends a batch at least every 200 ms.
    deadline = time.monotonic() + 30
    receiver = traced_twin.receiver
    while time.monotonic() < deadline:
        if ids <= {_attributes(s).get("gen_ai.request.id") for s in receiver.spans}:
            break
        time.sleep(0.1)
    assert not receiver.problems, receiver.problems
    spans = {}
    for span in receiver.spans:
        attrs = _attributes(span)
        if attrs.get("gen_ai.request.id") in ids:
            assert attrs["gen_ai.request.id"] not in spans, f"two spans for {attrs['gen_ai.request.id']}"
            spans[attrs["gen_ai.request.id"]] = (span, attrs)
    assert set(spans) == ids, f"no span for {sorted(ids - set(spans))[:3]}"

    records = {r["id"]: r for r in read_records(traced_twin.record)}
    for rec in sent:
        rid = rec["metadata"]["x_request_id"]
        span, attrs = spans[rid]
        assert span.name == "llm_request" and span.kind == Span.SPAN_KIND_SERVER
        assert len(span.trace_id) == 16 and len(span.span_id) == 8
        missing = [k for k in DURATIONS + COUNTS + ["gen_ai.response.model"] if k not in attrs]
        assert not missing, f"span of {rid} lacks {missing}"
        assert attrs["gen_ai.response.model"] == "llm"
        truth = records[rid]
        assert attrs["gen_ai.usage.prompt_tokens"] == truth["prompt_tokens"]
        assert attrs["gen_ai.usage.completion_tokens"] == truth["completion_tokens"] == 8
        e2e_ns = truth["finish_ns"] - truth["arrival_ns"]
        assert abs(attrs["gen_ai.latency.e2e"] * 1e9 - e2e_ns) < 1e3, (attrs["gen_ai.latency.e2e"], e2e_ns)
        assert span.end_time_unix_nano - span.start_time_unix_nano == e2e_ns
        # Unix time: within a minute of now.
        assert abs(span.end_time_unix_nano / 1e9 - time.time()) < 60
        assert 0 <= attrs["gen_ai.latency.time_in_queue"] <= attrs["gen_ai.latency.time_to_first_token"]
        # The server's TTFT is inside the client's, to the 1 ms `perfbench llm` allows a join
        # before calling it implausible (once here the server's read 0.78 ms above the client's;
        # not yet explained: both read CLOCK_MONOTONIC).
        assert attrs["gen_ai.latency.time_to_first_token"] * 1e3 <= metric_ms(rec, "time_to_first_token") + 1.0


def test_perfbench_llm_joins_the_twins_spans_and_its_ttft_sits_just_above_the_servers(tmp_path):
    """`perfbench llm --otlp-listen` receiving the twin's spans (issue 46): every request
    joined, and the client's TTFT minus the server's within [0, 2] ms on at least 95% of them."""
    port = free_port_block(1)
    root = tmp_path / "repo"
    write_repository(root, {"llm": zoo_config("llm", step_us=5000, decode_us_per_seq=0, prefill_us_per_token=100)})
    server = start_perfbench(root, ["llm"], repository=root,
                             extra_args=["--otlp-traces-endpoint", f"http://{LOOPBACK}:{port}"])
    try:
        out = tmp_path / "run"
        printed = run_tool([perfbench_bin(), "llm", "-m", "llm", "-u", server.http_url, "--streaming",
                            "--concurrency", "4", "--request-count", "40", "--synthetic-input-tokens-mean", "64",
                            "--output-tokens-mean", "8", "--otlp-listen", f"{LOOPBACK}:{port}",
                            "--artifact-dir", str(out)])
    finally:
        server.stop()
    assert "Server spans (OTLP): 40 of 40 requests joined" in printed, printed[-2000:]
    lines = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines() if line]
    gaps = [metric_ms(l, "time_to_first_token") - metric_ms(l, "server_time_to_first_token") for l in lines]
    inside = sum(1 for g in gaps if 0 <= g <= 2)
    print(f"client TTFT minus server TTFT (ms): min {min(gaps):.3f}, max {max(gaps):.3f}; {inside} of {len(gaps)} in [0, 2]")
    assert inside >= 0.95 * len(gaps), sorted(gaps)
    for line in lines:
        for tag in ("server_request_latency", "server_queue_time", "server_prefill_time", "server_decode_time",
                    "client_time_to_first_token_share", "client_request_latency_share"):
            assert metric_ms(line, tag) is not None, f"{tag} missing from {line['metadata']['x_request_id']}"
