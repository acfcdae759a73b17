"""Fixtures of the interop suite: the servers the tests talk to. Each is started once per session
on free loopback ports and stopped at the end, also when a test fails."""

import os
import sys

import pytest

from peers import (
    DELAY_US,
    HERE,
    TRITON_SLEEP_MS,
    Server,
    free_port_block,
    start_perfbench,
    write_repository,
)


@pytest.fixture(scope="session")
def perfbench_zoo(tmp_path_factory):
    """`perfbench serve` with the bundled zoo models the tests use (bert built once per session)."""
    models = ["identity", "identity_bytes", "identity_fp16", "bert", "accumulate"]
    server = start_perfbench(tmp_path_factory.mktemp("zoo"), models)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def perfbench_delay(tmp_path_factory):
    """`perfbench serve` over a custom repository: `delay` without batching, DELAY_US per call."""
    root = tmp_path_factory.mktemp("delay-repo")
    write_repository(
        root,
        {
            "delay": f"""
            backend: "delay"
            max_batch_size: 0
            input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
            output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] }} ]
            instance_group [ {{ count: 1 kind: KIND_CPU }} ]
            parameters {{ key: "delay_us" value {{ string_value: "{DELAY_US}" }} }}
            """
        },
    )
    server = start_perfbench(root, ["delay"], repository=root)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def triton(tmp_path_factory):
    """A real Triton (tritonserver inside pytriton) serving `identity` and `sleep`."""
    port = free_port_block()
    env = dict(os.environ, TRITON_BASE_PORT=str(port), SLEEP_MS=str(TRITON_SLEEP_MS))
    log = tmp_path_factory.mktemp("triton") / "triton.log"
    server = Server(
        "triton",
        [sys.executable, str(HERE / "triton_server.py")],
        port,
        log,
        ["identity", "sleep"],
        env=env,
    )
    try:
        server.wait_ready()
    except Exception:
        server.stop()
        raise
    yield server
    server.stop()
