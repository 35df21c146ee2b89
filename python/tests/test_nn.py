"""nn from Python: Modules subclassed in Python, registration, state dicts
through safetensors, optimizers, and training the Fashion-MNIST MLP."""
import gzip
import os
import pathlib

import numpy as np
import pytest

import tessera
import tessera.nn as nn
import tessera.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)
        self.scale = nn.Parameter(tessera.ones(1))
        self.register_buffer("steps", tessera.zeros(1))

    def forward(self, x):
        self.steps += 1
        return self.fc2(self.act(self.fc1(x))) * self.scale


def test_attributes_register_parameters_buffers_and_modules():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in net.named_buffers()] == ["steps"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert sum(p.numel() for p in net.parameters()) == 4 * 8 + 8 + 8 * 2 + 2 + 1
    assert set(net.state_dict()) == {"scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    net.eval()
    assert not net.fc1.training
    net.train()
    assert net.fc1.training
    assert "Linear(in_features=4, out_features=8, bias=True)" in repr(net)
    with pytest.raises(TypeError, match="Parameter"):
        net.scale = tessera.ones(1)


def test_state_dict_round_trips_through_safetensors(tmp_path):
    net = Net()
    path = str(tmp_path / "net.safetensors")
    tessera.save_file(dict(net.state_dict()), path)
    other = Net()
    other.load_state_dict(tessera.load_file(path))
    x = tessera.randn(3, 4)
    assert np.allclose(net(x).detach().numpy(), other(x).detach().numpy())
    with pytest.raises(tessera.Error, match="missing keys"):
        other.load_state_dict({"fc1.weight": tessera.zeros(8, 4)})
    bad = dict(net.state_dict())
    bad["fc1.weight"] = tessera.zeros(3, 3)
    with pytest.raises(tessera.Error, match="shape"):
        other.load_state_dict(bad)
    (tmp_path / "junk.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(tessera.Error):
        tessera.load_file(str(tmp_path / "junk.safetensors"))


def test_hooks_and_training_mode():
    net = Net()
    seen = []
    h = net.fc1.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    net(tessera.randn(5, 4))
    h.remove()
    net(tessera.randn(5, 4))
    assert seen == [(5, 8)]
    assert net.steps.item() == 2
    d = nn.Dropout(0.5)
    x = tessera.ones(1000)
    assert (d(x) == 0).sum().item() > 300
    d.eval()
    assert (d(x) == x).all().item()


def test_optimizers_match_the_update_rules():
    w = nn.Parameter(tessera.tensor([1.0, -2.0]))
    opt = tessera.optim.SGD([w], lr=0.1, momentum=0.9)
    for _ in range(2):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    # PyTorch's SGD with momentum: v1 = g0, w1 = w0 - lr v1; v2 = 0.9 v1 + g1, w2 = w1 - lr v2.
    w0 = np.array([1.0, -2.0])
    v = 2 * w0
    w1 = w0 - 0.1 * v
    v = 0.9 * v + 2 * w1
    assert np.allclose(w.detach().numpy(), w1 - 0.1 * v)
    opt.param_groups[0]["lr"] = 0.0
    opt.zero_grad()
    (w * w).sum().backward()
    before = w.detach().numpy().copy()
    opt.step()
    assert np.allclose(w.detach().numpy(), before)  # lr 0 leaves the weights (momentum is scaled by lr too)
    a = nn.Parameter(tessera.tensor([0.5]))
    adam = tessera.optim.Adam([a], lr=0.01, betas=(0.8, 0.99))
    (a * 3).sum().backward()
    adam.step()
    assert a.item() == pytest.approx(0.5 - 0.01, rel=1e-5)  # Adam's first step moves by lr
    groups = tessera.optim.AdamW([{"params": [a], "lr": 0.5}], lr=0.1)
    assert groups.param_groups[0]["lr"] == 0.5


def _idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not FASHION.exists(), reason="dataset-fashion-mnist is not installed")
def test_trains_the_fashion_mnist_mlp_from_python(source_dir, tmp_path):
    """examples/configs/fashion_mnist_mlp.yaml's model and optimizer (784-256-256-10, Adam 1e-3,
    batch 128), one epoch, written as a PyTorch user writes it."""
    tessera.manual_seed(0)
    x_train = tessera.from_numpy(_idx(FASHION / "train-images-idx3-ubyte.gz").reshape(-1, 784)).float() / 255
    y_train = tessera.from_numpy(_idx(FASHION / "train-labels-idx1-ubyte.gz").astype(np.int64))
    x_test = tessera.from_numpy(_idx(FASHION / "t10k-images-idx3-ubyte.gz").reshape(-1, 784)).float() / 255
    y_test = tessera.from_numpy(_idx(FASHION / "t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = 0.2860, 0.3530
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = tessera.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    n = x_train.shape[0]
    order = tessera.from_numpy(np.random.default_rng(0).permutation(n).astype(np.int64))
    for start in range(0, n, 128):
        idx = order[start:start + 128]
        loss = loss_fn(model(x_train[idx]), y_train[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with tessera.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    # The C++ Trainer on the same config, one epoch: the Python loop reaches its accuracy.
    cpp = tessera.train.fit(source_dir / "examples/configs/fashion_mnist_mlp.yaml",
                            overrides=["train.epochs=1", "train.num_workers=0"], output=tmp_path / "run")
    assert accuracy > 0.83 and accuracy >= cpp["eval"]["accuracy"] - 0.015, (accuracy, cpp["eval"])


def test_schedulers_follow_pytorch():
    w = nn.Parameter(tessera.ones(2))
    opt = tessera.optim.SGD([w], lr=0.1, momentum=0.9)
    s = tessera.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        opt.step()
        s.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.025])
    torch = pytest.importorskip("torch")
    tw = torch.nn.Parameter(torch.ones(2))
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9)
    ts = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.3, total_steps=20)
    opt2 = tessera.optim.SGD([nn.Parameter(tessera.ones(2))], lr=0.1, momentum=0.9)
    s2 = tessera.optim.lr_scheduler.OneCycleLR(opt2, max_lr=0.3, total_steps=20)
    for _ in range(19):
        topt.step()
        ts.step()
        opt2.step()
        s2.step()
        assert s2.get_last_lr()[0] == pytest.approx(ts.get_last_lr()[0], rel=1e-6)


def test_the_profiler_records_ops_and_writes_a_trace(tmp_path):
    import json as _json
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = tessera.optim.Adam(model.parameters())
    with tessera.profiler.profile() as prof:
        model(tessera.randn(4, 8)).sum().backward()
        opt.step()
    names = {s["name"] for s in prof.key_averages()}
    assert "linear" in names and "relu" in names
    assert "linear" in prof.table()
    prof.export_chrome_trace(tmp_path / "trace.json")
    trace = _json.loads((tmp_path / "trace.json").read_text())
    assert trace["traceEvents"]


@pytest.mark.parametrize("name,args,kwargs,shape", [
    ("Linear", (6, 4), {}, (3, 6)),
    ("Conv2d", (3, 4, (3, 1)), {"stride": 2, "padding": 1}, (2, 3, 7, 6)),
    ("Conv1d", (3, 4, 3), {"padding": "same", "dilation": 2}, (2, 3, 9)),
    ("ConvTranspose2d", (3, 2, 3), {"stride": 2, "output_padding": 1}, (1, 3, 4, 5)),
    ("BatchNorm2d", (3,), {"momentum": None}, (4, 3, 2, 2)),
    ("LayerNorm", ([2, 5],), {"eps": 1e-3}, (3, 2, 5)),
    ("RMSNorm", (5,), {}, (3, 5)),
    ("GroupNorm", (2, 4), {}, (2, 4, 3)),
    ("Embedding", (10, 4), {"padding_idx": 0}, None),
    ("MaxPool2d", (3,), {"stride": 2, "padding": 1}, (1, 2, 7, 7)),
    ("AvgPool2d", (2,), {"count_include_pad": False, "padding": 1}, (1, 2, 5, 5)),
    ("AdaptiveAvgPool2d", ((2, 3),), {}, (1, 2, 5, 7)),
    ("GELU", (), {"approximate": "tanh"}, (4, 3)),
    ("Softplus", (), {"beta": 2.0}, (4, 3)),
    ("LogSoftmax", (), {"dim": 0}, (4, 3)),
    ("Flatten", (), {"start_dim": 0}, (2, 3, 4)),
])
def test_the_cpp_layers_take_torch_nn_arguments(name, args, kwargs, shape):
    """tessera.nn.cpp.<Layer>(...) is the C++ layer built by the same arguments
    as the Python layer of that name: same parameters (names and shapes), same
    outputs once it holds the same weights, same gradients."""
    py_layer, cpp_layer = getattr(nn, name)(*args, **kwargs), getattr(nn.cpp, name)(*args, **kwargs)
    assert isinstance(cpp_layer, nn.CppModule) and isinstance(cpp_layer, nn.Module)
    state = py_layer.state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == {k: tuple(v.shape) for k, v in cpp_layer.state_dict().items()}
    cpp_layer.load_state_dict(state)
    x = tessera.randint(0, 10, (3, 5)) if shape is None else tessera.randn(*shape)
    outs = []
    for layer in (py_layer, cpp_layer):
        xi = x.clone().requires_grad_(x.is_floating_point())
        y = layer(xi)
        (y * tessera.arange(y.numel()).reshape(y.shape).float()).sum().backward()
        outs.append((y.detach().numpy(), xi.grad.numpy() if x.is_floating_point() else None,
                     {k: p.grad.numpy() for k, p in layer.named_parameters()}))
    (y0, g0, p0), (y1, g1, p1) = outs
    assert np.allclose(y0, y1, atol=1e-5), name
    if g0 is not None:
        assert np.allclose(g0, g1, atol=1e-4), name
    for k in p0:
        assert np.allclose(p0[k], p1[k], atol=1e-4), (name, k)
    x2 = x if shape is None else x * 2
    py_layer(x2), cpp_layer(x2)  # buffers (batch norm's running statistics) move alike
    s0, s1 = py_layer.state_dict(), cpp_layer.state_dict()
    for k in s0:
        assert np.allclose(s0[k].numpy(), s1[k].numpy(), atol=1e-5), (name, k)


def test_the_layers_only_cpp_has():
    rng = np.random.default_rng(0)
    # Bilinear: y_k = x1^T W_k x2 + b_k.
    bl = nn.Bilinear(3, 4, 2)
    x1, x2 = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)
    expect = np.einsum("ni,kij,nj->nk", x1, bl.weight.detach().numpy(), x2) + bl.bias.detach().numpy()
    assert np.allclose(bl(tessera.tensor(x1), tessera.tensor(x2)).detach().numpy(), expect, atol=1e-5)
    # MultiheadAttention: PyTorch's parameters and key_padding_mask, against the formula.
    E, H, L = 8, 2, 4
    mha = nn.MultiheadAttention(E, H, batch_first=True)
    assert [k for k, _ in mha.named_parameters()] == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    x = rng.standard_normal((2, L, E)).astype(np.float32)
    pad = np.array([[False, False, False, True], [False, False, False, False]])
    out, weights = mha(tessera.tensor(x), tessera.tensor(x), tessera.tensor(x), key_padding_mask=tessera.tensor(pad))
    assert weights is None
    w, b = mha.in_proj_weight.detach().numpy(), mha.in_proj_bias.detach().numpy()
    q, k, v = np.split(x @ w.T + b, 3, axis=-1)
    heads = lambda t: t.reshape(2, L, H, E // H).transpose(0, 2, 1, 3)
    s = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(E // H)
    s = np.where(pad[:, None, None, :], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ heads(v)).transpose(0, 2, 1, 3).reshape(2, L, E)
    o = o @ mha.out_proj.weight.detach().numpy().T + mha.out_proj.bias.detach().numpy()
    assert np.allclose(out.detach().numpy(), o, atol=1e-5)
    enc = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=True)
    assert enc(tessera.tensor(x), src_key_padding_mask=tessera.tensor(pad)).shape == (2, L, E)
    assert nn.Unflatten(1, (2, 4))(tessera.ones(3, 8)).shape == (3, 2, 4)
    with pytest.raises(TypeError, match="kernel_size must be an int or a pair of ints, got str"):
        nn.cpp.Conv2d(3, 4, "3")
    with pytest.raises(tessera.Error, match="padding must be a number, a pair, 'same' or 'valid'"):
        nn.cpp.Conv2d(3, 4, 3, padding="full")
    assert sorted(nn.cpp.LAYERS) == sorted(set(nn.cpp.LAYERS))
    assert {"Linear", "Conv2d", "MultiheadAttention", "DecoderBlock", "CrossEntropyLoss"} <= set(nn.cpp.LAYERS)


def test_a_cpp_linear_trains_inside_a_python_module():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.cpp.Linear(4, 16)     # C++
            self.head = nn.Linear(16, 1)         # Python

        def forward(self, x):
            return self.head(F.relu(self.body(x)))

    tessera.manual_seed(0)
    net = Net()
    assert [k for k, _ in net.named_parameters()] == ["body.weight", "body.bias", "head.weight", "head.bias"]
    opt = tessera.optim.Adam(net.parameters(), lr=0.01)
    x = tessera.randn(64, 4)
    y = (x[:, :1] * 2 - x[:, 1:2]).detach()
    losses = []
    for _ in range(100):
        loss = F.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0]
    loss_fn = nn.cpp.CrossEntropyLoss(label_smoothing=0.1)
    assert abs(loss_fn(tessera.zeros(2, 4), tessera.tensor([0, 3])).item() - np.log(4)) < 1e-6
