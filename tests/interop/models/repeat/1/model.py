# Decoupled repeat: one thread per request sends len(IN) responses, DELAY[i] ms apart, then the
# final flag after WAIT ms; execute returns at once so requests overlap.
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            delays = pb_utils.get_input_tensor_by_name(request, "DELAY").as_numpy()
            wait = pb_utils.get_input_tensor_by_name(request, "WAIT").as_numpy()
            sender = request.get_response_sender()
            if delays.shape != values.shape:
                sender.send(
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(
                        f"expected IN and DELAY shape to match, got {list(values.shape)} and {list(delays.shape)}")),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                continue
            t = threading.Thread(target=self.respond, args=(sender, values, delays, int(wait.flatten()[0])), daemon=True)
            t.start()
            self.threads.append(t)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def respond(self, sender, values, delays, wait_ms):
        for i, (v, d) in enumerate(zip(values.flatten(), delays.flatten())):
            time.sleep(int(d) / 1000.0)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.uint32)),
            ]))
        time.sleep(wait_ms / 1000.0)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for t in self.threads:
            t.join(timeout=5)
