"""The generative twin of `perfbench serve` against clients we did not write: the official
`openai` Python client streams chat and completions from it, and AIPerf 0.13 profiles chat,
completions (streaming and not) and embeddings with zero errors, its token counts equal to our
`usage`, and its TTFT and request latency at concurrency 1 no earlier than the instants the
server recorded (`--record-requests`) and within 5% of them (see `close_to_truth`).

Both clients count tokens with a Hugging Face tokenizer; nothing can be downloaded here, so the
session trains a small byte-level BPE on the twin's own corpus, saves it as a tokenizer
directory, and the served model counts with the same `tokenizer.json`.

Runs under the AIPerf virtualenv (scripts/setup-genai-peers.sh, scripts/interop-genai.sh).
"""

import json
import os
import statistics
from pathlib import Path

import pytest

from peers import run_tool, start_perfbench, write_repository
from twin import close_to_truth, metric_ms, read_records, train_tokenizer

# AIPerf reads a fixed gap above the server's own instants (its request starts before the socket
# write, and its Python client handles each answer late): 1.1-1.7 ms on every figure on a quiet
# machine, 10-13 ms with builds beside it, and 18 ms on chat's TTFT with four builds on two cores
# (load average 10). Step costs large enough that this is well inside 5%: TTFT is one prefill
# step, 10 ms + 100 tokens x 6 ms = 610 ms (5% = 30 ms), and request latency adds 15 decode
# steps of 10 ms (about 760 ms).
STEP_US = 10_000
PREFILL_US_PER_TOKEN = 6000
INPUT_TOKENS = 100
OUTPUT_TOKENS = 16
REQUESTS = 8


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory, tokenizer_dir):
    root = tmp_path_factory.mktemp("llm-repo")
    params = {
        "step_us": STEP_US,
        "decode_us_per_seq": 50,
        "prefill_us_per_token": PREFILL_US_PER_TOKEN,
        "max_model_len": 4096,
        "tokenizer": tokenizer_dir / "tokenizer.json",
    }
    parameters = "\n".join(
        f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    write_repository(
        root,
        {
            "llm": f"""
            backend: "llm"
            max_batch_size: 0
            model_transaction_policy {{ decoupled: true }}
            input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }} ]
            output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }} ]
            {parameters}
            """
        },
    )
    record = root / "requests.jsonl"
    server = start_perfbench(root, ["llm"], repository=root, extra_args=["--record-requests", str(record)])
    server.record = record
    yield server
    server.stop()


def records(server):
    return read_records(server.record)


def hf_tokenizer(directory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(directory))


def test_openai_client_streams_chat_and_completions(llm_server, tokenizer_dir):
    import openai

    tok = hf_tokenizer(tokenizer_dir)
    client = openai.OpenAI(base_url=f"http://{llm_server.http_url}/v1", api_key="unused", max_retries=0)
    assert "llm" in [m.id for m in client.models.list().data]

    stream = client.chat.completions.create(
        model="llm",
        messages=[{"role": "user", "content": "Where does the night train go?"}],
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    pieces, finish, usage = [], None, None
    for chunk in stream:
        if chunk.choices:
            delta = chunk.choices[0].delta
            if delta.content:
                pieces.append(delta.content)
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    text = "".join(pieces)
    assert len(pieces) == 12
    assert finish == "length"
    assert usage.completion_tokens == 12 == len(tok.encode(text, add_special_tokens=False))
    assert usage.prompt_tokens == len(tok.encode("Where does the night train go?", add_special_tokens=False))

    stream = client.completions.create(
        model="llm", prompt="The harbour", max_tokens=7, stream=True, extra_body={"ignore_eos": True}
    )
    texts = [c.choices[0].text for c in stream if c.choices and c.choices[0].text]
    assert len(texts) == 7
    whole = client.chat.completions.create(
        model="llm", messages=[{"role": "user", "content": "hi"}], max_tokens=5, seed=4
    )
    assert whole.usage.completion_tokens == len(tok.encode(whole.choices[0].message.content, add_special_tokens=False))
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])


# Each case its own AIPerf seed, so no case's prompts share blocks with an earlier case's: a
# prefix-cache hit skips the prefill (with one seed, completions reused chat's prompts and read
# a 16 ms TTFT, where 13 ms of client overhead is most of it).
@pytest.mark.parametrize(
    "endpoint,streaming,seed",
    [("chat", True, 7), ("chat", False, 8), ("completions", True, 9), ("completions", False, 10),
     ("embeddings", False, 11)],
)
def test_aiperf_profiles_the_twin(llm_server, tokenizer_dir, tmp_path, endpoint, streaming, seed):
    before = len(records(llm_server))
    cmd = [
        str(Path(os.environ.get("AIPERF_BIN", "aiperf"))), "profile",
        "--model", "llm", "--url", f"http://{llm_server.http_url}",
        "--endpoint-type", endpoint, "--tokenizer", str(tokenizer_dir),
        "--concurrency", "1", "--request-count", str(REQUESTS),
        "--synthetic-input-tokens-mean", str(INPUT_TOKENS), "--synthetic-input-tokens-stddev", "0",
        "--random-seed", str(seed), "--ui-type", "none", "--artifact-dir", str(tmp_path / "aiperf"),
    ]
    if endpoint != "embeddings":
        cmd += ["--output-tokens-mean", str(OUTPUT_TOKENS), "--output-tokens-stddev", "0",
                "--extra-inputs", "ignore_eos:true"]
    if streaming:
        cmd.append("--streaming")
    # AIPerf 0.13 must run without HF_HUB_OFFLINE: offline, it rejects a plain directory.
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    run_tool(cmd, env=env)
    exports = list((tmp_path / "aiperf").rglob("profile_export.jsonl"))
    assert exports, f"no profile_export.jsonl under {tmp_path / 'aiperf'}"
    theirs = [json.loads(line) for line in exports[0].read_text().splitlines() if line.strip()]
    ours = records(llm_server)[before:]
    assert len(theirs) == REQUESTS, theirs[:2]
    assert all(not r.get("error") for r in theirs), [r["error"] for r in theirs if r.get("error")]
    assert len(ours) >= REQUESTS
    # AIPerf sends X-Request-ID; the server records it as the request's id.
    by_id = {o["id"]: o for o in ours}
    pairs = [(t, by_id[t["metadata"]["x_request_id"]]) for t in theirs]
    for t, o in pairs:
        assert metric_ms(t, "input_sequence_length") == o["prompt_tokens"], (t["metrics"], o)
        # Every prompt is prefilled in full, so TTFT is the long prefill step.
        assert o["cached_tokens"] == 0, o
        if endpoint != "embeddings":
            assert metric_ms(t, "output_sequence_length") == o["completion_tokens"] == OUTPUT_TOKENS
    latency_theirs = statistics.mean(metric_ms(t, "request_latency") for t, _ in pairs)
    latency_ours = statistics.mean((o["finish_ns"] - o["arrival_ns"]) / 1e6 for _, o in pairs)
    close_to_truth("request latency", latency_theirs, latency_ours)
    if streaming:
        ttft_theirs = statistics.mean(metric_ms(t, "time_to_first_token") for t, _ in pairs)
        ttft_ours = statistics.mean((o["first_chunk_ns"] - o["arrival_ns"]) / 1e6 for _, o in pairs)
        close_to_truth("TTFT", ttft_theirs, ttft_ours)
