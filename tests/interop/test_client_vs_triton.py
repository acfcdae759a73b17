"""perfbench's own HTTP and gRPC clients against a real Triton: the Rust test
`client::real_triton_http_and_grpc` (tests/it/client.rs: identity round trips inline and through
system shared memory, an unknown model as the server's error, statistics counting the requests,
JSON file data), run here with the session's Triton named in its environment."""

import os
import subprocess

from peers import HERE

ROOT = HERE.parent.parent
TEST = "client::real_triton_http_and_grpc"


def test_rust_clients_against_triton(triton):
    env = dict(os.environ, PERFBENCH_TRITON_HTTP=triton.http_url, PERFBENCH_TRITON_GRPC=triton.grpc_url)
    cmd = ["cargo", "test", "--locked", "--quiet", "--test", "it", "--", "--ignored", "--exact", TEST]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    # `--exact` with a wrong name runs nothing and passes: the test must have run.
    assert "1 passed" in out, out[-4000:]
