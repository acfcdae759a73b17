"""perfbench serve's generative twin against a real Triton (2.51, the pytriton wheel's
tritonserver) serving a decoupled python-backend model with the vLLM backend's interface
(`generative_models/llm`: `text_input`, `stream`, `max_tokens`, `sampling_parameters`,
`exclude_input_in_output` in, `text_output` out; fixed one-token words).

The two models' words differ, so each comparison replaces the generated text with a placeholder
(after checking it token by token) and then compares the rest byte for byte: Triton's generate
extension (`generate`, `generate_stream`: status, content type, body, SSE framing), gRPC
`ModelStreamInfer` (every serialized response: field names, ids, the final flag), the error
shapes (bad JSON, unknown model or version, a streamed request on `generate`, an input of the
wrong type, an error mid-stream, `ModelInfer` on a decoupled model), and the statistics
extension's counts for a decoupled model. Two deliberate differences, asserted as such: a bad
request is a 4xx here where Triton says 500 (or 200 with an error body), by the project's rule
that bad input gets a 4xx; and the JSON parser's own words after Triton's prefix.

Also drives both with tritonclient's stream API, real perf_analyzer 2.50 with `--streaming`, and
`perfbench llm --endpoint-type generate` (streaming and not) against Triton's model, whose token
counts must be exactly what it was asked for.
"""

import http.client
import json
import queue
import re
import struct
import time

import grpc
import numpy as np
import pytest
import tritonclient.grpc as tgrpc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

from peers import HERE, pa_bin, perfbench_bin, run_tool, start_perfbench, start_triton_repo

REPO = HERE / "generative_models"
# The python model's words, in order (generative_models/llm/1/model.py).
TRITON_WORDS = [" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with",
                " on", " was", " by", " at", " from"]
PLACEHOLDER = "<generated>"


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    server = start_triton_repo(tmp_path_factory.mktemp("triton-llm"), repo=REPO, models=["llm"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    server = start_perfbench(tmp_path_factory.mktemp("perfbench-llm"), ["llm"])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def both(triton, ours):
    return {"triton": triton, "ours": ours}


# --- HTTP -------------------------------------------------------------------------------------

def post(server, path, body, method="POST"):
    """(status, content type, body bytes) of one request."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request(method, path, body=data if method == "POST" else None,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.getheader("Content-Type"), resp.read()
    finally:
        conn.close()


TEXT_OUTPUT = re.compile(rb'"text_output":"((?:[^"\\]|\\.)*)"')


def masked(body):
    """The body with every text_output value replaced, and the values (decoded)."""
    texts = [json.loads(b'"' + m.group(1) + b'"') for m in TEXT_OUTPUT.finditer(body)]
    return TEXT_OUTPUT.sub(b'"text_output":"' + PLACEHOLDER.encode() + b'"', body), texts


def one_token_words(text):
    """The text's words, each with its leading space, as both models generate them."""
    return re.findall(r" [^ ]+", text)


def both_post(both, path, body, method="POST"):
    return {name: post(server, path, body, method) for name, server in both.items()}


# Fields both models read the same way; `ignore_eos` makes the twin write exactly max_tokens
# (Triton takes it as a request parameter the python model ignores).
EXACT = {"parameters": {"ignore_eos": True}}


def test_generate_answers_with_tritons_fields_and_framing(both):
    for extra in ({}, {"exclude_input_in_output": True}):
        body = {"text_input": "Hello there", "max_tokens": 3, **EXACT, **extra}
        got = both_post(both, "/v2/models/llm/generate", body)
        (ts, tct, tbody), (os_, oct_, obody) = got["triton"], got["ours"]
        assert (ts, tct) == (200, "application/json") and (os_, oct_) == (ts, tct), got
        (tmask, [ttext]), (omask, [otext]) = masked(tbody), masked(obody)
        assert omask == tmask, got
        for text in (ttext, otext):
            rest = text if extra else text.removeprefix("Hello there")
            assert extra or text.startswith("Hello there"), text
            assert len(one_token_words(rest)) == 3 and "".join(one_token_words(rest)) == rest, text
        assert ttext.endswith("".join(TRITON_WORDS[:3]))


def test_generate_stream_sends_one_event_per_token_and_no_done(both):
    body = {"text_input": "Hello", "max_tokens": 4, "stream": True, **EXACT}
    got = both_post(both, "/v2/models/llm/generate_stream", body)
    (ts, tct, tbody), (os_, oct_, obody) = got["triton"], got["ours"]
    assert (ts, tct) == (200, "text/event-stream; charset=utf-8") and (os_, oct_) == (ts, tct)
    (tmask, ttexts), (omask, otexts) = masked(tbody), masked(obody)
    assert omask == tmask, got
    assert tmask.count(b"data: ") == 4 and tmask.endswith(b"}\n\n") and b"[DONE]" not in tmask
    assert ttexts == TRITON_WORDS[:4]
    assert all(len(one_token_words(t)) == 1 for t in otexts) and len(otexts) == 4
    # Without `stream`, generate_stream carries one event with the whole text.
    body = {"text_input": "Hello", "max_tokens": 2, **EXACT}
    got = both_post(both, "/v2/models/llm/generate_stream", body)
    (tmask, ttexts), (omask, otexts) = masked(got["triton"][2]), masked(got["ours"][2])
    assert omask == tmask and tmask.count(b"data: ") == 1, got
    assert ttexts == ["Hello" + "".join(TRITON_WORDS[:2])] and otexts[0].startswith("Hello")


def test_generate_http_errors_have_tritons_shape(both):
    cases = [
        ("/v2/models/nope/generate", {"text_input": "a"}),
        ("/v2/models/nope/generate_stream", {"text_input": "a"}),
        ("/v2/models/llm/versions/7/generate", {"text_input": "a"}),
    ]
    for path, body in cases:
        got = both_post(both, path, body)
        assert got["ours"] == got["triton"], (path, got)
        assert got["ours"][0] == 404
    got = both_post(both, "/v2/models/llm/generate", b"", method="GET")
    assert got["ours"][0] == got["triton"][0] == 405 and got["ours"][2] == got["triton"][2], got
    # Request parameters are ints, bools or strings, in Triton's words (400 on both).
    got = both_post(both, "/v2/models/llm/generate", {"text_input": "a", "parameters": {"n": [1]}})
    assert got["ours"] == got["triton"] and got["ours"][0] == 400, got


def test_generate_bad_requests_are_4xx_with_tritons_message(both):
    """Where Triton answers a bad request with 500 (or a 200 that carries an error), we answer
    400 with the same body, or with Triton's prefix and our JSON parser's words."""
    # A streamed request on `generate`: Triton fails on the second response.
    body = {"text_input": "a", "max_tokens": 3, "stream": True, **EXACT}
    got = both_post(both, "/v2/models/llm/generate", body)
    assert got["triton"][0] == 200 and got["ours"][0] == 400, got
    assert got["ours"][1:] == got["triton"][1:], got
    assert json.loads(got["ours"][2])["error"].startswith("generate expects model to produce exactly 1 response")
    # ... and succeeds when the only response is the last.
    got = both_post(both, "/v2/models/llm/generate", {**body, "max_tokens": 1})
    assert got["triton"][0] == got["ours"][0] == 200 and masked(got["ours"][2])[0] == masked(got["triton"][2])[0]
    got = both_post(both, "/v2/models/llm/generate", {"text_input": "a", "parameters": 5})
    assert got["triton"][0] == 500 and got["ours"][0] == 400 and got["ours"][2] == got["triton"][2], got
    for bad in (b'{"text_input": "a",', b""):
        got = both_post(both, "/v2/models/llm/generate", bad)
        assert got["triton"][0] == 500 and got["ours"][0] == 400, got
        prefix = b'{"error":"failed to parse the request JSON buffer: '
        assert got["triton"][2].startswith(prefix) and got["ours"][2].startswith(prefix), got


def test_an_error_mid_stream_is_a_data_error_event(triton):
    """Triton's framing of a model error after the first event; the twin's error event is built
    to these bytes (src/server/generate.rs, an_error_mid_stream_is_framed_as_tritons)."""
    body = {"text_input": "a", "max_tokens": 4, "stream": True, "sampling_parameters": '{"fail_after": 1}'}
    status, ctype, raw = post(triton, "/v2/models/llm/generate_stream", body)
    assert status == 200 and ctype == "text/event-stream; charset=utf-8"
    assert raw == (b'data: {"model_name":"llm","model_version":"1","text_output":" the"}\n\n'
                   b'data: {"error":"failed on purpose"}\n\n'), raw


# --- gRPC -------------------------------------------------------------------------------------

def bytes_tensor(text):
    data = text.encode()
    return struct.pack("<I", len(data)) + data


def stream_request(model="llm", version="", stream=True, max_tokens=3, params=None, empty_final=False,
                   inputs=None):
    r = pb.ModelInferRequest(model_name=model, model_version=version, id="r1")
    if inputs is None:
        inputs = [("text_input", "BYTES", bytes_tensor("Hi")), ("stream", "BOOL", bytes([stream])),
                  ("max_tokens", "INT32", struct.pack("<i", max_tokens)),
                  ("sampling_parameters", "BYTES", bytes_tensor(json.dumps(params or {"ignore_eos": True})))]
    for name, datatype, raw in inputs:
        t = r.inputs.add()
        t.name, t.datatype = name, datatype
        t.shape.append(1)
        r.raw_input_contents.append(raw)
    if empty_final:
        r.parameters["triton_enable_empty_final_response"].bool_param = True
    return r


def masked_responses(server, request):
    """Every serialized response to `request` on one stream, text replaced, and the texts."""
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    out, texts = [], []
    for message in stub.ModelStreamInfer(iter([request]), timeout=30):
        response = message.infer_response
        for i, raw in enumerate(response.raw_output_contents):
            (length,) = struct.unpack("<I", raw[:4])
            assert length == len(raw) - 4, raw
            texts.append(raw[4:].decode())
            response.raw_output_contents[i] = b""
        out.append(message.SerializeToString())
    return out, texts


def test_model_stream_infer_matches_triton_byte_for_byte(both):
    cases = {
        "streamed": dict(),
        "one response": dict(stream=False),
        "empty final asked": dict(empty_final=True),
        "unknown model": dict(model="nope"),
        "unknown version": dict(version="7"),
        "wrong type": dict(inputs=[("text_input", "BYTES", bytes_tensor("Hi")), ("max_tokens", "INT64", bytes(8))]),
        "unknown input": dict(inputs=[("text_input", "BYTES", bytes_tensor("Hi")), ("bogus", "INT32", bytes(4))]),
        "short string": dict(inputs=[("text_input", "BYTES", b"\x01\x00")]),
        "string past its data": dict(inputs=[("text_input", "BYTES", bytes_tensor("Hi")),
                                             ("sampling_parameters", "BYTES", struct.pack("<I", 9) + b"{}")]),
    }
    for name, kw in cases.items():
        (theirs, ttexts), (mine, otexts) = (masked_responses(s, stream_request(**kw)) for s in both.values())
        assert mine == theirs, (name, theirs, mine)
        assert len(ttexts) == len(otexts), name
    # The texts: one token per streamed response, the prompt and three tokens otherwise.
    _, ttexts = masked_responses(both["triton"], stream_request())
    _, otexts = masked_responses(both["ours"], stream_request())
    assert ttexts == TRITON_WORDS[:3] and [len(one_token_words(t)) for t in otexts] == [1, 1, 1]


def test_model_error_mid_stream_is_tritons_shape(triton):
    """The twin builds this response for its own errors (src/server/grpc/llm.rs,
    a_model_error_is_encoded_as_tritons): error, model name, id, final flag, no version."""
    messages, texts = masked_responses(triton, stream_request(max_tokens=4, params={"fail_after": 1}))
    assert texts == [" the"] and len(messages) == 2
    expected = pb.ModelStreamInferResponse(error_message="failed on purpose")
    expected.infer_response.model_name, expected.infer_response.id = "llm", "r1"
    expected.infer_response.parameters["triton_final_response"].bool_param = True
    assert messages[1] == expected.SerializeToString()
    assert messages[1].hex() == (
        "0a116661696c6564206f6e20707572706f736512260a036c6c6d1a027231221b0a15747269746f6e5f66696e616c"
        "5f726573706f6e736512020801")


def test_model_infer_on_the_decoupled_model_is_refused_as_triton_does(both):
    answers = {}
    for name, server in both.items():
        stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
        with pytest.raises(grpc.RpcError) as e:
            stub.ModelInfer(stream_request(), timeout=10)
        answers[name] = (e.value.code(), e.value.details())
    assert answers["ours"] == answers["triton"], answers
    assert answers["ours"][0] == grpc.StatusCode.UNIMPLEMENTED


def test_tritonclient_stream_api(both):
    for name, server in both.items():
        client = tgrpc.InferenceServerClient(server.grpc_url)
        results = queue.Queue()
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        text = tgrpc.InferInput("text_input", [1], "BYTES")
        text.set_data_from_numpy(np.array([b"Hello"], dtype=np.object_))
        stream = tgrpc.InferInput("stream", [1], "BOOL")
        stream.set_data_from_numpy(np.array([True]))
        params = tgrpc.InferInput("sampling_parameters", [1], "BYTES")
        params.set_data_from_numpy(np.array([json.dumps({"max_tokens": 5, "ignore_eos": True}).encode()],
                                            dtype=np.object_))
        client.async_stream_infer("llm", [text, stream, params], request_id="tc",
                                  enable_empty_final_response=True)
        pieces = []
        while True:
            result, error = results.get(timeout=30)
            assert error is None, (name, error)
            response = result.get_response()
            assert response.id == "tc" and response.model_name == "llm"
            output = result.as_numpy("text_output")
            assert output.shape == (1,) and output.dtype == np.object_
            pieces.append(output[0].decode())
            if response.parameters["triton_final_response"].bool_param:
                break
        client.stop_stream()
        client.close()
        assert len(pieces) == 5 and all(len(one_token_words(p)) == 1 for p in pieces), (name, pieces)


# --- statistics -------------------------------------------------------------------------------

COUNTS = ("inference_count", "execution_count")
STAGES = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")


def counts(server):
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
    m = stub.ModelStatistics(pb.ModelStatisticsRequest(name="llm"), timeout=10).model_stats[0]
    out = {k: getattr(m, k) for k in COUNTS}
    out.update({k: getattr(m.inference_stats, k).count for k in STAGES})
    out["batch"] = {b.batch_size: b.compute_infer.count for b in m.batch_stats}
    return out


def delta(after, before):
    d = {k: after[k] - before[k] for k in (*COUNTS, *STAGES)}
    d["batch"] = {b: n - before["batch"].get(b, 0) for b, n in after["batch"].items()}
    return d


def test_statistics_count_a_decoupled_model_as_triton_does(both):
    """The same traffic on both: finished requests over HTTP and gRPC, refused ones, and one
    whose client leaves mid-stream. Triton counts one inference, one execution of batch size 1
    and one success per request its model took (also the one whose client left), none for a
    request refused before the model."""
    before = {name: counts(s) for name, s in both.items()}
    for name, server in both.items():
        post(server, "/v2/models/llm/generate", {"text_input": "a", "max_tokens": 2})
        post(server, "/v2/models/llm/generate_stream", {"text_input": "a", "max_tokens": 2, "stream": True})
        post(server, "/v2/models/llm/generate", b"{")
        masked_responses(server, stream_request())
        masked_responses(server, stream_request(stream=False))
        masked_responses(server, stream_request(inputs=[("text_input", "INT32", bytes(4))]))
        stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(server.grpc_url))
        call = stub.ModelStreamInfer(iter([stream_request(max_tokens=100)]), timeout=30)
        next(call)
        call.cancel()
    expected = {k: 5 for k in (*COUNTS, *STAGES)}
    expected["fail"] = 0
    expected["batch"] = {1: 5}
    # Triton counts a request when its model's execute returns, the twin when it ends (the one
    # whose client left: at the batcher's next step), so wait for both to settle.
    deadline = time.monotonic() + 30
    while True:
        got = {name: delta(counts(s), before[name]) for name, s in both.items()}
        if all(d == expected for d in got.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got["ours"] == got["triton"] == expected, got


# --- load generators against both -------------------------------------------------------------

def test_perf_analyzer_streaming_against_both(both, tmp_path):
    data = tmp_path / "input.json"
    data.write_text(json.dumps({"data": [{
        "text_input": ["Hello"], "stream": [True], "max_tokens": [4],
        "sampling_parameters": [json.dumps({"ignore_eos": True})],
    }]}))
    for name, server in both.items():
        csv_path = tmp_path / f"{name}.csv"
        out = run_tool([pa_bin(), "-m", "llm", "-u", server.grpc_url, "-i", "grpc", "--streaming",
                        "--input-data", str(data), "--measurement-mode", "count_windows",
                        "--measurement-request-count", "20", "-s", "100", "-r", "5",
                        "--concurrency-range", "2", "-f", str(csv_path)])
        rows = csv_path.read_text().splitlines()
        assert len(rows) >= 2 and rows[0].startswith("Concurrency,Inferences/Second"), (name, out[-2000:])
        throughput = float(rows[1].split(",")[1])
        assert throughput > 0, (name, out[-2000:])


@pytest.mark.parametrize("streaming", [True, False])
def test_perfbench_llm_generate_counts_tokens_on_triton(triton, tmp_path, streaming):
    out_dir = tmp_path / "llm"
    cmd = [perfbench_bin(), "llm", "-m", "llm", "-u", triton.http_url, "--endpoint-type", "generate",
           "--isl", "40", "--osl", "7", "--request-count", "6", "--artifact-dir", str(out_dir)]
    output = run_tool(cmd + (["--streaming"] if streaming else []))
    lines = [json.loads(line) for line in (out_dir / "profile_export.jsonl").read_text().splitlines()]
    assert len(lines) == 6, output
    for line in lines:
        assert line["error"] is None, line
        assert line["metrics"]["output_sequence_length"]["value"] == 7, line
        assert 38 <= line["metrics"]["input_sequence_length"]["value"] <= 42, line
