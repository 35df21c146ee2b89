"""tessera.compile, export/load and ONNX from Python; the inference server
serving a model compiled from Python."""
import json
import urllib.request

import numpy as np
import pytest

import tessera
import tessera.nn as nn
import tessera.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.fc2(self.drop(F.gelu(self.fc1(x))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(x.flatten(1))


def close(a, b, tol=1e-5):
    return np.allclose(a.detach().numpy(), b.detach().numpy(), atol=tol, rtol=tol)


def test_compile_matches_eager_and_traces_once_per_signature():
    tessera.manual_seed(0)
    model = MLP().eval()
    f = tessera.compile(model, dynamic=True)
    x = tessera.randn(3, 8)
    with tessera.no_grad():
        assert close(f(x), model(x))
        y5 = tessera.randn(5, 8)
        assert close(f(y5), model(y5))
    assert f.traces == 1  # batch 3 and 5 share the dynamic-batch graph
    assert "linear" in f.graph() or "fused" in f.graph()
    # A new parameter object or train mode: another graph.
    model.train()
    tessera.manual_seed(1)
    a = f(x)
    assert f.traces == 2 and a.shape == (3, 4)


def test_compile_a_function_and_a_decorator():
    @tessera.compile
    def f(a, b):
        return (a @ b).relu().sum(-1)

    a, b = tessera.randn(4, 6), tessera.randn(6, 3)
    assert close(f(a, b), (a @ b).relu().sum(-1))


def test_export_and_load_a_graph_and_onnx(tmp_path):
    tessera.manual_seed(0)
    model = CNN()
    model(tessera.randn(8, 1, 8, 8))  # batch statistics move the running stats
    model.eval()
    x = tessera.randn(2, 1, 8, 8)
    with tessera.no_grad():
        want = model(x)
    tessera.export(model, x, tmp_path / "cnn.tsr", dynamic=True)
    m = tessera.load_model(tmp_path / "cnn.tsr")
    assert close(m(x), want, 1e-4)
    assert m.inputs[0][2] == ["B", "1", "8", "8"]
    x5 = tessera.randn(5, 1, 8, 8)
    with tessera.no_grad():
        assert close(m(x5), model(x5), 1e-4)  # another batch size through the dynamic dimension
    tessera.onnx.export(model, (x,), tmp_path / "cnn.onnx", input_names=["x"], dynamic_axes={"x": {0: "batch"}})
    o = tessera.onnx.load(tmp_path / "cnn.onnx")
    assert close(o(x), want, 1e-4)
    onnx = pytest.importorskip("onnx")
    onnx.checker.check_model(onnx.load(str(tmp_path / "cnn.onnx")))


def test_an_onnx_file_from_pytorch_runs(tmp_path):
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 2)).eval()
    x = torch.randn(3, 5)
    torch.onnx.export(tm, (x,), str(tmp_path / "t.onnx"), input_names=["x"], dynamic_axes={"x": {0: "b"}},
                      opset_version=17)
    m = tessera.onnx.load(tmp_path / "t.onnx")
    got = m(tessera.from_dlpack(x))
    assert np.allclose(got.numpy(), tm(x).detach().numpy(), atol=1e-5)


def test_a_bad_onnx_file_is_an_error(tmp_path):
    (tmp_path / "bad.onnx").write_bytes(b"\x08\x07garbage")
    with pytest.raises(tessera.Error):
        tessera.onnx.load(tmp_path / "bad.onnx")


def test_serving_a_model_compiled_from_python():
    tessera.manual_seed(0)
    model = MLP().eval()
    with tessera.serve.Server(port=0) as server:
        server.serve("mlp", model, tessera.randn(1, 8), max_queue_delay_us=100)
        x = tessera.randn(2, 8)
        body = {"inputs": [{"name": "x0", "shape": [2, 8], "datatype": "FP32", "data": x.numpy().ravel().tolist()}]}
        req = urllib.request.Request(f"http://127.0.0.1:{server.port}/v2/models/mlp/infer",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        reply = json.loads(urllib.request.urlopen(req, timeout=30).read())
        out = reply["outputs"][0]
        assert out["shape"] == [2, 4]
        with tessera.no_grad():
            assert np.allclose(np.array(out["data"], dtype=np.float32).reshape(2, 4), model(x).numpy(), atol=1e-5)
        meta = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v2/models/mlp", timeout=30).read())
        assert meta["inputs"][0]["shape"] == [-1, 8]


def test_static_int8_of_a_python_model_keeps_its_outputs():
    tessera.manual_seed(0)
    model = CNN()
    model(tessera.randn(16, 1, 8, 8))
    model.eval()
    calibration = [tessera.randn(8, 1, 8, 8) for _ in range(4)]
    q, report = tessera.quantization.quantize_static(model, tessera.randn(2, 1, 8, 8), calibration)
    assert "conv2d" in report
    x = tessera.randn(4, 1, 8, 8)
    with tessera.no_grad():
        want = model(x).numpy()
    got = q(x).numpy()
    assert np.abs(got - want).max() < 0.1 * max(1.0, np.abs(want).max())
    with pytest.raises(ValueError, match="calibration"):
        tessera.quantization.quantize_static(model, x, [])


def test_weight_quantization_and_pruning_of_a_cpp_model():
    tessera.manual_seed(0)
    m = nn.zoo.build("mlp", in_features=64, hidden=[64], num_classes=64)
    x = tessera.randn(4, 64)
    with tessera.no_grad():
        before = m(x).numpy()
    report = tessera.quantization.prune(m, 0.5)
    assert "50.00%" in report
    masks = dict(m.named_buffers())  # the Python tree follows the pruned module: weight_orig and weight_mask
    assert set(masks) == {"net.0.weight_mask", "net.2.weight_mask"}
    assert sum((b == 0).sum().item() for b in masks.values()) == 4096
    opt = tessera.optim.SGD(m.parameters(), lr=0.1)
    tessera.nn.functional.mse_loss(m(x), tessera.zeros(4, 64)).backward()
    opt.step()  # masked weights stay out of the product
    tessera.quantization.make_pruning_permanent(m)
    w = dict(m.named_parameters())["net.0.weight"]
    assert (w == 0).sum().item() == 2048
    q = nn.zoo.build("mlp", in_features=64, hidden=[64], num_classes=64)
    tessera.quantization.quantize_weights(q, "q8_0")
    with tessera.no_grad():
        assert q(x).shape == (4, 64)
    assert before.shape == (4, 64)


def test_pruning_and_qat_of_a_python_model():
    """A Python model's nn.Linear layers become the C++ layers holding the same
    weights (the model computes the same), which prune and QAT act on."""
    tessera.manual_seed(0)
    model = MLP().eval()
    x = tessera.randn(5, 8)
    with tessera.no_grad():
        before = model(x).numpy()
    report = tessera.quantization.prune(model, 0.5, skip=["fc2"])
    assert isinstance(model.fc1, nn.CppModule) and isinstance(model.fc2, nn.CppModule)
    assert report.startswith("fc1:") and "fc2" not in report
    assert set(dict(model.named_buffers())) == {"fc1.weight_mask"}
    assert (dict(model.named_buffers())["fc1.weight_mask"] == 0).sum().item() == 64
    with pytest.raises(TypeError, match="to_cpp"):
        tessera.quantization.prune(nn.Linear(4, 4))
    with pytest.raises(TypeError, match="no Linear or Conv layer"):
        tessera.quantization.prune(nn.Sequential(nn.ReLU()))
    tessera.manual_seed(0)
    twin = nn.cpp.to_cpp(MLP().eval())
    with tessera.no_grad():
        assert np.allclose(twin(x).numpy(), before, atol=1e-6)  # the C++ layers compute what the Python ones did

    # QAT: a Python model trains with int8 rounding; a C++ model converts with what it learned.
    tessera.manual_seed(0)
    report = tessera.quantization.prepare_qat(MLP())
    assert "fc1" in report and "fc2" in report
    cpp_model = nn.zoo.build("mlp", in_features=8, hidden=[32], num_classes=4)
    assert "2 layers fake-quantized" in tessera.quantization.prepare_qat(cpp_model)
    opt = tessera.optim.Adam(cpp_model.parameters(), lr=0.01)
    data = tessera.randn(64, 8)
    target = data[:, :4] * 2
    for _ in range(30):
        loss = F.mse_loss(cpp_model(data), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    cpp_model.eval()
    with tessera.no_grad():
        fake = cpp_model(data).numpy()  # eval mode: the int8 rounding with the observed scales
    int8, text = tessera.quantization.convert_qat(cpp_model, data[:2])
    assert "int8" in text
    assert np.abs(int8(data).numpy() - fake).max() < 0.05 * np.abs(fake).max()
    with pytest.raises(TypeError, match="convert_qat"):
        tessera.quantization.convert_qat(MLP(), data[:2])
