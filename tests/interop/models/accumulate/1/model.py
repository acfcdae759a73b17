# Running sum per sequence, keyed by the correlation id the sequence batcher passes in CORRID.
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sums = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            corrid = pb_utils.get_input_tensor_by_name(request, "CORRID").as_numpy()
            key = int(corrid.flatten()[0])
            total = (0 if int(start.flatten()[0]) else self.sums.get(key, 0)) + int(x.flatten()[0])
            self.sums[key] = total
            out = np.full(x.shape, total, dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out)]))
        return responses
