"""`perfbench search` against a real Triton in explicit model-control mode (issue 16).

Triton (the tritonserver of the pytriton wheel) serves `sleep`: a python-backend identity that
sleeps SLEEP_MS per execution, whatever its batch, so batching pays. A brute search over instance
count and max_batch_size applies each configuration through Triton's repository API (`load` with
a `config` parameter) and must:
  - run to the end and write its folder (search.csv, search.md, the Pareto plot, and
    best/sleep/config.pbtxt, which a Triton repository takes as it is);
  - leave the model with its original configuration (max_batch_size, instances, batcher).
Short count windows and a small space keep it under a minute and a half.
"""

import json
import urllib.request

import pytest

from peers import HERE, perfbench_bin, run_tool, start_triton_repo

SLEEP_MS = 5

SLEEP_MODEL = f'''
import triton_python_backend_utils as pb_utils
import time


class TritonPythonModel:
    """Output = input; one sleep of {SLEEP_MS} ms per execution, whatever its batch."""

    def execute(self, requests):
        time.sleep({SLEEP_MS} / 1000)
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
'''


@pytest.fixture(scope="module")
def triton_sleep(tmp_path_factory):
    repo = tmp_path_factory.mktemp("search-repo")
    (repo / "sleep" / "1").mkdir(parents=True)
    config = (HERE / "models" / "identity" / "config.pbtxt").read_text()
    # Unbatched by default: max_batch_size 4, one instance.
    config = config.replace("max_batch_size: 64", "max_batch_size: 4")
    (repo / "sleep" / "config.pbtxt").write_text(f'name: "sleep"\n{config}')
    (repo / "sleep" / "1" / "model.py").write_text(SLEEP_MODEL)
    server = start_triton_repo(tmp_path_factory.mktemp("triton-search"), repo=repo, models=["sleep"])
    yield server
    server.stop()


def model_config(server):
    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/sleep/config", timeout=30) as r:
        return json.loads(r.read())


def shape(config):
    """What the search varies: max_batch_size, instances, the batcher."""
    return (config.get("max_batch_size"),
            sum(int(g.get("count", 1)) for g in config.get("instance_group", [])),
            json.dumps(config.get("dynamic_batching"), sort_keys=True))


def test_search_on_triton_runs_to_the_end_and_restores_the_config(triton_sleep, tmp_path):
    before = model_config(triton_sleep)
    out = tmp_path / "search"
    log = run_tool([
        perfbench_bin(), "search", "-m", "sleep", "-u", triton_sleep.http_url,
        "--latency-budget", "p99=500ms", "--mode", "brute",
        "--instances", "1,2", "--max-batch-size", "4,16", "--concurrency", "1,16",
        "--shape", "INPUT0:4", "--measurement-mode", "count_windows",
        "--measurement-request-count", "30", "-s", "50", "-r", "5", "--out", str(out),
    ], timeout_s=150)
    print(log[-2000:])
    for name in ["search.csv", "search.md", "plots/search_pareto.png", "plots/search_pareto.svg",
                 "best/sleep/config.pbtxt"]:
        assert (out / name).is_file(), f"{name} missing:\n{log[-2000:]}"
    rows = (out / "search.csv").read_text().splitlines()
    assert rows[0].startswith("Default,Instances,Max Batch Size") and rows[0].endswith("Meets Budget")
    # The default and the four configurations of the grid, each with at least one row.
    configs = {tuple(r.split(",")[:3]) for r in rows[1:]}
    assert len(configs) == 5, rows
    best = (out / "best/sleep/config.pbtxt").read_text()
    assert 'backend: "python"' in best and "instance_group" in best, best
    assert shape(model_config(triton_sleep)) == shape(before)
