"""ONNX: export a Module or function (opset 17) and load an ONNX file to run,
as torch.onnx.export and onnxruntime.InferenceSession would."""
from ._compile import _capture, load_model


def export(model, args, f, input_names=None, output_names=None, dynamic_axes=None, opset_version=17, **kwargs):
    """torch.onnx.export's arguments: dynamic_axes={"x": {0: "batch"}} keys
    input_names. Output names are the graph's own."""
    if opset_version != 17:
        raise ValueError(f"onnx.export writes opset 17, not {opset_version}")
    _capture(model, args, dynamic_axes, input_names).export_onnx(str(f))


def load(path):
    """An ONNX file as a callable model (outputs as tensors)."""
    return load_model(path)
