"""The fault proxy against a real Triton (issue 32): the Rust test
`chaos::triton::a_reset_proxy_in_front_of_real_triton` (tests/it/chaos/triton.rs) puts the fault
proxy, resetting every connection after 20 KB of requests, in front of the session's Triton and
runs `perfbench online` and perf_analyzer through it: ours finishes every point and counts the
resets in its `Failed Reset` column; perf_analyzer reports the failed request and stops."""

import os
import subprocess

from peers import HERE, pa_bin

ROOT = HERE.parent.parent
TEST = "chaos::triton::a_reset_proxy_in_front_of_real_triton"


def test_reset_proxy_in_front_of_triton(triton):
    env = dict(os.environ, PERFBENCH_TRITON_HTTP=triton.http_url, PERFBENCH_PA=pa_bin())
    cmd = ["cargo", "test", "--locked", "--quiet", "--test", "it", "--", "--ignored", "--exact", TEST, "--nocapture"]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    out = run.stdout + run.stderr
    print(out[-6000:])
    assert run.returncode == 0, out[-6000:]
    # `--exact` with a wrong name runs nothing and passes: the test must have run.
    assert "1 passed" in out, out[-4000:]
