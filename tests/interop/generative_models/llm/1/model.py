# Deterministic decoupled text generation with the vLLM backend's interface: `stream` true sends
# one response per token (the token's text), the last one flagged final; otherwise one response
# with the prompt (unless `exclude_input_in_output`) and the whole text. Tokens are words that
# are one token each under cl100k_base, in a fixed cycle; there are `max_tokens` of them
# (tensor or `sampling_parameters`), 16 without. `sampling_parameters` {"fail_after": k} sends an
# error response after k tokens, so tests see how Triton frames an error mid-stream. The config
# parameter `token_gap_ms` sets the wait before each token (test_llm_triton.py's search varies it).
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

WORDS = [" the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " on",
         " was", " by", " at", " from"]
DEFAULT_TOKENS = 16
DEFAULT_TOKEN_GAP_MS = 2.0


def optional(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().flatten()[0]


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []
        parameters = json.loads(args["model_config"]).get("parameters", {})
        gap_ms = parameters.get("token_gap_ms", {}).get("string_value", DEFAULT_TOKEN_GAP_MS)
        self.token_gap_s = float(gap_ms) / 1000

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                job = self.read(request)
            except ValueError as e:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(e))),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            t = threading.Thread(target=self.respond, args=(sender, *job), daemon=True)
            t.start()
            self.threads.append(t)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def read(self, request):
        prompt = text(optional(request, "text_input"))
        stream = bool(optional(request, "stream") or False)
        exclude = bool(optional(request, "exclude_input_in_output") or False)
        params = optional(request, "sampling_parameters")
        params = json.loads(text(params)) if params is not None else {}
        if not isinstance(params, dict):
            raise ValueError("sampling_parameters must be a JSON object")
        tokens = params.get("max_tokens", DEFAULT_TOKENS)
        max_tokens = optional(request, "max_tokens")
        if max_tokens is not None:
            tokens = int(max_tokens)
        tokens = int(tokens)
        if tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {tokens}")
        fail_after = params.get("fail_after")
        return prompt, stream, exclude, tokens, fail_after

    def respond(self, sender, prompt, stream, exclude, tokens, fail_after):
        out = "" if exclude else prompt
        for i in range(tokens):
            time.sleep(self.token_gap_s)
            if fail_after is not None and i == int(fail_after):
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError("failed on purpose")),
                            flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            word = WORDS[i % len(WORDS)]
            if stream:
                flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if i == tokens - 1 else 0
                sender.send(self.response(word), flags=flags)
            else:
                out += word
        if not stream:
            sender.send(self.response(out), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def response(value):
        return pb_utils.InferenceResponse([pb_utils.Tensor("text_output", np.array([value.encode()], dtype=np.object_))])

    def finalize(self):
        for t in self.threads:
            t.join(timeout=5)
