"""A real Triton server (the tritonserver binary inside nvidia-pytriton) for the interop tests.

Serves two CPU models through Triton's Python backend:
  identity: FP32 [-1] -> OUTPUT0 = INPUT0 (dynamic batching, max batch 64)
  sleep:    FP32 [-1] -> OUTPUT0 = INPUT0 after sleeping SLEEP_MS per execution (no batching)
Ports: TRITON_BASE_PORT (http), +1 (grpc), +2 (metrics).
"""
import os
import time

import numpy as np
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

SLEEP_S = float(os.environ.get("SLEEP_MS", "20")) / 1000.0


@batch
def identity(INPUT0):
    return {"OUTPUT0": INPUT0}


@batch
def sleep(INPUT0):
    time.sleep(SLEEP_S)
    return {"OUTPUT0": INPUT0}


def main():
    port = int(os.environ.get("TRITON_BASE_PORT", "18000"))
    config = TritonConfig(http_port=port, grpc_port=port + 1, metrics_port=port + 2)
    # Statistics and shared memory must not sit behind pytriton's access token.
    security = TritonSecurityConfig(restricted_endpoints=[])
    io = dict(
        inputs=[Tensor(name="INPUT0", dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="OUTPUT0", dtype=np.float32, shape=(-1,))],
    )
    with Triton(config=config, security_config=security) as triton:
        triton.bind(
            model_name="identity",
            infer_func=identity,
            config=ModelConfig(max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=100)),
            **io,
        )
        triton.bind(model_name="sleep", infer_func=sleep, config=ModelConfig(max_batch_size=8), **io)
        triton.serve()


if __name__ == "__main__":
    main()
