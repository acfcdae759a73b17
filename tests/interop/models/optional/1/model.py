# OUTPUT0 = INPUT0 + INPUT1 when INPUT1 is present, else INPUT0.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            extra = pb_utils.get_input_tensor_by_name(request, "INPUT1")
            if extra is not None:
                x = x + extra.as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
