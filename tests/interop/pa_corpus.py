"""The drop-in corpus (issue 21): perf_analyzer command lines from pa_lines.txt, each run through
real perf_analyzer and through `perfbench profile` against a real Triton (tests/interop/models),
and through perf_analyzer against `perfbench serve`. Verdicts (exit zero or not) and one-line
reasons are compared; the agreement is printed as `verdicts X/N, messages Y/N` with a table of
every disagreement.

Stages:
  profile  perf_analyzer vs `perfbench profile`, both against Triton
  serve    perf_analyzer against `perfbench serve` (bundled zoo) vs perf_analyzer against Triton

A line tagged `on=serve` needs a route Triton lacks (the OpenAI service kind's): in the profile
stage both tools run it against `perfbench serve` (its zoo includes the `llm` twin), and the serve
stage leaves it out (it would compare perf_analyzer with itself).

Verdicts: ok (exit 0), fail (non-zero) or hang (killed after LINE_TIMEOUT_S).
Messages: perf_analyzer's reason is its first error line on stderr, with its framing stripped
(`error:`, `Thread [0] had error:`, `Failed to init manager inputs:`, ... see `pa_reason`), cut
at the first sentence end and normalised (lower case, quotes dropped, whitespace collapsed). A
failing run of the other side matches when its normalised stderr contains that phrase. A line
may name the phrase itself (`key=`) where perf_analyzer's words come from a library. When both
succeed the messages agree.

Standalone (scripts/interop.sh sets the environment; defaults shown):
  PERFBENCH_PEERS=~/.cache/perfbench-peers PERFBENCH_BIN=target/debug/perfbench \\
    nice python tests/interop/pa_corpus.py [--stage profile|serve|both] [-k SUBSTR] [--budget-s S]
        [--record-baseline] [--report FILE]
Under pytest: test_pa_corpus.py.
"""

import argparse
import json
import os
import re
import shlex
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
CORPUS = HERE / "pa_lines.txt"
DATA = HERE / "data"
BASELINE = HERE / "pa_agreement_baseline.json"

# One run of one tool: every line measures for well under a second per point, so a run that
# takes this long is a hang, reported as such.
LINE_TIMEOUT_S = 30
# Each stage stops starting new lines after this long; lines not run count as disagreements.
STAGE_BUDGET_S = 1200

# The zoo models the serve stage loads (the same names and signatures as tests/interop/models).
ZOO_MODELS = ["identity", "identity_bytes", "identity_fp16", "identity_nobatch", "var_shape", "add_sub", "accumulate",
              "optional", "repeat", "ensemble", "bls", "llm"]

NOISE = ("stable measurement", "no valid requests recorded")


# --- the corpus -----------------------------------------------------------------------------------

@dataclass
class Line:
    id: str
    expect: str
    tags: dict
    args: list

    @property
    def serve_differs(self):
        return self.tags.get("serve-differs")

    @property
    def on_serve(self):
        """Both tools run it against `perfbench serve` (see the module's notes)."""
        return self.tags.get("on") == "serve"


def load_corpus(path=CORPUS):
    lines = []
    for n, raw in enumerate(Path(path).read_text().splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        parts = [p.strip() for p in raw.split("|", 3)]
        if len(parts) != 4 or parts[1] not in ("ok", "fail"):
            raise ValueError(f"{path}:{n}: expected 'id | ok|fail | tags | arguments': {raw}")
        tags = {}
        for tag in filter(None, (t.strip() for t in parts[2].split(","))):
            key, _, value = tag.partition("=")
            tags[key] = value
        lines.append(Line(parts[0], parts[1], tags, shlex.split(parts[3])))
    ids = [line.id for line in lines]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"{path}: duplicate ids {sorted(dupes)}")
    return lines


def expand(args, endpoints, out_dir):
    values = dict(endpoints, data=str(DATA), out=str(out_dir))
    return [re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], a) for a in args]


# --- running a tool -------------------------------------------------------------------------------

@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    elapsed_s: float
    timed_out: bool = False

    @property
    def ok(self):
        return self.rc == 0 and not self.timed_out

    @property
    def verdict(self):
        return "hang" if self.timed_out else ("ok" if self.rc == 0 else "fail")

    def noisy(self):
        text = (self.stderr + self.stdout).lower()
        return not self.ok and any(n in text for n in NOISE)


def run(cmd, timeout_s=LINE_TIMEOUT_S):
    t0 = time.monotonic()
    # Own process group, so a hung tool and anything it started are killed together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    return Outcome(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"),
                   time.monotonic() - t0, timed_out)


# --- messages -------------------------------------------------------------------------------------

# perf_analyzer's framing around the reason, stripped repeatedly from the front of its error line.
PA_PREFIXES = [
    r"error:\s*",
    r"thread \[\d+\] had error:\s*",
    r"\[request id: [^\]]*\]\s*",
    r"failed to init manager inputs:\s*",
    r"unable to init infer data manager:\s*",
    r"failed to create triton client backend:\s*",
    r"failed to get model metadata:\s*",
    r"failed to create model parser:\s*",
    r"http client failed:\s*",
]
# Lines of perf_analyzer's stderr that are never the reason.
PA_SKIP = [
    r"^\s*$",
    r"^WARNING",
    r"^[EWID]\d{4} \d\d:\d\d:\d\d",  # grpc-core's own log lines
    r"^Failed to maintain requested inference load",
    r"^Failed to retrieve results from inference request",
    r"^Failed to obtain stable measurement\.$",
    # rapidjson's error code and offset, printed before the reason for a JSON file that does not parse
    r"^cb::Error\s*:",
    r"^Offset\s*:",
]


def normalise(text):
    text = text.lower().replace("\n", " ")
    text = re.sub(r"[\"'`]", "", text)
    return re.sub(r"\s+", " ", text).strip()


def first_sentence(text):
    m = re.search(r"\.\s", text + " ")
    return text[: m.start()] if m else text


def pa_error_line(outcome):
    """perf_analyzer's own error line (stderr first, stdout when stderr has none)."""
    for stream in (outcome.stderr, outcome.stdout):
        for line in stream.splitlines():
            if line.startswith("Usage:"):
                break
            if any(re.search(p, line) for p in PA_SKIP):
                continue
            if stream is outcome.stdout and not re.search(r"error|fail", line, re.I):
                continue
            return line.strip()
    return ""


def pa_reason(outcome, line=None):
    """The normalised key phrase of a failed perf_analyzer run (None when it succeeded)."""
    if outcome.ok:
        return None
    if line is not None and "key" in line.tags:
        return normalise(line.tags["key"])
    if outcome.timed_out:
        return "(timed out)"
    text = pa_error_line(outcome)
    stripped = True
    while stripped:
        stripped = False
        for p in PA_PREFIXES:
            new = re.sub("^" + p, "", text, flags=re.I)
            if new != text:
                text, stripped = new, True
    return normalise(first_sentence(text.strip()))


def summary_line(outcome, pa=False):
    """The one line to show for a run in the table (perf_analyzer's: its error line)."""
    if outcome is None:
        return "(not run)"
    if outcome.timed_out:
        return f"hang (killed after {outcome.elapsed_s:.0f} s)"
    if outcome.ok:
        return "ok"
    if pa and pa_error_line(outcome):
        return f"exit {outcome.rc}: {pa_error_line(outcome)}"
    for stream in (outcome.stderr, outcome.stdout):
        lines = [ln.strip() for ln in stream.splitlines() if ln.strip()]
        errors = [ln for ln in lines if re.search(r"error|fail|not supported|invalid", ln, re.I)
                  and not re.match(PA_SKIP[2], ln) and not ln.startswith("Usage:")]
        if errors:
            return f"exit {outcome.rc}: {errors[0]}"
        if lines:
            return f"exit {outcome.rc}: {lines[-1]}"
    return f"exit {outcome.rc}"


def messages_agree(reference, ref_line, other):
    """Whether `other` gives the same one-line reason as the reference perf_analyzer run."""
    if reference.ok and other.ok:
        return True
    if reference.verdict != other.verdict or other.timed_out:
        return False
    key = pa_reason(reference, ref_line)
    return bool(key) and key in normalise(other.stderr + "\n" + other.stdout)


# --- the peers the corpus needs -------------------------------------------------------------------

class TlsListener:
    """A TLS endpoint whose certificate nobody trusts (self-signed, for another host name): every
    client that verifies its peer must refuse it. It speaks nothing after the handshake."""

    def __init__(self, port):
        self.port = port
        self.dir = tempfile.mkdtemp(prefix="pa-corpus-tls-")
        key, cert = f"{self.dir}/key.pem", f"{self.dir}/cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=untrusted.invalid"], check=True, capture_output=True)
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(cert, key)
        self.ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(64)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handshake, args=(conn,), daemon=True).start()

    def _handshake(self, conn):
        conn.settimeout(10)
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def stop(self):
        self.sock.close()


def endpoints_of(server, tls_port, dead_port):
    return {
        "http": server.http_url,
        "grpc": server.grpc_url,
        "metrics": f"{server.http_url.rsplit(':', 1)[0]}:{server.port + 2}/metrics",
        "tls": f"127.0.0.1:{tls_port}",
        "dead": f"127.0.0.1:{dead_port}",
    }


def reset_trace(endpoints, model):
    """Trace settings outlive a run on the server: after a line that set them, the global ones go
    back to the defaults and the model's own are cleared (perf_analyzer and perfbench may set
    either; a model left tracing with its trace_count spent makes the next setter fail)."""
    settings = ["trace_level", "trace_rate", "trace_count", "log_frequency"]
    for path, body in [
        (f"/v2/models/{model}/trace/setting", {k: None for k in settings}),
        ("/v2/trace/setting", {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
                               "log_frequency": "0"}),
    ]:
        req = urllib.request.Request(f"http://{endpoints['http']}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=5).read()
        except OSError:
            pass


def model_of(args):
    """The -m of a command line (None when it has none)."""
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("-m") and len(a) > 2:
            return a[2:].lstrip("=")
    return None


# --- stages ---------------------------------------------------------------------------------------

@dataclass
class Row:
    line: Line
    reference: Outcome = None  # perf_analyzer against Triton
    other: Outcome = None  # perfbench profile against Triton, or perf_analyzer against perfbench serve
    verdict_agrees: bool = False
    message_agrees: bool = False
    note: str = ""


@dataclass
class Stage:
    name: str
    title: str
    rows: list = field(default_factory=list)
    elapsed_s: float = 0.0
    budget_s: float = STAGE_BUDGET_S

    @property
    def verdicts(self):
        return sum(r.verdict_agrees for r in self.rows)

    @property
    def messages(self):
        return sum(r.message_agrees for r in self.rows)

    def counts(self):
        return {"lines": len(self.rows), "verdicts": self.verdicts, "messages": self.messages}

    def headline(self):
        n = len(self.rows)
        return f"{self.title}: verdicts {self.verdicts}/{n}, messages {self.messages}/{n} ({self.elapsed_s:.0f} s)"

    def table(self):
        bad = [r for r in self.rows if not (r.verdict_agrees and r.message_agrees)]
        if not bad:
            return "(no disagreements)"
        w = max(len(r.line.id) for r in bad)
        out = [f"{'id':<{w}}  verdicts  perf_analyzer on Triton | {self.other_name()}"]
        for r in bad:
            ref = summary_line(r.reference, pa=True)
            other = summary_line(r.other, pa=self.name == "serve")
            pair = f"{r.reference.verdict if r.reference else '-'}/{r.other.verdict if r.other else '-'}"
            note = f"  [{r.note}]" if r.note else ""
            out.append(f"{r.line.id:<{w}}  {pair:<8}  {shorten(ref, 90)} | {shorten(other, 110)}{note}")
        return "\n".join(out)

    def other_name(self):
        return "perfbench profile on Triton" if self.name == "profile" else "perf_analyzer on perfbench serve"


def shorten(text, n):
    return text if len(text) <= n else text[: n - 1] + "…"


class Corpus:
    """Runs the corpus. `pa` and `perfbench` are commands (lists); servers are started by the caller."""

    def __init__(self, pa, perfbench, lines, triton, serve=None, tls_port=None, dead_port=None, log=print):
        self.pa = pa
        self.perfbench = perfbench
        self.lines = lines
        self.triton = triton
        self.serve = serve
        self.tls_port = tls_port
        self.dead_port = dead_port
        self.log = log
        self.reference = {}  # id -> perf_analyzer on Triton
        self.work = Path(tempfile.mkdtemp(prefix="pa-corpus-"))

    def _run(self, tool, line, server):
        endpoints = endpoints_of(server, self.tls_port, self.dead_port)
        out_dir = Path(tempfile.mkdtemp(prefix=f"{line.id}-", dir=self.work))
        args = expand(line.args, endpoints, out_dir)
        cmd = (self.pa if tool == "pa" else [*self.perfbench, "profile"]) + args
        outcome = run(cmd)
        if any(a.startswith(("--trace-", "--log-frequency")) for a in args) and model_of(args):
            reset_trace(endpoints, model_of(args))
        return outcome

    def reference_of(self, line, again=False):
        """perf_analyzer against Triton, run once per line (`again`: once more, when it failed on
        noise and the other side disagrees)."""
        if line.id not in self.reference or again:
            server = self.serve if line.on_serve else self.triton
            outcome = self._run("pa", line, server)
            if outcome.noisy():
                outcome = self._run("pa", line, server)
            self.reference[line.id] = outcome
        return self.reference[line.id]

    def stage(self, name, budget_s=STAGE_BUDGET_S):
        title = {"profile": "perfbench profile vs perf_analyzer, on Triton",
                 "serve": "perf_analyzer on perfbench serve vs on Triton"}[name]
        stage = Stage(name, title, budget_s=budget_s)
        t0 = time.monotonic()
        for line in self.lines:
            if name == "serve" and line.on_serve:
                continue
            row = Row(line)
            stage.rows.append(row)
            if time.monotonic() - t0 > budget_s:
                row.note = "not run: stage budget spent"
                continue
            row.reference = self.reference_of(line)
            tool = "perfbench" if name == "profile" else "pa"
            server = self.serve if name == "serve" or line.on_serve else self.triton
            row.other = self._run(tool, line, server)
            # A verdict that rests on measurement noise is measured once more before it counts.
            if row.reference.ok != row.other.ok and row.other.noisy():
                row.other = self._run(tool, line, server)
            if row.reference.ok != row.other.ok and row.reference.noisy():
                row.reference = self.reference_of(line, again=True)
            # A hang is a verdict of its own: killing a tool is not the same as its failing.
            row.verdict_agrees = row.reference.verdict == row.other.verdict
            row.message_agrees = row.verdict_agrees and messages_agree(row.reference, line, row.other)
            notes = []
            if row.reference.verdict != line.expect:
                notes.append(f"perf_analyzer on Triton gave {row.reference.verdict}, corpus expects {line.expect}")
            if name == "serve" and line.serve_differs:
                notes.append(f"expected to differ: {line.serve_differs}")
            row.note = "; ".join(notes)
            mark = "=" if row.verdict_agrees and row.message_agrees else ("~" if row.verdict_agrees else "X")
            self.log(f"  {mark} {line.id:<20} {row.reference.verdict:>4} {row.other.verdict:>4}"
                     f"  {row.reference.elapsed_s:5.1f} s {row.other.elapsed_s:5.1f} s")
        stage.elapsed_s = time.monotonic() - t0
        return stage


def report_json(stages):
    out = {}
    for s in stages:
        out[s.name] = {
            **s.counts(),
            "elapsed_s": round(s.elapsed_s, 1),
            "rows": [
                {
                    "id": r.line.id,
                    "args": shlex.join(r.line.args),
                    "reference": summary_line(r.reference, pa=True),
                    "reference_key": pa_reason(r.reference, r.line) if r.reference else None,
                    "other": summary_line(r.other),
                    "verdict_agrees": r.verdict_agrees,
                    "message_agrees": r.message_agrees,
                    "note": r.note,
                }
                for r in s.rows
            ],
        }
    return out


def load_baseline(path=BASELINE):
    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}


def below_baseline(stage, baseline):
    """What fell below the recorded agreement, as sentences (empty when nothing did)."""
    base = baseline.get(stage.name, {})
    problems = []
    for what in ("verdicts", "messages"):
        if getattr(stage, what) < base.get(what, 0):
            problems.append(f"{stage.title}: {what} {getattr(stage, what)} < baseline {base[what]} "
                            f"({BASELINE.name})")
    return problems


def check_reference(corpus):
    """Runs perf_analyzer against Triton on every line and lists the lines whose verdict is not the
    corpus' `expect` (for writing the corpus)."""
    t0 = time.monotonic()
    wrong = 0
    for line in corpus.lines:
        outcome = corpus.reference_of(line)
        mark = " " if outcome.verdict == line.expect else "!"
        wrong += mark == "!"
        print(f"{mark} {line.id:<20} {outcome.verdict:>4} {outcome.elapsed_s:5.1f} s  {pa_reason(outcome, line) or ''}")
    print(f"{len(corpus.lines) - wrong}/{len(corpus.lines)} as expected ({time.monotonic() - t0:.0f} s)")
    return 1 if wrong else 0


# --- standalone -----------------------------------------------------------------------------------

def main(argv=None):
    sys.path.insert(0, str(HERE))
    import peers

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stage", choices=["profile", "serve", "both", "reference"], default="both",
                    help="reference: only perf_analyzer against Triton, checked against the corpus' expect column")
    ap.add_argument("-k", dest="only", help="run only lines whose id contains this")
    ap.add_argument("--budget-s", type=float, default=STAGE_BUDGET_S, help="time budget of each stage")
    ap.add_argument("--record-baseline", action="store_true", help=f"write today's numbers to {BASELINE.name}")
    ap.add_argument("--report", help="write every row as JSON here")
    ap.add_argument("--work", help="folder for the servers' logs (default: a temporary one)")
    opts = ap.parse_args(argv)

    pa = [os.environ.get("PERFBENCH_PA", str(peers.peers_dir() / "pa.sh"))]
    default_bin = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "debug" / "perfbench"
    perfbench = [os.environ.get("PERFBENCH_BIN", str(default_bin))]
    os.environ.setdefault("PERFBENCH_BIN", perfbench[0])
    lines = [ln for ln in load_corpus() if not opts.only or opts.only in ln.id]
    work = Path(opts.work or tempfile.mkdtemp(prefix="pa-corpus-servers-"))
    work.mkdir(parents=True, exist_ok=True)

    started = []
    stages = []
    try:
        t0 = time.monotonic()
        triton = peers.start_triton_repo(work / "triton")
        started.append(triton)
        print(f"triton ready on {triton.http_url} in {time.monotonic() - t0:.0f} s (log {triton.log_path})")
        serve = None
        if opts.stage in ("serve", "both") or any(line.on_serve for line in lines):
            t0 = time.monotonic()
            serve = peers.start_perfbench(work, ZOO_MODELS)
            started.append(serve)
            print(f"perfbench serve ready on {serve.http_url} in {time.monotonic() - t0:.0f} s")
        tls = TlsListener(peers.free_port_block(1))
        dead = peers.free_port_block(1)
        corpus = Corpus(pa, perfbench, lines, triton, serve, tls.port, dead)
        if opts.stage == "reference":
            return check_reference(corpus)
        for name in (["profile", "serve"] if opts.stage == "both" else [opts.stage]):
            print(f"\n== stage {name}: {len(lines)} lines, budget {opts.budget_s:.0f} s")
            stages.append(corpus.stage(name, opts.budget_s))
        tls.stop()
    finally:
        for server in started:
            server.stop()

    baseline = load_baseline()
    problems = []
    for s in stages:
        print(f"\n{s.headline()}\n{s.table()}")
        problems += below_baseline(s, baseline)
    if opts.report:
        Path(opts.report).write_text(json.dumps(report_json(stages), indent=1))
    if opts.record_baseline:
        if opts.only:
            sys.exit("--record-baseline needs the whole corpus (no -k)")
        baseline.update({s.name: s.counts() for s in stages})
        BASELINE.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
        print(f"recorded {BASELINE}")
    elif problems and not opts.only:
        print("\n".join(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
