"""NVIDIA perf_analyzer (the real binary) against `perfbench serve` (issue 2, acceptance 1).

perf_analyzer reads our statistics extension before and after each window to fill its server
columns, registers system shared memory through our extension, and drives HTTP and gRPC. A run
that completes and writes server columns that add up shows it understands our server.
"""

import json
import random

import pytest

import subprocess

from peers import (DELAY_US, HERE, QUICK, SHORT_TIME_WINDOWS, PeerRunError, TlsFiles, http_status, pa_bin, read_pa_csv, run_pa,
                   run_tool, start_perfbench)

SERVER_STAGES = ["Server Queue", "Server Compute Input", "Server Compute Infer",
                 "Server Compute Output"]
PROTOCOLS = ["http", "grpc"]


def server_us(row):
    return sum(row[c] for c in SERVER_STAGES)


def assert_measured(rows, concurrencies, server_share=True):
    # perf_analyzer orders its rows by throughput, not by concurrency.
    assert sorted(int(r["Concurrency"]) for r in rows) == concurrencies
    for row in rows:
        assert row["Inferences/Second"] > 0, row
        assert row["p50 latency"] > 0, row
        assert all(row[c] >= 0 for c in SERVER_STAGES), row
        # The columns are whole µs. A model with real compute always shows a server share;
        # identity may not: an idle instance runs it inline on the receiving thread in well
        # under 1 µs (queue and compute together), which prints as 0. The delay model
        # (test_delay_compute_infer_matches_config) checks that Server Compute Infer is real.
        if server_share:
            assert server_us(row) > 0, row


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_identity_concurrency_sweep(perfbench_zoo, tmp_path, protocol):
    rows, _ = run_pa(
        perfbench_zoo, "identity", protocol, tmp_path / "pa.csv",
        ["--shape", "INPUT0:16", "--concurrency-range", "1:8:1", *SHORT_TIME_WINDOWS],
    )
    assert_measured(rows, list(range(1, 9)), server_share=False)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_identity_system_shared_memory(perfbench_zoo, tmp_path, protocol):
    # 16 FP32 = 64 bytes of output per request, written by the server into a region.
    rows, _ = run_pa(
        perfbench_zoo, "identity", protocol, tmp_path / "pa.csv",
        ["--shape", "INPUT0:16", "--shared-memory", "system",
         "--output-shared-memory-size", "64", "--concurrency-range", "1:8:7", *SHORT_TIME_WINDOWS],
    )
    assert_measured(rows, [1, 8])
    # perf_analyzer unregisters its regions when it exits.
    status = perfbench_zoo.get_json("/v2/systemsharedmemory/status")
    assert status == [], status


def bert_input_data(path, seq=384, vocab=30522):
    """perf_analyzer's JSON input format: one realistic sample (ids in range, a padded tail)."""
    rng = random.Random(7)
    used = 200
    sample = {
        "input__0": [rng.randrange(vocab) for _ in range(used)] + [0] * (seq - used),
        "input__1": [0] * 100 + [1] * (used - 100) + [0] * (seq - used),
        "input__2": [1] * used + [0] * (seq - used),
    }
    path.write_text(json.dumps({"data": [sample]}))
    return path


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bert(perfbench_zoo, tmp_path, protocol):
    # bert costs a few GFLOP per request on the CPU: small windows, concurrency 1 and 2.
    data = bert_input_data(tmp_path / "bert.json")
    rows, _ = run_pa(
        perfbench_zoo, "bert", protocol, tmp_path / "pa.csv",
        ["--input-data", str(data), "--concurrency-range", "1:2:1",
         "--measurement-mode", "count_windows", "--measurement-request-count", "6",
         "-s", "100", "-r", "10"],
    )
    assert_measured(rows, [1, 2])
    for row in rows:
        # Real compute: milliseconds of encoder per request.
        assert row["Server Compute Infer"] > 100, row
    # Gathering and scattering a request's few KB can average under 1 µs, which perf_analyzer's
    # whole-µs CSV prints as 0; the statistics extension (ns) shows every stage was timed.
    stats = perfbench_zoo.get_json("/v2/models/bert/stats")["model_stats"][0]["inference_stats"]
    for stage in ["compute_input", "compute_infer", "compute_output"]:
        assert int(stats[stage]["ns"]) > 0, stats


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_delay_compute_infer_matches_config(perfbench_delay, tmp_path, protocol):
    rows, _ = run_pa(
        perfbench_delay, "delay", protocol, tmp_path / "pa.csv",
        ["--shape", "INPUT0:16", "--concurrency-range", "1",
         "--measurement-mode", "count_windows", "--measurement-request-count", "20",
         "-s", "100", "-r", "10"],
    )
    assert_measured(rows, [1])
    infer_us = rows[0]["Server Compute Infer"]
    assert abs(infer_us - DELAY_US) <= 0.10 * DELAY_US, (
        f"Server Compute Infer {infer_us} µs, configured {DELAY_US} µs"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ssl_flags_against_a_tls_server(tmp_path, protocol):
    """perf_analyzer's own --ssl-* flags against `perfbench serve --tls-cert/--tls-key` on a
    throwaway CA (issue 13): given the CA it profiles over HTTPS and gRPC over TLS; without it,
    its verification refuses our certificate and it exits non-zero at once."""
    tls = TlsFiles(tmp_path)
    server = start_perfbench(tmp_path, ["identity"], tls=tls)
    try:
        if protocol == "http":
            url = f"https://{server.http_url}"
            verify = ["--ssl-https-verify-peer", "1", "--ssl-https-verify-host", "2"]
            trust = ["--ssl-https-ca-certificates-file", str(tls.ca)]
        else:
            url = server.grpc_url
            verify = ["--ssl-grpc-use-ssl"]
            trust = ["--ssl-grpc-root-certifications-file", str(tls.ca)]
        cmd = [pa_bin(), "-m", "identity", "-u", url, "-i", protocol, "--shape", "INPUT0:16", *verify]
        csv_path = tmp_path / "pa.csv"
        run_tool([*cmd, *trust, "-f", str(csv_path), *QUICK])
        assert_measured(read_pa_csv(csv_path), [1], server_share=False)

        refused = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        out = refused.stdout.decode(errors="replace")
        assert refused.returncode != 0, out
        assert "certificate" in out.lower(), out
        # The failed handshake cost the server nothing: it still answers.
        ready = f"https://{server.http_url}/v2/models/identity/ready"
        assert http_status(ready, context=server.tls_context) == 200
    finally:
        server.stop()


# --- stateful sequences (issue 15): the zoo's `accumulate` ----------------------------------

DATA = HERE / "data"


@pytest.fixture(scope="module")
def perfbench_accumulate(tmp_path_factory):
    """`perfbench serve` with the zoo's sequence model `accumulate` (running sum per sequence)."""
    server = start_perfbench(tmp_path_factory.mktemp("accumulate"), ["accumulate"])
    yield server
    server.stop()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sequence_validation_data(perfbench_accumulate, tmp_path, protocol):
    # perf_analyzer checks every response against the running sums of validation_data and
    # exits non-zero on a mismatch during measurement. One load level per run: when a level ends
    # mid-sequence, perf_analyzer 2.50 completes the sequence by jumping to the stream's last step
    # (CompleteOngoingSequence) and compares in-flight answers with that step, whatever the
    # server (Triton's answers trip it too). After the last level that only prints a mismatch and
    # exits 0; between two levels it would fail the next one.
    rows, _ = run_pa(
        perfbench_accumulate, "accumulate", protocol, tmp_path / "pa.csv",
        ["--input-data", str(DATA / "accumulate_seq_valid.json"), "--concurrency-range", "4",
         *QUICK],
    )
    assert_measured(rows, [4])


def test_sequence_wrong_validation_data_fails(perfbench_accumulate, tmp_path):
    # The negative control: sums that ignore the sequence (no running total) must fail.
    data = json.loads((DATA / "accumulate_seq_valid.json").read_text())
    data["validation_data"] = [[{"OUTPUT0": step["INPUT0"]} for step in stream]
                               for stream in data["data"]]
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(data))
    with pytest.raises(PeerRunError) as err:
        run_pa(perfbench_accumulate, "accumulate", "grpc", tmp_path / "pa.csv",
               ["--input-data", str(wrong), *QUICK])
    assert "Output doesn't match expected output" in str(err.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sequence_length(perfbench_accumulate, tmp_path, protocol):
    rows, _ = run_pa(
        perfbench_accumulate, "accumulate", protocol, tmp_path / "pa.csv",
        ["--sequence-length", "5", "--concurrency-range", "4", *QUICK],
    )
    assert_measured(rows, [4])


# --- ensembles (issue G): seed 003's twin `dlrm_hps` and the 2-step identity `ensemble` ----------

@pytest.fixture(scope="module")
def perfbench_ensembles(tmp_path_factory):
    """`perfbench serve` with the zoo's ensembles; their composing models load as dependencies."""
    server = start_perfbench(tmp_path_factory.mktemp("ensembles"), ["dlrm_hps", "ensemble"])
    yield server
    server.stop()


def composing_blocks(output):
    """perf_analyzer's "Composing models:" blocks: {model: [inference count per load level]}."""
    counts = {}
    lines = output.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Composing models:":
            for j in range(i + 1, len(lines)):
                text = lines[j].strip()
                if text.endswith(", version: 1"):
                    name = text.split(",")[0]
                    count = lines[j + 1].strip()
                    assert count.startswith("Inference count:"), lines[j:j + 2]
                    counts.setdefault(name, []).append(int(count.split(":")[1]))
                elif text and not text.startswith(("Inference", "Execution", "Successful", "Avg")):
                    break
    return counts


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ensemble_lists_its_composing_models(perfbench_ensembles, tmp_path, protocol):
    rows, output = run_pa(perfbench_ensembles, "dlrm_hps", protocol, tmp_path / "pa.csv",
                          ["--concurrency-range", "1:2:1", *QUICK])
    assert_measured(rows, [1, 2])
    counts = composing_blocks(output)
    assert sorted(counts) == ["dlrm_dense", "embedding_lookup"], output[-3000:]
    for name, per_level in counts.items():
        assert len(per_level) == 2 and all(n > 0 for n in per_level), (name, per_level)
    # Each ensemble request ran once in each composing model.
    stats = {m["name"]: m for m in perfbench_ensembles.get_json("/v2/models/stats")["model_stats"]}
    ensemble = int(stats["dlrm_hps"]["inference_count"])
    assert ensemble > 0
    for name in counts:
        assert int(stats[name]["inference_count"]) == ensemble, (name, stats[name]["inference_count"], ensemble)


def test_identity_ensemble_counts_both_steps_with_shared_memory(perfbench_ensembles, tmp_path):
    # Inputs and outputs in system shared memory: the ensemble reads and writes the regions.
    _, output = run_pa(perfbench_ensembles, "ensemble", "grpc", tmp_path / "pa.csv",
                       ["--shape", "INPUT0:16", "--shared-memory", "system",
                        "--output-shared-memory-size", "64", *QUICK])
    counts = composing_blocks(output)
    assert list(counts) == ["identity"], output[-3000:]
    stats = {m["name"]: m for m in perfbench_ensembles.get_json("/v2/models/stats")["model_stats"]}
    assert int(stats["identity"]["inference_count"]) == 2 * int(stats["ensemble"]["inference_count"])
