"""The endpoints the field uses now (issue 43), checked with clients we did not write against one
`perfbench serve` llm twin (`llm`, and `llm_reasoning` where the zoo has it):

- guidellm 0.8.1 with its default backend validation (`GET /health`): a concurrent run, and its
  multi-turn shared-prefix synthetic data, after which the twin's prefix-cache hits have risen;
- AIPerf 0.13 on chat, `messages` (Anthropic), `responses` (OpenAI) and `cohere-rankings`
  (`/v2/rerank`), each with zero errors, each finding the `vllm:` series by its default scrape of
  the inference URL's `/metrics`;
- the `anthropic` SDK's `messages.stream` and the `openai` SDK's `responses.create(stream=True)`
  and chat reasoning deltas, their token counts equal to the twin's record;
- inference-perf 0.7.0 (`server.type: vllm`) with `api.type: chat` and `anthropic_messages`;
- `perfbench llm` on `messages`, `responses` and chat on `llm_reasoning`: TTFT against the twin's
  `--record-requests`, as test_generative.py holds AIPerf's.

Runs under the AIPerf virtualenv (scripts/interop-genai.sh); GUIDELLM_BIN and INFERENCE_PERF_BIN
name the peers scripts/setup-field-peers.sh installs in their own virtualenvs.
"""

import json
import os
import statistics
import urllib.request
from pathlib import Path

import pytest

from peers import perfbench_bin, run_tool, start_perfbench, write_repository
from twin import ZOO, close_to_truth, metric_ms, read_records, train_tokenizer, zoo_config

# A step of 10 ms and 2 ms a prompt token: a 64-token prompt's TTFT is about 140 ms, so 5% is
# 7 ms, far above perfbench llm's own turnaround; a run of a dozen requests still takes seconds.
COSTS = {
    "step_us": 10_000,
    "decode_us_per_seq": 0,
    "prefill_us_per_token": 2000,
    "max_model_len": 4096,
    # No client here sends ignore_eos to every route: a natural end far beyond max_tokens.
    "mean_output_tokens": 100_000,
}
OSL = 8
REQUESTS = 8
REASONING = "llm_reasoning"
# The reasoning model thinks this many tokens (the zoo's 64 take long at 10 ms a step); asked
# for THINK + OSL tokens, it answers with OSL.
THINK = 16


def _bin(variable):
    path = os.environ.get(variable)
    if not path or not os.access(path, os.X_OK):
        pytest.fail(f"{variable} must name the peer (scripts/setup-field-peers.sh, scripts/interop-genai.sh)")
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


@pytest.fixture(scope="module")
def twin(tmp_path_factory, tokenizer_dir):
    root = tmp_path_factory.mktemp("field-repo")
    models = ["llm"] + ([REASONING] if (ZOO / f"{REASONING}.pbtxt").is_file() else [])
    params = dict(COSTS, tokenizer=tokenizer_dir / "tokenizer.json")
    overrides = {"llm": params, REASONING: dict(params, reasoning_tokens=THINK)}
    write_repository(root, {name: zoo_config(name, **overrides[name]) for name in models})
    record = root / "requests.jsonl"
    server = start_perfbench(root, models, repository=root, extra_args=["--record-requests", str(record)])
    server.record = record
    yield server
    server.stop()


def _need_reasoning(twin):
    assert REASONING in twin.models, f"the zoo has no {REASONING} (issue 43: src/server/zoo/{REASONING}.pbtxt)"


def _aiperf_env():
    # AIPerf 0.13 must run without HF_HUB_OFFLINE: offline, it rejects a plain directory.
    return {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}


def _offline_env():
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def prometheus(url):
    """Sum of every sample of each series in a Prometheus text page, by name."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_and_labels, _, value = line.rpartition(" ")
        name = name_and_labels.split("{")[0]
        values[name] = values.get(name, 0.0) + float(value)
    return values


def _new_records(twin, before):
    return read_records(twin.record)[before:]


# --- guidellm 0.8.1 ------------------------------------------------------------------------------


def _run_guidellm(twin, tokenizer_dir, out, profile, data, requests):
    """One `guidellm run` with its default backend (openai_http, chat, streaming, validation by
    GET /health); returns the one benchmark of its JSON report."""
    report = out / "benchmarks.json"
    cmd = [
        _bin("GUIDELLM_BIN"), "run",
        "--backend", f"kind=openai_http,target=http://{twin.http_url},model=llm",
        "--profile", profile,
        "--constraint", f"kind=max_requests,count={requests}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer_dir}",
        "--data", data,
        "--output", f"kind=json,path={report}",
        "--disable-console-interactive",
    ]
    printed = run_tool(cmd, env=_offline_env())
    assert report.is_file(), f"guidellm wrote no {report}:\n{printed[-3000:]}"
    benchmarks = json.loads(report.read_text())["benchmarks"]
    assert len(benchmarks) == 1, [b.keys() for b in benchmarks]
    return benchmarks[0], printed


def _guidellm_totals(benchmark):
    """guidellm's request counts by status (successful, errored, incomplete)."""
    totals = benchmark["metrics"]["request_totals"]
    return {k: totals.get(k, 0) for k in ("successful", "errored", "incomplete", "total")}


def test_guidellm_concurrent_run_passes_its_default_health_validation(twin, tokenizer_dir, tmp_path):
    before = len(read_records(twin.record))
    benchmark, printed = _run_guidellm(
        twin, tokenizer_dir, tmp_path, "kind=concurrent,streams=4",
        f"kind=synthetic_text,prompt_tokens=32,output_tokens={OSL}", 16,
    )
    totals = _guidellm_totals(benchmark)
    assert totals["successful"] == 16 and totals["errored"] == 0, (totals, printed[-2000:])
    ours = _new_records(twin, before)
    assert len(ours) == 16, ours[:2]
    assert all(r["completion_tokens"] == OSL for r in ours), [r["completion_tokens"] for r in ours]


def _prefix_hits(twin, before):
    """Prefix-cache hit and queried tokens since the `prometheus` page `before`."""
    after = prometheus(twin.metrics_url)
    return tuple(after[name] - before.get(name, 0)
                 for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"))


@pytest.mark.parametrize("tool", ["guidellm", "perfbench"])
def test_multiturn_shared_prefix_hits_the_prefix_cache(twin, tokenizer_dir, tmp_path, tool):
    """guidellm's multi-turn shared-prefix data, and the same sessions from `perfbench llm`
    (issue 44: beside ours), each held to the same floor of cache hits."""
    before = prometheus(twin.metrics_url)
    # 4 conversations of 3 turns, each opening with one of 2 system prompts of 64 tokens (four
    # 16-token KV blocks). Each later turn resends its conversation so far, whose blocks its
    # earlier turn left in the cache: at least the system prompt's 64 tokens hit, whatever the
    # order the two streams ran the groups' first turns in (measured: guidellm 896 and 816 of
    # 1476 tokens, perfbench 912 of 1501).
    conversations, turns, prefix_tokens, prefix_count = 4, 3, 64, 2
    requests = conversations * turns
    if tool == "guidellm":
        benchmark, printed = _run_guidellm(
            twin, tokenizer_dir, tmp_path, "kind=concurrent,streams=2",
            f"kind=synthetic_text,prompt_tokens=24,output_tokens={OSL},turns={turns},"
            f"prefix_tokens={prefix_tokens},prefix_count={prefix_count}",
            requests,
        )
        totals = _guidellm_totals(benchmark)
        assert totals["successful"] == requests and totals["errored"] == 0, (totals, printed[-2000:])
    else:
        record_count = len(read_records(twin.record))
        run_tool([perfbench_bin(), "llm", "-m", "llm", "-u", twin.http_url, "--streaming",
                  "--concurrency", "2", "--conversation-num", str(conversations),
                  "--conversation-turn-mean", str(turns), "--prompt-prefix-pool-size", str(prefix_count),
                  "--prompt-prefix-length", str(prefix_tokens), "--synthetic-input-tokens-mean", "24",
                  "--output-tokens-mean", str(OSL), "--tokenizer", str(tokenizer_dir),
                  "--artifact-dir", str(tmp_path / "perfbench")])
        assert len(_new_records(twin, record_count)) == requests
    hits, queries = _prefix_hits(twin, before)
    print(f"{tool} multi-turn: prefix cache hits {hits:.0f} of {queries:.0f} queried tokens")
    assert hits >= conversations * (turns - 1) * prefix_tokens, (hits, queries)


# --- AIPerf 0.13 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("endpoint", ["chat", "messages", "responses", "cohere-rankings"])
def test_aiperf_runs_clean_and_its_default_scrape_finds_the_vllm_series(twin, tokenizer_dir, tmp_path, endpoint):
    before = len(read_records(twin.record))
    out = tmp_path / "aiperf"
    cmd = [
        str(Path(os.environ.get("AIPERF_BIN", "aiperf"))), "profile",
        "--model", "llm", "--url", f"http://{twin.http_url}",
        "--endpoint-type", endpoint, "--tokenizer", str(tokenizer_dir),
        "--concurrency", "2", "--request-count", str(REQUESTS),
        "--random-seed", "43", "--ui-type", "none", "--artifact-dir", str(out),
    ]
    if endpoint == "cohere-rankings":
        cmd += ["--rankings-passages-mean", "4", "--rankings-passages-prompt-token-mean", "16",
                "--rankings-query-prompt-token-mean", "8"]
    else:
        cmd += ["--streaming", "--synthetic-input-tokens-mean", "32", "--synthetic-input-tokens-stddev", "0",
                "--output-tokens-mean", str(OSL), "--output-tokens-stddev", "0"]
    printed = run_tool(cmd, env=_aiperf_env())
    exports = list(out.rglob("profile_export.jsonl"))
    assert exports, f"no profile_export.jsonl under {out}:\n{printed[-3000:]}"
    theirs = [json.loads(line) for line in exports[0].read_text().splitlines() if line.strip()]
    assert len(theirs) == REQUESTS, theirs[:2]
    assert all(not r.get("error") for r in theirs), [r["error"] for r in theirs if r.get("error")]
    ours = _new_records(twin, before)
    assert len(ours) >= REQUESTS, ours[:2]
    if endpoint != "cohere-rankings":
        assert [metric_ms(t, "output_sequence_length") for t in theirs] == [OSL] * REQUESTS
    # No --server-metrics: AIPerf scraped http://HOST:PORT/metrics, the inference port's.
    scraped = list(out.rglob("server_metrics_export.json"))
    assert scraped, f"no server_metrics_export.json under {out}:\n{printed[-3000:]}"
    export = json.loads(scraped[0].read_text())
    api_metrics = f"http://{twin.http_url}/metrics"
    assert api_metrics in export["summary"]["endpoints_successful"], export["summary"]
    found = {name for name, metric in export["metrics"].items()
             if name.startswith("vllm:") and any(s["endpoint_url"] == api_metrics for s in metric["series"])}
    for series in ("vllm:generation_tokens", "vllm:prefix_cache_hits", "vllm:time_to_first_token_seconds"):
        assert series in found, (series, sorted(export["metrics"]))


# --- the Anthropic and OpenAI SDKs ----------------------------------------------------------------


def _hf_count(tokenizer_dir, text):
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(str(tokenizer_dir)).encode(text, add_special_tokens=False))


def test_anthropic_sdk_streams_messages(twin, tokenizer_dir):
    import anthropic

    client = anthropic.Anthropic(base_url=f"http://{twin.http_url}", api_key="unused", max_retries=0)
    before = len(read_records(twin.record))
    with client.messages.stream(
        model="llm",
        max_tokens=12,
        system="Answer briefly.",
        messages=[{"role": "user", "content": "Where does the night train go?"}],
    ) as stream:
        pieces = list(stream.text_stream)
        final = stream.get_final_message()
    (ours,) = _new_records(twin, before)
    text = "".join(pieces)
    assert len(pieces) == 12, pieces
    assert final.content[-1].type == "text" and final.content[-1].text == text
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == ours["completion_tokens"] == 12 == _hf_count(tokenizer_dir, text)
    assert final.usage.input_tokens == ours["prompt_tokens"]
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="nope", max_tokens=4, messages=[{"role": "user", "content": "hi"}])
    assert err.value.body["type"] == "error", err.value.body


def test_anthropic_sdk_streams_thinking_before_text(twin):
    import anthropic

    _need_reasoning(twin)
    client = anthropic.Anthropic(base_url=f"http://{twin.http_url}", api_key="unused", max_retries=0)
    kinds = []
    with client.messages.stream(
        model=REASONING, max_tokens=THINK + OSL, messages=[{"role": "user", "content": "Think, then answer."}]
    ) as stream:
        for event in stream:
            if event.type in ("thinking", "text"):
                kinds.append(event.type)
        final = stream.get_final_message()
    # One delta a token: THINK thinking deltas (block 0), then the answer's (block 1).
    assert kinds == ["thinking"] * THINK + ["text"] * OSL, kinds
    assert [block.type for block in final.content] == ["thinking", "text"], final.content
    assert final.usage.output_tokens == THINK + OSL, final.usage


def test_openai_sdk_streams_responses(twin, tokenizer_dir):
    import openai

    client = openai.OpenAI(base_url=f"http://{twin.http_url}/v1", api_key="unused", max_retries=0)
    before = len(read_records(twin.record))
    events = list(client.responses.create(
        model="llm", input="Where does the night train go?", instructions="Answer briefly.",
        max_output_tokens=10, stream=True,
    ))
    (ours,) = _new_records(twin, before)
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    for name in ("response.output_item.added", "response.output_text.done", "response.output_item.done"):
        assert name in types, types
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    done = next(e for e in events if e.type == "response.output_text.done")
    assert len(deltas) == 10 and "".join(deltas) == done.text
    usage = events[-1].response.usage
    assert usage.output_tokens == ours["completion_tokens"] == 10 == _hf_count(tokenizer_dir, done.text)
    assert usage.input_tokens == ours["prompt_tokens"]
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert events[-1].response.output_text == done.text


def test_openai_sdk_chat_streams_reasoning_before_content(twin):
    import openai

    _need_reasoning(twin)
    client = openai.OpenAI(base_url=f"http://{twin.http_url}/v1", api_key="unused", max_retries=0)
    kinds, usage = [], None
    for chunk in client.chat.completions.create(
        model=REASONING, messages=[{"role": "user", "content": "Think, then answer."}], max_tokens=THINK + OSL,
        stream=True, stream_options={"include_usage": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        # vLLM streams `reasoning` (and, before 0.11, `reasoning_content`).
        if extra.get("reasoning") or extra.get("reasoning_content"):
            kinds.append("reasoning")
        if delta.content:
            kinds.append("content")
    assert kinds == ["reasoning"] * THINK + ["content"] * OSL, kinds
    assert usage.completion_tokens_details.reasoning_tokens == THINK, usage
    assert usage.completion_tokens == THINK + OSL, usage


def test_openai_sdk_responses_stream_reasoning_first(twin):
    import openai

    _need_reasoning(twin)
    client = openai.OpenAI(base_url=f"http://{twin.http_url}/v1", api_key="unused", max_retries=0)
    events = list(client.responses.create(model=REASONING, input="Think, then answer.", max_output_tokens=THINK + OSL,
                                          stream=True))
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "message"], added
    types = [e.type for e in events]
    first_text = types.index("response.output_text.delta")
    reasoning = [i for i, t in enumerate(types) if t.startswith("response.reasoning") and t.endswith(".delta")]
    assert len(reasoning) == THINK and max(reasoning) < first_text, types
    assert types.count("response.output_text.delta") == OSL, types
    usage = events[-1].response.usage
    assert usage.output_tokens_details.reasoning_tokens == THINK, usage
    assert usage.output_tokens == THINK + OSL, usage


# --- inference-perf 0.7.0 --------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["chat", "anthropic_messages"])
def test_inference_perf_runs_clean(twin, tokenizer_dir, tmp_path, api):
    requests = 12
    # Chat gets inference-perf's shared-prefix data; only its mock data speaks Anthropic's API.
    if api == "chat":
        data = {"type": "shared_prefix", "shared_prefix": {
            "num_groups": 2, "num_prompts_per_group": 6, "system_prompt_len": 48, "question_len": 16,
            "output_len": OSL}}
    else:
        data = {"type": "mock"}
    config = {
        "api": {"type": api, "streaming": True},
        "server": {"type": "vllm", "model_name": "llm", "base_url": f"http://{twin.http_url}",
                   "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer_dir)},
        "data": data,
        "load": {"type": "concurrent", "num_workers": 1,
                 "stages": [{"concurrency_level": 4, "num_requests": requests}]},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": False}},
        "storage": {"local_storage": {"path": str(tmp_path / "reports")}},
    }
    path = tmp_path / "config.yml"
    # JSON is YAML: no YAML writer needed in this virtualenv.
    path.write_text(json.dumps(config, indent=2))
    before = len(read_records(twin.record))
    page_before = prometheus(twin.metrics_url)
    printed = run_tool([_bin("INFERENCE_PERF_BIN"), "--config_file", str(path)], env=_offline_env())
    found = list((tmp_path / "reports").rglob("summary_lifecycle_metrics.json"))
    assert found, f"inference-perf wrote no summary_lifecycle_metrics.json:\n{printed[-3000:]}"
    summary = json.loads(found[0].read_text())
    assert summary["failures"]["count"] == 0, json.dumps(summary["failures"])[:2000]
    assert summary["successes"]["count"] == requests, summary["successes"]
    assert len(_new_records(twin, before)) == requests
    # inference-perf checks its own reports, and counts each answer's tokens with the tokenizer the
    # twin counts with: no error, and no answer whose count differs from the server's usage. (Its
    # warnings on its own scheduling, a negative schedule delay, are not the server's.)
    checks = json.loads(next((tmp_path / "reports").rglob("validation.json")).read_text())
    problems = checks["global"]["errors"] + [
        p for report in checks["reports"].values()
        for p in report["errors"] + [w for w in report["warnings"] if w["check"] == "summary.token_mismatches"]]
    assert not problems, problems
    if api == "chat":
        hits, queries = _prefix_hits(twin, page_before)
        print(f"inference-perf shared_prefix: prefix cache hits {hits:.0f} of {queries:.0f} queried tokens")
        assert hits >= SHARED_PREFIX_FLOOR, (hits, queries)


# 12 prompts in 2 groups of one 48-token prefix, 4 in flight: at most 4 of them miss (the two
# groups' first ones, each met by a twin), and every other hits at least the prefix's first two
# 16-token blocks (the third may end in a token the prefix shares with the question after it).
SHARED_PREFIX_FLOOR = (12 - 4) * 32


def test_perfbench_prefix_pool_beside_inference_perf_shared_prefix(twin, tokenizer_dir, tmp_path):
    """inference-perf's `shared_prefix` load (test_inference_perf_runs_clean[chat]) from
    `perfbench llm --prompt-prefix-pool-size`: the same floor of cache hits (issue 44)."""
    before = prometheus(twin.metrics_url)
    run_tool([perfbench_bin(), "llm", "-m", "llm", "-u", twin.http_url, "--streaming",
              "--concurrency", "4", "--request-count", "12", "--prompt-prefix-pool-size", "2",
              "--prompt-prefix-length", "48", "--synthetic-input-tokens-mean", "16",
              "--output-tokens-mean", str(OSL), "--tokenizer", str(tokenizer_dir),
              "--artifact-dir", str(tmp_path / "perfbench")])
    hits, queries = _prefix_hits(twin, before)
    print(f"perfbench prefix pool: prefix cache hits {hits:.0f} of {queries:.0f} queried tokens")
    assert hits >= SHARED_PREFIX_FLOOR, (hits, queries)


# --- perfbench llm on the new endpoints ------------------------------------------------------------


@pytest.mark.parametrize("endpoint,model,seed", [("messages", "llm", 51), ("responses", "llm", 52),
                                                 ("chat", REASONING, 53)])
def test_perfbench_llm_ttft_against_the_record(twin, tokenizer_dir, tmp_path, endpoint, model, seed):
    reasoning = model == REASONING
    if reasoning:
        _need_reasoning(twin)
    osl = THINK + OSL if reasoning else OSL
    before = len(read_records(twin.record))
    out = tmp_path / "run"
    printed = run_tool([
        perfbench_bin(), "llm", "-m", model, "-u", twin.http_url, "--endpoint-type", endpoint,
        "--streaming", "--concurrency", "1", "--request-count", "6",
        "--synthetic-input-tokens-mean", "64", "--synthetic-input-tokens-stddev", "0",
        "--output-tokens-mean", str(osl), "--random-seed", str(seed),
        "--tokenizer", str(tokenizer_dir), "--artifact-dir", str(out),
    ])
    theirs = [json.loads(line) for line in (out / "profile_export.jsonl").read_text().splitlines() if line]
    assert len(theirs) == 6, printed[-2000:]
    assert all(not t.get("error") for t in theirs), [t["error"] for t in theirs if t.get("error")]
    by_id = {o["id"]: o for o in _new_records(twin, before)}
    pairs = [(t, by_id[t["metadata"]["x_request_id"]]) for t in theirs]
    for t, o in pairs:
        # Each prompt prefilled in full: TTFT is the long prefill step.
        assert o["cached_tokens"] == 0, o
        assert metric_ms(t, "input_sequence_length") == o["prompt_tokens"], (t["metrics"], o)
        assert metric_ms(t, "output_sequence_length") == o["completion_tokens"] == osl, (t["metrics"], o)
    ttft_theirs = statistics.mean(metric_ms(t, "time_to_first_token") for t, _ in pairs)
    ttft_ours = statistics.mean((o["first_chunk_ns"] - o["arrival_ns"]) / 1e6 for _, o in pairs)
    close_to_truth(f"TTFT ({endpoint} on {model})", ttft_theirs, ttft_ours, client="perfbench llm")
    if reasoning:
        # The first answer token is the one after the THINK reasoning tokens (AIPerf's name).
        ttfot_theirs = statistics.mean(metric_ms(t, "time_to_first_output_token") for t, _ in pairs)
        ttfot_ours = statistics.mean((o["chunk_ns"][THINK] - o["arrival_ns"]) / 1e6 for _, o in pairs)
        close_to_truth(f"TTFOT ({endpoint} on {model})", ttfot_theirs, ttfot_ours, client="perfbench llm")
