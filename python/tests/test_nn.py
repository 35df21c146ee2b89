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
