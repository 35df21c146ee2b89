#!/usr/bin/python3
"""The quick start's CNN (examples/configs/fashion_mnist_cnn.yaml), written in
Python as a PyTorch user writes it: the model, the loop, evaluation and a
safetensors checkpoint. About 90% test accuracy in 2 epochs.

    PYTHONPATH=build/python /usr/bin/python3 examples/python/fashion_mnist_cnn.py [--epochs 2] [--steps N]
"""
import argparse
import gzip
import pathlib
import time

import numpy as np

import tessera
import tessera.nn as nn
import tessera.nn.functional as F

DATA = pathlib.Path("/usr/share/datasets/fashion-mnist")  # Debian's dataset-fashion-mnist


def idx(path):
    """An IDX file (MNIST's format) as a NumPy array; the header is checked against the file's size."""
    data = gzip.open(path, "rb").read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 8:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    if 4 + 4 * ndim + int(np.prod(dims)) != len(data):
        raise ValueError(f"{path}: the header says {dims}, the file holds {len(data)} bytes")
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    x = tessera.from_numpy(idx(DATA / f"{prefix}-images-idx3-ubyte.gz")).float().unsqueeze(1) / 255
    y = tessera.from_numpy(idx(DATA / f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64))
    return (x - 0.2860) / 0.3530, y


class LeNet(nn.Module):
    def __init__(self, channels=(32, 64), hidden=128, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels[0], 3, padding=1)
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, padding=1)
        self.fc1 = nn.Linear(channels[1] * 7 * 7, hidden)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    with tessera.no_grad():
        for i in range(0, x.shape[0], batch):
            correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return correct / x.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: the whole epochs)")
    ap.add_argument("--output", default="runs/fashion_mnist_cnn_python.safetensors")
    a = ap.parse_args()
    tessera.manual_seed(0)
    x_train, y_train = load("train")
    x_test, y_test = load("test")
    model = LeNet()
    opt = tessera.optim.Adam(model.parameters(), lr=a.lr)
    rng = np.random.default_rng(0)
    step, t0 = 0, time.time()
    for epoch in range(a.epochs):
        order = tessera.from_numpy(rng.permutation(x_train.shape[0]).astype(np.int64))
        for i in range(0, x_train.shape[0], a.batch_size):
            idx_ = order[i:i + a.batch_size]
            loss = F.cross_entropy(model(x_train[idx_]), y_train[idx_])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 200 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f} ({time.time() - t0:.1f} s)", flush=True)
            if a.steps and step >= a.steps:
                break
        if a.steps and step >= a.steps:
            break
    accuracy = evaluate(model, x_test, y_test)
    pathlib.Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    tessera.save_file(dict(model.state_dict()), a.output)
    print(f"test accuracy {accuracy:.4f} after {step} steps ({time.time() - t0:.1f} s); weights in {a.output}")


if __name__ == "__main__":
    main()
