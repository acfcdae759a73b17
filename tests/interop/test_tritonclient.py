"""Python tritonclient (http and grpc) against `perfbench serve` (issue 2, acceptance 2).

A third-party client: identity round-trips byte-exactly for several dtypes and both tensor
encodings of HTTP (JSON and binary), also through system shared memory; bert answers the same
input with the same bytes; the metadata, config, statistics and repository calls work.
"""

import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from peers import start_perfbench, write_repository

# (protocol, HTTP binary tensors?): gRPC always carries raw bytes.
ENCODINGS = [("http", True), ("http", False), ("grpc", True)]
ENCODING_IDS = ["http-binary", "http-json", "grpc"]

# Extra identity models, one per dtype, in a custom repository: (model, numpy dtype).
DTYPE_MODELS = {
    "identity_int8": ("TYPE_INT8", np.int8),
    "identity_uint16": ("TYPE_UINT16", np.uint16),
    "identity_int32": ("TYPE_INT32", np.int32),
    "identity_int64": ("TYPE_INT64", np.int64),
    "identity_fp64": ("TYPE_FP64", np.float64),
    "identity_bool": ("TYPE_BOOL", np.bool_),
}


def client_for(server, protocol):
    if protocol == "grpc":
        return grpcclient.InferenceServerClient(server.grpc_url)
    return httpclient.InferenceServerClient(server.http_url, network_timeout=300.0)


def module_for(protocol):
    return grpcclient if protocol == "grpc" else httpclient


def infer(client, protocol, model, inputs, output_names, binary=True):
    """One inference of named numpy arrays; returns the outputs as numpy arrays."""
    mod = module_for(protocol)
    tensors = []
    for name, array in inputs.items():
        t = mod.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        if protocol == "http":
            t.set_data_from_numpy(array, binary_data=binary)
        else:
            t.set_data_from_numpy(array)
        tensors.append(t)
    if protocol == "http":
        outputs = [mod.InferRequestedOutput(n, binary_data=binary) for n in output_names]
    else:
        outputs = [mod.InferRequestedOutput(n) for n in output_names]
    result = client.infer(model, tensors, outputs=outputs)
    return {n: result.as_numpy(n) for n in output_names}


def assert_same_bytes(got, sent):
    assert got is not None
    assert got.shape == sent.shape
    assert got.dtype == sent.dtype, (got.dtype, sent.dtype)
    assert got.tobytes() == sent.tobytes()


@pytest.fixture(scope="module")
def perfbench_dtypes(tmp_path_factory):
    """`perfbench serve` over a repository of identity models for more dtypes."""
    root = tmp_path_factory.mktemp("dtypes-repo")
    configs = {
        name: f"""
        backend: "identity"
        max_batch_size: 8
        input [ {{ name: "INPUT0" data_type: {dtype} dims: [ -1 ] }} ]
        output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ -1 ] }} ]
        """
        for name, (dtype, _) in DTYPE_MODELS.items()
    }
    server = start_perfbench(root, list(configs), repository=write_repository(root, configs))
    yield server
    server.stop()


# --- identity round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("protocol,binary", ENCODINGS, ids=ENCODING_IDS)
def test_identity_fp32(perfbench_zoo, protocol, binary):
    client = client_for(perfbench_zoo, protocol)
    # Batch 3 of 16, with values JSON must print exactly (NaN-free, subnormal and extremes).
    sent = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    sent[0, :4] = [np.finfo(np.float32).max, np.finfo(np.float32).tiny, -0.0, 1e-45]
    got = infer(client, protocol, "identity", {"INPUT0": sent}, ["OUTPUT0"], binary)["OUTPUT0"]
    assert_same_bytes(got, sent)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_identity_fp16(perfbench_zoo, protocol):
    # FP16 travels only as raw bytes (no JSON form), so HTTP uses binary tensors.
    client = client_for(perfbench_zoo, protocol)
    sent = np.random.default_rng(2).standard_normal(37).astype(np.float16)
    got = infer(client, protocol, "identity_fp16", {"INPUT0": sent}, ["OUTPUT0"])["OUTPUT0"]
    assert_same_bytes(got, sent)


@pytest.mark.parametrize("protocol,binary", ENCODINGS, ids=ENCODING_IDS)
def test_identity_bytes(perfbench_zoo, protocol, binary):
    client = client_for(perfbench_zoo, protocol)
    elements = [b"", b"a", "héllo wörld".encode(), b"x" * 1000]
    if binary:
        # Only the binary encodings can carry bytes that are not UTF-8.
        elements += [b"\x00\xff\xfe", bytes(range(256))]
    sent = np.array([elements], dtype=np.object_)
    got = infer(client, protocol, "identity_bytes", {"INPUT0": sent}, ["OUTPUT0"], binary)
    got = got["OUTPUT0"]
    assert got.shape == sent.shape
    # JSON carries BYTES elements as strings, which tritonclient hands back as str.
    assert [e.encode() if isinstance(e, str) else bytes(e) for e in got.ravel()] == elements


@pytest.mark.parametrize("model", list(DTYPE_MODELS))
@pytest.mark.parametrize("protocol,binary", ENCODINGS, ids=ENCODING_IDS)
def test_identity_dtypes(perfbench_dtypes, model, protocol, binary):
    client = client_for(perfbench_dtypes, protocol)
    dtype = DTYPE_MODELS[model][1]
    rng = np.random.default_rng(3)
    if dtype == np.bool_:
        sent = rng.integers(0, 2, (2, 9)).astype(np.bool_)
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        sent = rng.integers(info.min, info.max, (2, 9), dtype=dtype, endpoint=True)
        sent[0, 0], sent[0, 1] = info.min, info.max
    else:
        sent = rng.standard_normal((2, 9)).astype(dtype)
    got = infer(client, protocol, model, {"INPUT0": sent}, ["OUTPUT0"], binary)["OUTPUT0"]
    assert_same_bytes(got, sent)


# --- system shared memory -----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model,dtype", [("identity", np.float32), ("identity_fp16", np.float16)])
def test_identity_system_shared_memory(perfbench_zoo, protocol, model, dtype):
    client = client_for(perfbench_zoo, protocol)
    mod = module_for(protocol)
    shape = [1, 64] if model == "identity" else [64]
    sent = np.random.default_rng(4).standard_normal(shape).astype(dtype)
    size = sent.nbytes
    tag = uuid.uuid4().hex[:12]
    in_name, out_name = f"in_{tag}", f"out_{tag}"
    # Regions at an offset inside larger segments: the server must honour offset and size.
    offset = 128
    in_region = shm.create_shared_memory_region(in_name, f"/pb_in_{tag}", offset + size)
    out_region = shm.create_shared_memory_region(out_name, f"/pb_out_{tag}", offset + size)
    try:
        shm.set_shared_memory_region(in_region, [sent], offset=offset)
        client.register_system_shared_memory(in_name, f"/pb_in_{tag}", offset + size)
        client.register_system_shared_memory(out_name, f"/pb_out_{tag}", offset + size)
        assert {in_name, out_name} <= shm_region_names(client, protocol)

        t = mod.InferInput("INPUT0", shape, np_to_triton_dtype(sent.dtype))
        t.set_shared_memory(in_name, size, offset=offset)
        o = mod.InferRequestedOutput("OUTPUT0")
        o.set_shared_memory(out_name, size, offset=offset)
        result = client.infer(model, [t], outputs=[o])

        # The response describes the output but carries no data: that lies in the region.
        meta = result.get_output("OUTPUT0")
        if protocol == "http":
            assert meta["shape"] == shape
            assert "data" not in meta
            assert "binary_data_size" not in meta.get("parameters", {})
        else:
            assert list(meta.shape) == shape
            assert all(len(raw) == 0 for raw in result.get_response().raw_output_contents)
        got = shm.get_contents_as_numpy(out_region, dtype, shape, offset=offset)
        assert_same_bytes(np.array(got), sent)
    finally:
        for name in (in_name, out_name):
            try:
                client.unregister_system_shared_memory(name)
            except InferenceServerException:
                pass
        shm.destroy_shared_memory_region(in_region)
        shm.destroy_shared_memory_region(out_region)
    assert not {in_name, out_name} & shm_region_names(client, protocol)


def shm_region_names(client, protocol):
    if protocol == "http":
        return {r["name"] for r in client.get_system_shared_memory_status()}
    status = client.get_system_shared_memory_status(as_json=True)
    return set(status.get("regions", {}))


# --- bert ---------------------------------------------------------------------------------------


def bert_inputs(seed, seq=384, vocab=30522, used=150):
    rng = np.random.default_rng(seed)
    ids = np.zeros((1, seq), np.int32)
    ids[0, :used] = rng.integers(0, vocab, used)
    types = np.zeros((1, seq), np.int32)
    types[0, used // 2:used] = 1
    mask = np.zeros((1, seq), np.int32)
    mask[0, :used] = 1
    return {"input__0": ids, "input__1": types, "input__2": mask}


def test_bert_is_deterministic(perfbench_zoo):
    outputs = ["output__0", "output__1"]
    http = client_for(perfbench_zoo, "http")
    grpc = client_for(perfbench_zoo, "grpc")
    inputs = bert_inputs(seed=5)
    runs = [
        infer(http, "http", "bert", inputs, outputs),
        infer(grpc, "grpc", "bert", inputs, outputs),
        infer(http, "http", "bert", inputs, outputs),
    ]
    first = runs[0]
    for name in outputs:
        assert first[name].shape == (1, 384) and first[name].dtype == np.float32
        assert np.all(np.isfinite(first[name]))
        for other in runs[1:]:
            assert other[name].tobytes() == first[name].tobytes(), name
    # Not a constant: another question gives other logits.
    different = infer(grpc, "grpc", "bert", bert_inputs(seed=6), outputs)
    assert different["output__0"].tobytes() != first["output__0"].tobytes()


# --- metadata, config, statistics, repository ---------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_health_and_metadata(perfbench_zoo, protocol):
    client = client_for(perfbench_zoo, protocol)
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("identity")
    assert not client.is_model_ready("no_such_model")

    server = client.get_server_metadata(as_json=True) if protocol == "grpc" else \
        client.get_server_metadata()
    assert server["name"] and server["version"]
    for ext in ["statistics", "system_shared_memory", "model_repository", "binary_tensor_data"]:
        if protocol == "grpc" and ext == "binary_tensor_data":
            continue
        assert ext in server["extensions"], server

    meta = client.get_model_metadata("bert", as_json=True) if protocol == "grpc" else \
        client.get_model_metadata("bert")
    assert meta["name"] == "bert"
    inputs = {t["name"]: t for t in meta["inputs"]}
    assert set(inputs) == {"input__0", "input__1", "input__2"}
    assert inputs["input__0"]["datatype"] == "INT32"
    assert [int(d) for d in inputs["input__0"]["shape"]] == [-1, 384]
    assert {t["name"] for t in meta["outputs"]} == {"output__0", "output__1"}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_model_config(perfbench_zoo, protocol):
    client = client_for(perfbench_zoo, protocol)
    if protocol == "grpc":
        config = client.get_model_config("identity", as_json=True)["config"]
    else:
        config = client.get_model_config("identity")
    assert config["name"] == "identity"
    assert int(config["max_batch_size"]) == 64
    assert config["input"][0]["name"] == "INPUT0"
    assert config["input"][0]["data_type"] == "TYPE_FP32"
    assert "dynamic_batching" in config


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_statistics_count_inferences(perfbench_zoo, protocol):
    client = client_for(perfbench_zoo, protocol)

    def stats():
        if protocol == "grpc":
            s = client.get_inference_statistics("identity_fp16", as_json=True)
        else:
            s = client.get_inference_statistics("identity_fp16")
        (model,) = s["model_stats"]
        return model

    before = stats()
    sent = np.ones(8, np.float16)
    for _ in range(3):
        infer(client, protocol, "identity_fp16", {"INPUT0": sent}, ["OUTPUT0"])
    after = stats()
    assert after["name"] == "identity_fp16"
    # gRPC's JSON prints 64-bit counters as strings.
    count = lambda m, *keys: int(_dig(m, *keys) or 0)  # noqa: E731
    assert count(after, "inference_count") - count(before, "inference_count") == 3
    assert count(after, "execution_count") - count(before, "execution_count") == 3
    success = ("inference_stats", "success", "count")
    assert count(after, *success) - count(before, *success) == 3
    assert int(_dig(after, "inference_stats", "compute_infer", "ns") or 0) > 0


def _dig(obj, *keys):
    for k in keys:
        if not isinstance(obj, dict) or k not in obj:
            return None
        obj = obj[k]
    return obj


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_repository_index_unload_load(perfbench_dtypes, protocol):
    client = client_for(perfbench_dtypes, protocol)
    model = "identity_int8"
    index = client.get_model_repository_index(as_json=True) if protocol == "grpc" else \
        client.get_model_repository_index()
    entries = index["models"] if protocol == "grpc" else index
    assert {e["name"] for e in entries} == set(DTYPE_MODELS)

    client.unload_model(model)
    assert not client.is_model_ready(model)
    with pytest.raises(InferenceServerException):
        infer(client, protocol, model, {"INPUT0": np.zeros((1, 2), np.int8)}, ["OUTPUT0"])
    client.load_model(model)
    assert client.is_model_ready(model)
    sent = np.arange(-4, 4, dtype=np.int8).reshape(1, 8)
    got = infer(client, protocol, model, {"INPUT0": sent}, ["OUTPUT0"])["OUTPUT0"]
    assert_same_bytes(got, sent)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_request_is_a_clear_error_and_server_keeps_serving(perfbench_zoo, protocol):
    client = client_for(perfbench_zoo, protocol)
    with pytest.raises(InferenceServerException) as err:
        infer(client, protocol, "identity", {"INPUT0": np.zeros((1, 4), np.int32)}, ["OUTPUT0"])
    assert "INPUT0" in str(err.value) or "INT32" in str(err.value), str(err.value)
    with pytest.raises(InferenceServerException):
        infer(client, protocol, "no_such_model", {"INPUT0": np.zeros((1, 4), np.float32)},
              ["OUTPUT0"])
    sent = np.ones((1, 4), np.float32)
    got = infer(client, protocol, "identity", {"INPUT0": sent}, ["OUTPUT0"])["OUTPUT0"]
    assert_same_bytes(got, sent)


# --- stateful sequences (issue 15): the zoo's `accumulate`, a running sum per sequence -------

# Interleaved sequences: (sequence id, values). Each test run uses its own ids.
SEQUENCES = [[1, 2, 3, 4], [10, 20, 30], [-5, 7]]


@pytest.fixture(scope="module")
def perfbench_accumulate(tmp_path_factory):
    """`perfbench serve` with the zoo's sequence model `accumulate`."""
    server = start_perfbench(tmp_path_factory.mktemp("accumulate"), ["accumulate"])
    yield server
    server.stop()


def interleaved(first_id):
    """Round robin over SEQUENCES: (id, step, value, start, end, expected running sum)."""
    steps, sums = [], [0] * len(SEQUENCES)
    for step in range(max(map(len, SEQUENCES))):
        for k, values in enumerate(SEQUENCES):
            if step < len(values):
                sums[k] += values[step]
                steps.append((first_id + k, step, values[step], step == 0,
                              step == len(values) - 1, sums[k]))
    return steps


def int32_input(mod, protocol, value, binary=True):
    t = mod.InferInput("INPUT0", [1, 1], "INT32")
    array = np.array([[value]], dtype=np.int32)
    if protocol == "http":
        t.set_data_from_numpy(array, binary_data=binary)
    else:
        t.set_data_from_numpy(array)
    return t


@pytest.mark.parametrize("protocol,binary", ENCODINGS, ids=ENCODING_IDS)
def test_sequence_running_sums(perfbench_accumulate, protocol, binary):
    client = client_for(perfbench_accumulate, protocol)
    mod = module_for(protocol)
    first_id = 1000 + 10 * ENCODINGS.index((protocol, binary))
    for seq_id, step, value, start, end, expected in interleaved(first_id):
        result = client.infer("accumulate", [int32_input(mod, protocol, value, binary)],
                              sequence_id=seq_id, sequence_start=start, sequence_end=end)
        got = result.as_numpy("OUTPUT0")
        assert got.dtype == np.int32 and got.shape == (1, 1)
        assert int(got[0][0]) == expected, (seq_id, step)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_sequence_refusals_and_the_server_keeps_serving(perfbench_accumulate, protocol):
    client = client_for(perfbench_accumulate, protocol)
    mod = module_for(protocol)
    with pytest.raises(InferenceServerException) as err:
        client.infer("accumulate", [int32_input(mod, protocol, 1)], sequence_id=987654)
    assert "must specify the START flag on the first request of the sequence" in str(err.value)
    with pytest.raises(InferenceServerException) as err:
        client.infer("accumulate", [int32_input(mod, protocol, 1)])
    assert "must specify a non-zero or non-empty correlation ID" in str(err.value)
    result = client.infer("accumulate", [int32_input(mod, protocol, 5)], sequence_id=987654,
                          sequence_start=True, sequence_end=True)
    assert int(result.as_numpy("OUTPUT0")[0][0]) == 5


def test_sequence_grpc_stream(perfbench_accumulate):
    import queue

    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(perfbench_accumulate.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    steps = interleaved(2000)
    try:
        for seq_id, step, value, start, end, _ in steps:
            client.async_stream_infer("accumulate", [int32_input(grpcclient, "grpc", value)],
                                      request_id=f"{seq_id}:{step}", sequence_id=seq_id,
                                      sequence_start=start, sequence_end=end)
        got = {}
        for _ in steps:
            result, error = answers.get(timeout=60)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("OUTPUT0")[0][0])
    finally:
        client.stop_stream()
    assert got == {f"{seq_id}:{step}": expected for seq_id, step, _, _, _, expected in steps}
