"""The drop-in corpus (issue 21) under pytest: pa_lines.txt through perf_analyzer and `perfbench
profile` against a real Triton, and through perf_analyzer against `perfbench serve`. Agreement may
not fall below pa_agreement_baseline.json; `pytest -s` (scripts/interop.sh does) prints the
headline and every disagreement. See pa_corpus.py for the rules and the standalone runner.

PA_CORPUS_BUDGET_S (default 1200) bounds each stage; PA_CORPUS_REPORT names a JSON file for every row.
"""

import json
import os
import re
from pathlib import Path

import pytest

import pa_corpus
from peers import free_port_block, pa_bin, perfbench_bin, start_perfbench, start_triton_repo

BUDGET_S = float(os.environ.get("PA_CORPUS_BUDGET_S", pa_corpus.STAGE_BUDGET_S))
PLACEHOLDERS = {"http", "grpc", "metrics", "tls", "dead", "data", "out"}


def test_corpus_is_well_formed():
    lines = pa_corpus.load_corpus()
    assert len(lines) >= 90
    for line in lines:
        text = " ".join(line.args)
        assert set(re.findall(r"\{(\w+)\}", text)) <= PLACEHOLDERS, line.id
        for path in re.findall(r"\{data\}/([\w./-]+)", text):
            assert (pa_corpus.DATA / path).exists() or "no_such" in path, f"{line.id}: {path}"
    # Both protocols, both shared-memory kinds, sync and async, good and bad lines.
    joined = [" ".join(line.args) for line in lines]
    for needle in ["{http}", "-i grpc", "--shared-memory system", "--shared-memory none", "--sync", "-a ",
                   "--streaming", "_valid", "-b 0", "--input-data {data}/dir_"]:
        assert any(needle in j or needle in " ".join(line.tags) for j, line in zip(joined, lines)), needle
    assert {line.expect for line in lines} == {"ok", "fail"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    work = tmp_path_factory.mktemp("pa-corpus")
    triton = start_triton_repo(work / "triton")
    serve = None
    tls = None
    try:
        serve = start_perfbench(work, pa_corpus.ZOO_MODELS)
        tls = pa_corpus.TlsListener(free_port_block(1))
        yield pa_corpus.Corpus([pa_bin()], [perfbench_bin()], pa_corpus.load_corpus(), triton, serve, tls.port,
                               free_port_block(1))
    finally:
        if tls is not None:
            tls.stop()
        if serve is not None:
            serve.stop()
        triton.stop()


def check_stage(corpus, name, capsys):
    stage = corpus.stage(name, BUDGET_S)
    # The table is the point of the run: shown even when the test passes.
    with capsys.disabled():
        print(f"\n{stage.headline()}\n{stage.table()}")
    report = os.environ.get("PA_CORPUS_REPORT")
    if report:
        path = Path(report)
        existing = json.loads(path.read_text()) if path.exists() else {}
        existing.update(pa_corpus.report_json([stage]))
        path.write_text(json.dumps(existing, indent=1))
    problems = pa_corpus.below_baseline(stage, pa_corpus.load_baseline())
    assert not problems, "\n".join(problems)


def test_profile_agrees_with_perf_analyzer(corpus, capsys):
    check_stage(corpus, "profile", capsys)


def test_perf_analyzer_on_serve_agrees_with_triton(corpus, capsys):
    check_stage(corpus, "serve", capsys)
