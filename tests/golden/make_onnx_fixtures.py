#!/usr/bin/python3
"""Writes small ONNX models and their PyTorch reference results to
tests/golden/onnx/, for Tessera's ONNX import tests.

Run with Debian's python3 (torch 1.13, numpy, python3-onnx 1.12), from anywhere:

    /usr/bin/python3 tests/golden/make_onnx_fixtures.py

The files are committed, so the C++ tests do not need Python; rerun this script
only to change the fixtures. For every model <name> it writes

    <name>.onnx                        opset 17, constant-folded, eval mode
    <name>.input.npy / .output.npy     batch N = 3 (encoder: N = 3, S = 7)
    <name>.input2.npy / .output2.npy   batch N = 2 (encoder: N = 2, S = 5), to
                                       test the dynamic axes

All arrays are float32, C order; inputs are standard normal from a seeded
generator. The models (torch.manual_seed(0)):

    mlp       Flatten, Linear(784, 64), ReLU, Linear(64, 10); x: [N, 1, 28, 28]
    cnn       two Conv3x3-BatchNorm-ReLU-MaxPool2 stages (8 and 16 channels),
              Flatten, Linear(784, 32), ReLU, Dropout(0.25), Linear(32, 10);
              x: [N, 1, 28, 28]
    resnet18  the ResNet-18 topology of torchvision (BasicBlock, layers
              [2, 2, 2, 2], ImageNet stem, same module names) but with widths
              8/16/32/64 instead of 64/128/256/512 to keep the file small
              (~0.7 MB instead of ~45 MB); 10 classes; x: [N, 3, 64, 64]
    encoder   nn.TransformerEncoderLayer(d_model=32, nhead=4,
              dim_feedforward=64, dropout=0.0, batch_first=True), post-norm,
              ReLU; x: [N, S, 32], N and S dynamic

Every BatchNorm gets non-trivial running statistics, weight and bias (random
affine parameters, then the exact statistics of three random training batches)
before the model is put in eval mode. The models are exported with
training=TrainingMode.PRESERVE (they are in eval mode, so this is an inference
export): with the default TrainingMode.EVAL, torch 1.13 folds every
BatchNorm into the preceding Conv and the files would hold no
BatchNormalization node at all.

The encoder's reference outputs are computed with autograd enabled, which keeps
torch 1.13 off TransformerEncoderLayer's fused inference fast path
(torch._transformer_encoder_layer_fwd): the reference then comes from the same
op-by-op code path that torch.onnx.export traces. (The export itself needed no
workaround: export runs with autograd enabled, so it never takes the fast path.)
"""
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

OUT_DIR = Path(__file__).resolve().parent / "onnx"
OPSET = 17
RESNET_WIDTHS = (8, 16, 32, 64)  # torchvision: (64, 128, 256, 512)


# --- ResNet-18 (torchvision's module layout, reduced widths) ------------------

def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, 3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, layers=(2, 2, 2, 2), widths=(64, 128, 256, 512), num_classes=1000):
        super().__init__()
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, self.inplanes, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(widths[0], layers[0])
        self.layer2 = self._make_layer(widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * BasicBlock.expansion, num_classes)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * BasicBlock.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * BasicBlock.expansion, stride),
                nn.BatchNorm2d(planes * BasicBlock.expansion),
            )
        layers = [BasicBlock(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * BasicBlock.expansion
        layers += [BasicBlock(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet18(num_classes, widths):
    """torchvision.models.resnet18's topology; torchvision is not used (Debian's
    python3 here has none, and its BasicBlock cannot be made narrower)."""
    return ResNet((2, 2, 2, 2), widths, num_classes)


# --- the models ---------------------------------------------------------------

def randomize_batchnorm(model, input_shape, passes=3):
    """Random BN weight/bias, then `passes` training-mode forward passes on
    random batches (mean 0.5, std 2). The passes run with momentum=None
    (cumulative average), so running_mean/running_var end up as the real
    statistics of those batches, well away from 0/1; momentum is then put
    back to PyTorch's default 0.1."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    with torch.no_grad():
        for m in bns:
            m.weight.uniform_(0.5, 1.5)
            m.bias.uniform_(-0.5, 0.5)
            m.momentum = None
        model.train()
        for _ in range(passes):
            model(torch.randn(*input_shape) * 2.0 + 0.5)
    for m in bns:
        m.momentum = 0.1
    model.eval()


def make_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))


def make_cnn():
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 32), nn.ReLU(), nn.Dropout(0.25), nn.Linear(32, 10),
    )
    randomize_batchnorm(model, (16, 1, 28, 28))
    return model


def make_resnet18():
    model = resnet18(num_classes=10, widths=RESNET_WIDTHS)
    randomize_batchnorm(model, (8, 3, 64, 64))
    return model


def make_encoder():
    return nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64,
                                      dropout=0.0, batch_first=True)


# name: (factory, input shape, second input shape, dynamic axes of "x")
MODELS = {
    "mlp": (make_mlp, (3, 1, 28, 28), (2, 1, 28, 28), {0: "N"}),
    "cnn": (make_cnn, (3, 1, 28, 28), (2, 1, 28, 28), {0: "N"}),
    "resnet18": (make_resnet18, (3, 3, 64, 64), (2, 3, 64, 64), {0: "N"}),
    "encoder": (make_encoder, (3, 7, 32), (2, 5, 32), {0: "N", 1: "S"}),
}


# --- export -------------------------------------------------------------------

def reference(model, x):
    # Autograd stays enabled (see the docstring); detach afterwards.
    return model(x).detach().numpy().astype(np.float32)


def save_npy(path, array):
    np.save(path, np.ascontiguousarray(array, dtype=np.float32))


def export(name, factory, shape, shape2, axes, seed):
    model = factory().eval()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    x2 = torch.randn(*shape2, generator=gen)

    path = OUT_DIR / f"{name}.onnx"
    with warnings.catch_warnings():
        # PRESERVE + constant folding warns about models in training mode;
        # ours are in eval mode, so folding only touches constants.
        warnings.filterwarnings("ignore", message="It is recommended that constant folding")
        torch.onnx.export(
            model, (x,), str(path),
            opset_version=OPSET,
            do_constant_folding=True,
            input_names=["x"],
            output_names=["output"],
            dynamic_axes={"x": axes, "output": axes},
            training=torch.onnx.TrainingMode.PRESERVE,  # keeps BatchNormalization nodes
        )
    for suffix, inp in (("", x), ("2", x2)):
        save_npy(OUT_DIR / f"{name}.input{suffix}.npy", inp.numpy())
        save_npy(OUT_DIR / f"{name}.output{suffix}.npy", reference(model, inp))
    return path


def describe(name, path):
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    ops = sorted({node.op_type for node in model.graph.node})
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    inputs = [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
              for i in model.graph.input]
    outputs = [(o.name, [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim])
               for o in model.graph.output]
    print(f"{name}: {path.stat().st_size / 1024:.1f} KB, opset {opset}, "
          f"{len(model.graph.node)} nodes, check_model OK")
    print(f"  ops: {', '.join(ops)}")
    print(f"  inputs: {inputs}  outputs: {outputs}")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for i, (name, (factory, shape, shape2, axes)) in enumerate(MODELS.items()):
        describe(name, export(name, factory, shape, shape2, axes, seed=1000 + i))
    total = sum(p.stat().st_size for p in OUT_DIR.iterdir() if p.is_file())
    print(f"total {OUT_DIR.relative_to(OUT_DIR.parents[2])}: {total / 1024:.1f} KB")


if __name__ == "__main__":
    main()
