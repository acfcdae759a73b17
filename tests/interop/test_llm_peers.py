"""`perfbench llm` against AIPerf 0.13, and genai-perf 0.0.16 on `perfbench profile --service-kind
openai` (invoked as `perf_analyzer`) against genai-perf on the real perf_analyzer 2.50 (issue 31).
Every tool profiles the same `perfbench serve` llm twin with the same load; the numbers compared
come from each tool's own export (`perfbench llm` writes AIPerf's `profile_export_aiperf.json`).

The twin here takes 20 ms a step whatever its batch (no cost per sequence or prompt token: with
them a client that keeps fewer requests in flight, AIPerf with its 14-77 ms turnaround, got shorter
steps, an ITL 5.9% below perfbench's at 32 streams, a difference of load, not of timing), so the
server, not a client, is the bottleneck (32
streams make 1,600 events/s, which AIPerf's Python keeps up with on CI's two cores). Each
comparison prints its table. Tolerances, and the measurements behind them, are next to each test.

Runs under the AIPerf virtualenv (scripts/setup-genai-peers.sh installs genai-perf beside it;
scripts/interop-genai.sh runs this file); PERFBENCH_PA names the real perf_analyzer.
"""

import json
import os
import statistics
from pathlib import Path

import pytest

from peers import LOOPBACK, peers_dir, perfbench_bin, run_tool, start_perfbench, write_repository
from twin import train_tokenizer

ISL, OSL = 64, 32
STEP_US = 20_000


def _venv_bin(venv, name):
    path = peers_dir() / venv / "bin" / name
    if not path.exists():
        pytest.skip(f"{path} is not installed (scripts/setup-genai-peers.sh)")
    return path


@pytest.fixture(scope="module")
def llm_server(tmp_path_factory, tokenizer_dir):
    root = tmp_path_factory.mktemp("llm-peers")
    # The server counts `usage` with the tokenizer the peers count the text with (AIPerf counts
    # output tokens itself), so every tool's token counts are the same numbers.
    write_repository(root, {"llm": f"""
        backend: "llm"
        max_batch_size: 0
        model_transaction_policy {{ decoupled: true }}
        input [ {{ name: "text_input" data_type: TYPE_STRING dims: [ 1 ] }} ]
        output [ {{ name: "text_output" data_type: TYPE_STRING dims: [ -1 ] }} ]
        parameters {{ key: "step_us" value {{ string_value: "{STEP_US}" }} }}
        parameters {{ key: "decode_us_per_seq" value {{ string_value: "0" }} }}
        parameters {{ key: "prefill_us_per_token" value {{ string_value: "0" }} }}
        parameters {{ key: "tokenizer" value {{ string_value: "{tokenizer_dir / 'tokenizer.json'}" }} }}
        """})
    server = start_perfbench(root, ["llm"], repository=root)
    # The twin opens its tokenizer when the model loads, but the first requests still start its
    # batcher and warm its connections: they must not land in anyone's measurement.
    run_tool([perfbench_bin(), "llm", "-m", "llm", "-u", server.http_url, "--streaming",
              "--request-count", "2", "--output-tokens-mean", "2", "--artifact-dir", str(root / "warmup")])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """A small byte-level BPE as a Hugging Face tokenizer directory: the peers cannot download one."""
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def _load(path):
    return json.loads(Path(path).read_text())


def _print_table(title, names, rows):
    print(f"\n{title}")
    print("  " + "metric".ljust(36) + "".join(n.rjust(14) for n in names))
    for label, values in rows:
        print("  " + label.ljust(36) + "".join(f"{v:14.3f}" for v in values))


# --- AIPerf 0.13 and perfbench llm ---------------------------------------------------------------

REQUESTS = {1: 12, 8: 48, 32: 128}
# Measured on the loaded 2-core machine (git history of README.md, "Against AIPerf"), two runs at load 13 and 16:
# ITL p50 agreed within 2% in the first; in the second AIPerf, starved of CPU, read 1.6%, 6.8%
# and 4.6% above ours at 1, 8, 32 streams. A starved client only ever reads late, so perfbench
# may read at most 5% above AIPerf and at most STARVED below. TTFT and request latency also
# depend on each client's turnaround between one request's end and its session's next start
# (AIPerf's 17-77 ms, ours 0.1-0.3 ms; printed): in a closed loop the twin's TTFT follows where
# in its 20 ms step a request lands. So they get one step on top of the 5%, both ways at one
# stream (where AIPerf kept up: 4.4% and 1.9%), and one way (perfbench not later) at 8 and 32,
# where AIPerf's own client time reached +17 ms and +128 ms. Total tokens/s is printed, not held:
# a closed loop's includes the turnaround.
AGREEMENT = 0.05
STARVED = 0.10
STEP_PHASE_MS = STEP_US / 1000


def _turnaround_ms(out):
    """p50 of the gap between a request's start and the latest end before it (closed loop)."""
    lines = [json.loads(l) for l in next(Path(out).rglob("profile_export.jsonl")).read_text().splitlines() if l]
    ends = sorted(l["metadata"]["request_end_ns"] for l in lines)
    gaps = []
    for start in sorted(l["metadata"]["request_start_ns"] for l in lines):
        before = [e for e in ends if e <= start]
        if before:
            gaps.append((start - before[-1]) / 1e6)
    return statistics.median(gaps) if gaps else float("nan")


def _run_aiperf(server, tokenizer, concurrency, out):
    aiperf = _venv_bin("aiperf-venv", "aiperf")
    # AIPerf 0.13 must run without HF_HUB_OFFLINE: offline, it rejects a plain directory.
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    cmd = [str(aiperf), "profile", "-m", "llm", "--url", f"http://{server.http_url}",
           "--endpoint-type", "chat", "--streaming", "--concurrency", str(concurrency),
           "--request-count", str(REQUESTS[concurrency]), "--synthetic-input-tokens-mean", str(ISL),
           "--output-tokens-mean", str(OSL), "--extra-inputs", "ignore_eos:true", "--random-seed", "1",
           "--tokenizer", str(tokenizer), "--ui-type", "none", "--artifact-dir", str(out)]
    run_tool(cmd, env=env)
    found = list(Path(out).rglob("profile_export_aiperf.json"))
    assert found, f"AIPerf wrote no profile_export_aiperf.json under {out}"
    return _load(found[0])


def _run_perfbench(server, tokenizer, concurrency, out):
    cmd = [perfbench_bin(), "llm", "-m", "llm", "-u", server.http_url,
           "--endpoint-type", "chat", "--streaming", "--concurrency", str(concurrency),
           "--request-count", str(REQUESTS[concurrency]), "--synthetic-input-tokens-mean", str(ISL),
           "--output-tokens-mean", str(OSL), "--random-seed", "1", "--tokenizer", str(tokenizer),
           "--artifact-dir", str(out)]
    printed = run_tool(cmd)
    assert "Token counts: server usage" in printed, printed
    return _load(Path(out) / "profile_export_aiperf.json")


@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_llm_agrees_with_aiperf(llm_server, tokenizer_dir, tmp_path, concurrency):
    ours = _run_perfbench(llm_server, tokenizer_dir, concurrency, tmp_path / "perfbench")
    theirs = _run_aiperf(llm_server, tokenizer_dir, concurrency, tmp_path / "aiperf")
    compared = [("time_to_first_token", "p50"), ("inter_token_latency", "p50"), ("request_latency", "p50"),
                ("output_token_throughput_per_user", "p50"), ("output_token_throughput", "avg"),
                ("output_sequence_length", "avg")]
    rows = [(f"{tag} {stat}", [ours[tag][stat], theirs[tag][stat], ours[tag][stat] / theirs[tag][stat] - 1])
            for tag, stat in compared]
    turnaround = [_turnaround_ms(tmp_path / "perfbench"), _turnaround_ms(tmp_path / "aiperf")]
    rows.append(("turnaround p50 (ms)", [*turnaround, float("nan")]))
    _print_table(f"concurrency {concurrency}", ["perfbench llm", "AIPerf 0.13", "difference"], rows)
    for export in (ours, theirs):
        assert export["request_count"]["avg"] == REQUESTS[concurrency]
        assert export.get("error_request_count", {}).get("avg", 0) == 0
        assert export["output_sequence_length"]["avg"] == OSL
    for tag in ("inter_token_latency", "output_token_throughput_per_user"):
        a, b = ours[tag]["p50"], theirs[tag]["p50"]
        # Per user tokens/s is 1/ITL: a late client reads it low, so the bounds swap.
        over, under = (AGREEMENT, STARVED) if tag == "inter_token_latency" else (STARVED, AGREEMENT)
        assert -under * b <= a - b <= over * b, f"{tag} p50: perfbench {a:.3f}, AIPerf {b:.3f}"
    for tag in ("time_to_first_token", "request_latency"):
        a, b = ours[tag]["p50"], theirs[tag]["p50"]
        assert a - b <= AGREEMENT * b + STEP_PHASE_MS, f"{tag} p50: perfbench {a:.3f} above AIPerf {b:.3f}"
        if concurrency == 1:
            assert b - a <= AGREEMENT * b + STEP_PHASE_MS, f"{tag} p50: perfbench {a:.3f}, AIPerf {b:.3f}"


# --- genai-perf on perf_analyzer 2.50 and on perfbench as perf_analyzer --------------------------

GENAI_COMPARED = [("time_to_first_token", "p50"), ("inter_token_latency", "p50"),
                  ("request_latency", "p50"), ("output_token_throughput", "avg"),
                  ("request_throughput", "avg"), ("output_sequence_length", "avg")]
# Two runs of real perf_analyzer under genai-perf, against the same twin, on the 2-core machine
# with builds beside it, differed by up to 5% on these figures at load 2 (TTFT p50 14.96-15.71
# ms, request latency p50 247.6-258.6 ms) and by 11% (latency) and 28% (tokens/s) at load 16. So
# perfbench's mean of two runs must sit within 10% of real perf_analyzer's mean of two, or within
# twice the spread either tool showed against itself in this very test, if larger.
GENAI_FLOOR = 0.10


def _run_genai_perf(server, tokenizer, pa_dir, out):
    genai = _venv_bin("genai-venv", "genai-perf")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PATH=f"{pa_dir}:{os.environ['PATH']}")
    cmd = [str(genai), "profile", "-m", "llm", "--url", server.http_url,
           "--endpoint-type", "chat", "--streaming", "--concurrency", "4", "--request-count", "24",
           "--synthetic-input-tokens-mean", str(ISL), "--output-tokens-mean", str(OSL),
           "--extra-inputs", "ignore_eos:true", "--tokenizer", str(tokenizer),
           "--artifact-dir", str(out)]
    run_tool(cmd, env=env)
    found = list(Path(out).rglob("profile_export_genai_perf.json"))
    assert found, f"genai-perf wrote no profile_export_genai_perf.json under {out}"
    assert list(Path(out).rglob("profile_export_genai_perf.csv"))
    return _load(found[0])


def test_genai_perf_on_perfbench_agrees_with_genai_perf_on_perf_analyzer(llm_server, tokenizer_dir, tmp_path):
    real = Path(os.environ.get("PERFBENCH_PA", peers_dir() / "pa.sh"))
    if not real.exists():
        pytest.skip("the real perf_analyzer is not installed (scripts/setup-peers.sh)")
    bins = {"perf_analyzer 2.50": real, "perfbench": Path(perfbench_bin()).resolve()}
    runs = {name: [] for name in bins}
    for name, target in bins.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "perf_analyzer").symlink_to(target)
    # Interleaved, so a burst of load on the machine hits both tools alike.
    for i in range(2):
        for name in bins:
            runs[name].append(_run_genai_perf(llm_server, tokenizer_dir, tmp_path / name, tmp_path / f"{name}-{i}"))
    real_runs, our_runs = runs["perf_analyzer 2.50"], runs["perfbench"]
    rows = []
    for tag, stat in GENAI_COMPARED:
        r = [x[tag][stat] for x in real_runs]
        o = [x[tag][stat] for x in our_runs]
        rows.append((f"{tag} {stat}", [*r, *o]))
    _print_table("genai-perf: on perf_analyzer 2.50 (two runs), on perfbench (two runs)",
                 ["pa run 1", "pa run 2", "perfbench 1", "perfbench 2"], rows)
    for export in (*real_runs, *our_runs):
        assert export["request_count"]["avg"] == 24
        assert export["input_sequence_length"]["avg"] == ISL
    for (label, (r1, r2, o1, o2)) in rows:
        real_mean, our_mean = (r1 + r2) / 2, (o1 + o2) / 2
        noise = 2 * max(abs(r1 - r2), abs(o1 - o2))
        bound = max(GENAI_FLOOR * real_mean, noise)
        assert abs(our_mean - real_mean) <= bound, f"{label}: perfbench {our_mean:.3f}, perf_analyzer {real_mean:.3f}"
