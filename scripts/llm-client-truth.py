#!/usr/bin/env python3
"""Measures generative clients against the server's own clock (issue 31): `perfbench llm` and
AIPerf 0.13 stream chat from one `perfbench serve` llm twin that records, per request, when it
arrived and when its HTTP front end read the first chunk to write it out (`--record-requests`,
CLOCK_MONOTONIC; `first_read_ns`, else the model's `first_chunk_ns` when the request finished
before the front end read it). Joined by X-Request-ID, each request's TTFT error is

    client TTFT - (server first chunk read - server arrival) - loopback round trip

where the round trip is measured here (a 1 KiB request, a 300-byte answer, on a TCP loopback
socket with TCP_NODELAY: what the request and the first chunk cross besides the two programs).
The server's own hand-over, from the model's first chunk to the front end's reading of it (a
wake-up of another thread), is printed beside it: it was part of the error before the record
carried the reading. It also prints each client's CPU time (user + system, from the kernel's child accounting) per
SSE event received, for the same load.

Run under the AIPerf virtualenv (scripts/setup-genai-peers.sh):
  $PEERS/aiperf-venv/bin/python scripts/llm-client-truth.py [--concurrency 1 64] [--tools perfbench aiperf]
Prints a markdown table; numbers are of this machine, at the load it had (say so when quoting).
"""

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("PERFBENCH_PEERS", Path.home() / ".cache" / "perfbench-peers"))
LOOPBACK = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def percentile(values, p):
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(p / 100 * (len(values) - 1))))
    return values[k]


def loopback_round_trip_us(samples=2000):
    """p50 of a 1 KiB ping and a 300-byte pong over loopback TCP (a thread echoes)."""
    listener = socket.socket()
    listener.bind((LOOPBACK, 0))
    listener.listen(1)

    def echo():
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                got = 0
                while got < 1024:
                    data = conn.recv(4096)
                    if not data:
                        return
                    got += len(data)
                conn.sendall(b"x" * 300)

    threading.Thread(target=echo, daemon=True).start()
    client = socket.create_connection(listener.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(samples):
        t0 = time.monotonic_ns()
        client.sendall(b"y" * 1024)
        got = 0
        while got < 300:
            got += len(client.recv(4096))
        rtts.append((time.monotonic_ns() - t0) / 1e3)
    client.close()
    listener.close()
    return statistics.median(rtts)


class Server:
    def __init__(self, perfbench, workdir):
        self.port = free_port()
        self.record = Path(workdir) / "requests.jsonl"
        cmd = [perfbench, "serve", "--host", LOOPBACK, "--http-port", str(self.port), "--grpc-port",
               str(free_port()), "--metrics-port", str(free_port()), "--models", "llm",
               "--record-requests", str(self.record)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://{LOOPBACK}:{self.port}/v2/models/llm/ready", timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("perfbench serve did not become ready")

    def records(self):
        return {r["id"]: r for r in map(json.loads, self.record.read_text().splitlines())}

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=15)


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ms(metric):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3, "sec": 1e3}[metric.get("unit", "ms")]
    return metric["value"] * scale


def run_tool(tool, args, server, concurrency, requests, out, tokenizer):
    load = ["--streaming", "--concurrency", str(concurrency), "--request-count", str(requests),
            "--synthetic-input-tokens-mean", str(args.isl), "--output-tokens-mean", str(args.osl),
            "--random-seed", "1"]
    if tool == "perfbench":
        cmd = [args.perfbench, "llm", "-m", "llm", "-u", f"{LOOPBACK}:{server.port}", "--endpoint-type", "chat",
               *load, "--artifact-dir", str(out)]
        env = os.environ
    else:
        cmd = [str(PEERS / "aiperf-venv" / "bin" / "aiperf"), "profile", "-m", "llm", "--url",
               f"http://{LOOPBACK}:{server.port}", "--endpoint-type", "chat", *load,
               "--extra-inputs", "ignore_eos:true", "--tokenizer", str(tokenizer), "--ui-type", "none",
               "--artifact-dir", str(out)]
        # AIPerf 0.13 rejects a plain tokenizer directory in offline mode.
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    if args.cpu is not None:
        cmd = ["taskset", "-c", args.cpu, *cmd]
    before = child_cpu_s()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=900)
    cpu = child_cpu_s() - before
    export = next(Path(out).rglob("profile_export.jsonl"))
    theirs = [json.loads(line) for line in export.read_text().splitlines() if line.strip()]
    ours = server.records()
    errors, handovers, events = [], [], 0
    for t in theirs:
        o = ours.get(t["metadata"]["x_request_id"])
        if o is None or t.get("error"):
            continue
        first = o.get("first_read_ns") or o["first_chunk_ns"]
        if o.get("first_read_ns"):
            handovers.append((o["first_read_ns"] - o["first_chunk_ns"]) / 1e3)
        server_ttft_ms = (first - o["arrival_ns"]) / 1e6
        errors.append((ms(t["metrics"]["time_to_first_token"]) - server_ttft_ms) * 1e3)
        events += o["completion_tokens"]
    return errors, handovers, cpu, events, len(theirs)


def hand_over(handovers, requests):
    """The server's hand-over percentiles, and how many records lacked the front end's reading."""
    if not handovers:
        return "n/a"
    missing = requests - len(handovers)
    text = f"{percentile(handovers, 50):.0f} / {percentile(handovers, 99):.0f}"
    return text + (f" ({missing} without)" if missing else "")


def tokenizer_dir(workdir):
    """A small byte-level BPE as a Hugging Face tokenizer directory (AIPerf cannot download one)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"], show_progress=False)
    tok.train_from_iterator([(ROOT / "src" / "server" / "llm" / "corpus.txt").read_text()] * 3, trainer)
    out = Path(workdir) / "tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(out))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--perfbench", default=str(ROOT / "target" / "debug" / "perfbench"))
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    p.add_argument("--tools", nargs="+", default=["perfbench", "aiperf"], choices=["perfbench", "aiperf"])
    p.add_argument("--requests-per-stream", type=int, default=10)
    p.add_argument("--isl", type=int, default=64)
    p.add_argument("--osl", type=int, default=32)
    p.add_argument("--cpu", help="taskset CPU list for the clients (the server runs where it likes)")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llm-truth-"))
    try:
        tokenizer = tokenizer_dir(work) if "aiperf" in args.tools else None
        server = Server(args.perfbench, work)
        try:
            run_tool("perfbench", args, server, 4, 16, work / "warmup", tokenizer)
            hop = loopback_round_trip_us()
            print(f"loopback round trip (1 KiB out, 300 B back), p50: {hop:.1f} µs; subtracted below")
            print()
            print("| client | streams | requests | TTFT error p50 (µs) | p90 | p99 | max | client CPU per event (µs) "
                  "| server hand-over p50 / p99 (µs) |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            for c in args.concurrency:
                for tool in args.tools:
                    out = work / f"{tool}-{c}"
                    errors, handovers, cpu, events, n = run_tool(tool, args, server, c, c * args.requests_per_stream, out,
                                                      tokenizer)
                    e = [x - hop for x in errors]
                    print(f"| {tool} | {c} | {len(e)}/{n} | {percentile(e, 50):.0f} | {percentile(e, 90):.0f} | "
                          f"{percentile(e, 99):.0f} | {max(e):.0f} | {cpu / max(events, 1) * 1e6:.1f} | "
                          f"{hand_over(handovers, len(errors))} |", flush=True)
        finally:
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
