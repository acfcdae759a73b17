"""Stateful sequences against a real Triton (issue 15, "check against the real thing").

A real Triton (the tritonserver of the pytriton wheel, run on a plain model repository) serves
two python-backend sequence models built here from the repository's `accumulate`:
  - `accumulate`: OUTPUT0 is the running sum of INPUT0 over the sequence, keyed by CORRID;
  - `accumulate_sleep`: the same, sleeping SLEEP_MS per execution, its instance waiting
    DIRECT_DELAY_US to batch the live sequences, so the server is the bottleneck and both clients
    must see the same throughput.

Checks:
  - `perfbench profile --validate-outputs` drives sequences over HTTP, gRPC and gRPC streaming
    and every answer is the running sum the client expects (zero mismatches: exit 0);
  - the same with the JSON streams of `data/accumulate_seq_valid.json` (validation_data);
  - perfbench's rows agree with perf_analyzer's `--sequence-length` run on `accumulate_sleep`:
    throughput, p50 and Server Compute Infer within perf_analyzer's own noise.
"""

import re
import shutil

import pytest

from peers import HERE, PeerRunError, perfbench_bin, read_pa_csv, run_pa, run_tool, start_triton_repo

SLEEP_MS = 20
DIRECT_DELAY_US = 5000
TOLERANCE = 0.15
COLUMNS = ["Inferences/Second", "p50 latency", "Server Compute Infer"]

SLEEP_MODEL = f'''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Running sum per sequence (keyed by CORRID, reset at START); one sleep per execution."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.input = config["input"][0]["name"]
        self.output = config["output"][0]["name"]
        self.sums = {{}}

    def execute(self, requests):
        time.sleep({SLEEP_MS} / 1000)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            key = int(pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy().flatten()[0])
            total = (0 if int(start.flatten()[0]) else self.sums.get(key, 0)) + int(x.flatten()[0])
            self.sums[key] = total
            out = np.full(x.shape, total, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor(self.output, out)]))
        return responses
'''


@pytest.fixture(scope="module")
def triton_sequences(tmp_path_factory):
    """Triton serving `accumulate` (the repository's) and `accumulate_sleep`."""
    repo = tmp_path_factory.mktemp("sequence-repo")
    source = HERE / "models" / "accumulate"
    shutil.copytree(source, repo / "accumulate")
    config = (source / "config.pbtxt").read_text()
    sleep = repo / "accumulate_sleep"
    (sleep / "1").mkdir(parents=True)
    # The instance waits DIRECT_DELAY_US for the live sequences' next steps, so all four batch
    # together every time. Without it (max_queue_delay 0) the first step to arrive runs alone
    # and the others wait a whole execution; which split a closed loop settles into depends on
    # microseconds of client timing (over gRPC perfbench settled into 23 ms or 43 ms p50 from run
    # to run, perf_analyzer 43 ms), so throughput would measure that split, not the clients.
    direct = (f"sequence_batching {{\n  direct {{ max_queue_delay_microseconds: {DIRECT_DELAY_US} "
              "minimum_slot_utilization: 1.0 }")
    assert config.count("sequence_batching {") == 1
    sleep_config = config.replace("sequence_batching {", direct)
    (sleep / "config.pbtxt").write_text(f'name: "accumulate_sleep"\n{sleep_config}')
    (sleep / "1" / "model.py").write_text(SLEEP_MODEL)
    server = start_triton_repo(tmp_path_factory.mktemp("triton-seq"), repo=repo,
                               models=["accumulate", "accumulate_sleep"])
    yield server
    server.stop()


def input_name():
    config = (HERE / "models" / "accumulate" / "config.pbtxt").read_text()
    return re.search(r'input \[ \{ name: "(\w+)"', config).group(1)


def profile(server, model, protocol, args, csv_path=None):
    cmd = [perfbench_bin(), "profile", "-m", model, "-u", server.url(protocol), "-i", protocol,
           *args]
    if csv_path is not None:
        cmd += ["-f", str(csv_path)]
    return run_tool(cmd)


QUICK = ["--measurement-mode", "count_windows", "--measurement-request-count", "100",
         "-s", "60", "-r", "10"]

STREAMS = [("http", []), ("grpc", []), ("grpc", ["--streaming"])]


@pytest.mark.parametrize("protocol,extra", STREAMS, ids=["http", "grpc", "grpc-streaming"])
def test_running_sums_are_right_on_triton(triton_sequences, protocol, extra):
    out = profile(triton_sequences, "accumulate", protocol,
                  ["--sequence-length", "20", "--concurrency-range", "4", "--validate-outputs",
                   *QUICK, *extra])
    assert "Inferences/Second" in out or "Throughput" in out, out[-2000:]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_json_streams_with_validation_data_on_triton(triton_sequences, protocol):
    data = HERE / "data" / "accumulate_seq_valid.json"
    if input_name() not in data.read_text():
        pytest.skip("accumulate_seq_valid.json names other tensors than the model")
    profile(triton_sequences, "accumulate", protocol,
            ["--input-data", str(data), "--concurrency-range", "2", *QUICK])


def test_wrong_running_sums_fail_the_run(triton_sequences, tmp_path):
    """validation_data that is not the running sum: perfbench ends non-zero and says so."""
    name = input_name()
    out_name = name.replace("INPUT", "OUTPUT")
    wrong = tmp_path / "wrong.json"
    wrong.write_text(
        '{"data": [[{"%s": [1]}, {"%s": [2]}]], "validation_data": [[{"%s": [1]}, {"%s": [4]}]]}'
        % (name, name, out_name, out_name))
    with pytest.raises(PeerRunError) as failed:
        profile(triton_sequences, "accumulate", "http", ["--input-data", str(wrong), *QUICK])
    assert "doesn't match expected output" in str(failed.value).lower() or \
        "mismatch" in str(failed.value).lower(), str(failed.value)[-2000:]


def disagreements(pa_row, pb_row):
    out = []
    for col in COLUMNS:
        pa_v, pb_v = pa_row[col], pb_row[col]
        if abs(pb_v - pa_v) > TOLERANCE * max(pa_v, 1):
            out.append(f"{col}: perf_analyzer {pa_v}, perfbench {pb_v}")
    return out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_rows_agree_with_perf_analyzer(triton_sequences, tmp_path, protocol):
    args = ["--sequence-length", "5", "--concurrency-range", "4",
            "--measurement-mode", "count_windows", "--measurement-request-count", "100",
            "-s", "20", "-r", "10"]
    attempts = []
    for attempt, order in enumerate([("pa", "pb"), ("pb", "pa"), ("pa", "pb")]):
        rows = {}
        for tool in order:
            csv_path = tmp_path / f"{tool}-{attempt}.csv"
            try:
                if tool == "pa":
                    rows[tool] = run_pa(triton_sequences, "accumulate_sleep", protocol, csv_path,
                                        args)[0][0]
                else:
                    profile(triton_sequences, "accumulate_sleep", protocol, args, csv_path)
                    rows[tool] = read_pa_csv(csv_path)[0]
            except PeerRunError as e:
                if tool == "pa" and "Failed to obtain stable measurement" in str(e):
                    attempts.append(["perf_analyzer found no stable measurement"])
                    break
                pytest.fail(f"{tool} failed: {e}")
        if len(rows) < 2:
            continue
        problems = disagreements(rows["pa"], rows["pb"])
        print(f"\naccumulate_sleep {protocol} attempt {attempt + 1}: " + ", ".join(
            f"{c} perf_analyzer {rows['pa'][c]} perfbench {rows['pb'][c]}" for c in COLUMNS))
        attempts.append(problems)
        if not problems:
            return
    pytest.fail(f"perfbench and perf_analyzer disagree by more than {TOLERANCE:.0%}: {attempts}")
