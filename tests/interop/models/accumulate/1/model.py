# Running sum per sequence, keyed by the correlation id the sequence batcher passes in CORRID;
# reset at START, dropped at END. An empty batch slot (READY 0) is ignored and answers 0, as
# perfbench's zoo model does.
import numpy as np
import triton_python_backend_utils as pb_utils


def flag(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flatten()[0])


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if not flag(request, "READY"):
                total = 0
            else:
                key = flag(request, "CORRID")
                total = (0 if flag(request, "START") else self.sums.get(key, 0)) + int(x.flatten()[0])
                if flag(request, "END"):
                    self.sums.pop(key, None)
                else:
                    self.sums[key] = total
            out = np.full(x.shape, total, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
