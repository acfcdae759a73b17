# Identity for any configured signature: output i = input i (python backend, for the real Triton).
import triton_python_backend_utils as pb_utils
import json


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.pairs = [(i["name"], o["name"]) for i, o in zip(config["input"], config["output"])]

    def execute(self, requests):
        responses = []
        for request in requests:
            outs = [pb_utils.Tensor(o, pb_utils.get_input_tensor_by_name(request, i).as_numpy()) for i, o in self.pairs]
            responses.append(pb_utils.InferenceResponse(outs))
        return responses
