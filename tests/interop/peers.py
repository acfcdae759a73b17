"""Helpers of the interop suite: starting and stopping servers on loopback (perfbench serve, a
real Triton), running the clients (NVIDIA perf_analyzer, perfbench profile) and reading their CSV.

Environment (scripts/interop.sh sets it):
  PERFBENCH_BIN   the perfbench binary under test
  PERFBENCH_PA    a perf_analyzer launcher (scripts/setup-peers.sh writes $PEERS/pa.sh)
  INTEROP_PORT_BASE  first port tried for the servers started here (default 24000); every server
                  takes three consecutive free ports (http, grpc = +1, metrics = +2)

The fixtures in conftest.py stop every server started here, also when a test fails.
"""

import csv
import glob
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
LOOPBACK = "127.0.0.1"
# A server has this long to load its models (bert builds its weights; Triton starts Python stubs).
STARTUP_TIMEOUT_S = 180
# Upper bound on one perf_analyzer / perfbench profile run; a hung peer fails the test, not CI.
PEER_TIMEOUT_S = 300

_next_port = int(os.environ.get("INTEROP_PORT_BASE", "24000"))


def _port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port_block(count=3):
    """The first `count` consecutive free loopback ports at or after the last block handed out."""
    global _next_port
    for _ in range(1000):
        base = _next_port
        _next_port += count
        if all(_port_is_free(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free block of ports found")


def http_status(url, timeout_s=2.0, context=None):
    """HTTP status of a GET, or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError):
        return None


def _tail(path, lines=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Server:
    """A server process on loopback: http on `port`, grpc on `port + 1`, metrics on `port + 2`."""

    def __init__(self, name, cmd, port, log_path, ready_models, env=None, ca=None):
        self.name = name
        self.port = port
        # HTTPS when the server has a certificate; `ca` is the file that makes it trusted.
        self.scheme = "https" if ca else "http"
        self.tls_context = ssl.create_default_context(cafile=str(ca)) if ca else None
        self.log_path = log_path
        self.models = list(ready_models)
        log = open(log_path, "wb")
        # Own process group: teardown signals the server and everything it spawned.
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        log.close()

    @property
    def http_url(self):
        return f"{LOOPBACK}:{self.port}"

    @property
    def grpc_url(self):
        return f"{LOOPBACK}:{self.port + 1}"

    @property
    def metrics_url(self):
        return f"http://{LOOPBACK}:{self.port + 2}/metrics"

    def url(self, protocol):
        return self.grpc_url if protocol == "grpc" else self.http_url

    def get_json(self, path, timeout_s=10):
        """GET `path` from the HTTP front end, decoded."""
        url = f"{self.scheme}://{self.http_url}{path}"
        with urllib.request.urlopen(url, timeout=timeout_s, context=self.tls_context) as resp:
            return json.load(resp)

    def wait_ready(self, timeout_s=STARTUP_TIMEOUT_S):
        """Waits until every model answers ready (the server's own readiness comes earlier)."""
        deadline = time.monotonic() + timeout_s
        pending = list(self.models)
        while pending:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} while starting:\n"
                    + _tail(self.log_path)
                )
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.name}: models {pending} not ready after {timeout_s} s:\n"
                    + _tail(self.log_path)
                )
            url = f"{self.scheme}://{self.http_url}/v2/models/{pending[0]}/ready"
            if http_status(url, context=self.tls_context) == 200:
                pending.pop(0)
            else:
                time.sleep(0.25)
        return self

    def stop(self, grace_s=15):
        if self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=grace_s)


def perfbench_bin():
    path = os.environ.get("PERFBENCH_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("PERFBENCH_BIN must name the perfbench binary (run scripts/interop.sh)")
    return path


def pa_bin():
    path = os.environ.get("PERFBENCH_PA")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("PERFBENCH_PA must name perf_analyzer (run scripts/setup-peers.sh)")
    return path


def start_perfbench(log_dir, models, repository=None, tls=None, extra_args=()):
    """Starts `perfbench serve` on free ports and waits until `models` are ready; `tls` (from
    make_tls_files) serves HTTPS and gRPC over TLS; `extra_args` go to `perfbench serve`."""
    port = free_port_block()
    cmd = [
        perfbench_bin(), "serve", "--host", LOOPBACK,
        "--http-port", str(port), "--grpc-port", str(port + 1), "--metrics-port", str(port + 2),
        "--models", ",".join(models),
    ]
    if repository is not None:
        cmd += ["--model-repository", str(repository)]
    if tls is not None:
        cmd += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
    cmd += list(extra_args)
    log = Path(log_dir) / f"perfbench-serve-{port}.log"
    server = Server("perfbench serve", cmd, port, log, models, ca=tls.ca if tls else None)
    try:
        return server.wait_ready()
    except Exception:
        server.stop()
        raise


class TlsFiles:
    """A throwaway CA and a server certificate it signed for 127.0.0.1 and localhost."""

    def __init__(self, directory):
        d = Path(directory)
        self.ca, self.cert, self.key = d / "ca.pem", d / "server.pem", d / "server.key"
        ca_key, csr, ext = d / "ca.key", d / "server.csr", d / "server.ext"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
                       "extendedKeyUsage=serverAuth\n")
        for cmd in (
            ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", self.ca,
             "-days", "2", "-subj", "/CN=perfbench interop CA"],
            ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", self.key, "-out", csr,
             "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", ca_key, "-CAcreateserial",
             "-out", self.cert, "-days", "2", "-extfile", ext],
        ):
            subprocess.run(["openssl", *map(str, cmd)], check=True, capture_output=True)


def peers_dir():
    """Where scripts/setup-peers.sh installed the peers (its virtualenv holds the Triton wheel)."""
    return Path(os.environ.get("PERFBENCH_PEERS", Path.home() / ".cache" / "perfbench-peers"))


# The model repository the real Triton serves in the drop-in suite (python-backend models).
TRITON_REPO = HERE / "models"
TRITON_REPO_MODELS = sorted(p.name for p in TRITON_REPO.iterdir() if (p / "config.pbtxt").is_file())


def start_triton_repo(run_dir, repo=TRITON_REPO, models=None):
    """The tritonserver binary of the nvidia-pytriton wheel, run directly on a plain model
    repository of python-backend models (ensembles, sequence batching, decoupled models), with a
    trace file so clients may change the trace settings. Returns the ready `Server`."""
    peers = peers_dir()
    python = peers / "venv" / "bin" / "python"
    site = Path(glob.glob(str(peers / "venv" / "lib" / "python3*" / "site-packages"))[0])
    wheel = site / "pytriton" / "tritonserver"
    probe = "import sys, sysconfig; print(f'{sys.version_info[0]}.{sys.version_info[1]}'); print(sysconfig.get_config_var('LIBDIR'))"
    pyver, pylib = subprocess.run([str(python), "-c", probe], capture_output=True, text=True,
                                  check=True).stdout.split()
    run_dir = Path(run_dir)
    backends = run_dir / "backends"
    if backends.exists():
        shutil.rmtree(backends)
    shutil.copytree(wheel / "backends", backends)
    # The python backend looks for its stub next to libtriton_python.so; the wheel keeps one per Python.
    shutil.copy(wheel / "python_backend_stubs" / pyver / "triton_python_backend_stub", backends / "python")
    # Triton refuses an ensemble without a version folder, and git keeps no empty folder.
    for config in Path(repo).glob("*/config.pbtxt"):
        (config.parent / "1").mkdir(exist_ok=True)
    port = free_port_block()
    env = dict(os.environ)
    # The stub runs the python on PATH (it needs numpy) and links libpython and the wheel's libcudart.
    env["PATH"] = f"{python.parent}:{env.get('PATH', '')}"
    env["LD_LIBRARY_PATH"] = f"{pylib}:{site / 'nvidia_pytriton.libs'}"
    cmd = [
        str(wheel / "bin" / "tritonserver"), f"--model-repository={repo}",
        f"--backend-directory={backends}", "--model-control-mode=explicit", "--load-model=*",
        "--http-port", str(port), "--grpc-port", str(port + 1), "--metrics-port", str(port + 2),
        "--trace-config", f"triton,file={run_dir / 'trace.json'}", "--trace-config", "level=OFF",
    ]
    models = TRITON_REPO_MODELS if models is None else models
    server = Server("triton (model repository)", cmd, port, run_dir / "triton.log", models, env=env)
    try:
        return server.wait_ready()
    except Exception:
        server.stop()
        raise


def write_repository(root, configs):
    """A model repository of `name -> config.pbtxt text` under `root`."""
    root = Path(root)
    for name, text in configs.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        (root / name / "config.pbtxt").write_text(textwrap.dedent(text))
    return root


# The `delay` model's configured compute time, used by tests that assert the breakdown.
DELAY_US = 8000


# The pytriton `sleep` model's sleep per execution.
TRITON_SLEEP_MS = 20


# --- perf_analyzer and its CSV ----------------------------------------------------------------

# Measurement settings for functional runs on a loaded 2-core machine: short count windows and a
# loose stability bound, so perf_analyzer reports instead of giving up on noise.
QUICK = ["--measurement-mode", "count_windows", "--measurement-request-count", "50",
         "-s", "100", "-r", "10"]
# For a fast model at high concurrency. perf_analyzer's per-window bookkeeping is quadratic in the
# window's requests (it erases each counted timestamp from a vector, one at a time), and a count
# window lasts at least a second: at tens of thousands of requests per second its windows grew
# while it worked through them, and a sweep never finished. Short time windows bound that work.
SHORT_TIME_WINDOWS = ["--measurement-interval", "300", "-s", "100", "-r", "10"]


class PeerRunError(AssertionError):
    pass


def run_tool(cmd, timeout_s=PEER_TIMEOUT_S, env=None):
    """Runs a client; returns its combined output, failing with the tail of it on error."""
    try:
        proc = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s, env=env
        )
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        raise PeerRunError(f"timed out after {timeout_s} s: {' '.join(cmd)}\n{out[-3000:]}")
    out = proc.stdout.decode(errors="replace")
    if proc.returncode != 0:
        raise PeerRunError(
            f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{out[-3000:]}"
        )
    return out


def _number(text):
    try:
        return float(text)
    except ValueError:
        return text


def read_pa_csv(path):
    """Rows of a perf_analyzer CSV (the block before the first blank line), numbers as floats."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            break
        lines.append(line)
    reader = csv.DictReader(lines)
    return [{k: _number(v) for k, v in row.items()} for row in reader]


def run_pa(server, model, protocol, csv_path, args):
    """Runs NVIDIA perf_analyzer against `server` and returns its CSV rows."""
    cmd = [pa_bin(), "-m", model, "-u", server.url(protocol), "-i", protocol,
           "-f", str(csv_path), *args]
    output = run_tool(cmd)
    rows = read_pa_csv(csv_path)
    assert rows, f"perf_analyzer wrote no rows:\n{output[-3000:]}"
    return rows, output


