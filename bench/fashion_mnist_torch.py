#!/usr/bin/python3
"""PyTorch reference for Tessera's default training run (accuracy parity).

    MALLOC_MMAP_THRESHOLD_=1000000000 MALLOC_TRIM_THRESHOLD_=1000000000 OMP_NUM_THREADS=2 \
        /usr/bin/python3 bench/fashion_mnist_torch.py --seed 0 [--threads 2]

Trains exactly examples/configs/fashion_mnist_cnn.yaml in PyTorch:
  * Fashion-MNIST from Debian's dataset-fashion-mnist (gzip IDX files), images scaled
    to [0, 1], then normalised with mean 0.2860 / std 0.3530, shape [N, 1, 28, 28];
  * LeNet-style CNN: Conv2d(1,32,3,p=1) ReLU MaxPool2d(2) Conv2d(32,64,3,p=1) ReLU
    MaxPool2d(2) Flatten Linear(3136,128) ReLU Dropout(0.25) Linear(128,10), default init;
  * Adam lr 1e-3 + OneCycleLR(max_lr=0.003, total_steps = epochs * ceil(60000/64),
    pct_start 0.3, cos, cycle_momentum (beta1 0.95 -> 0.85 -> 0.95), div 25, final_div 1e4),
    stepped after every optimizer step;
  * batch 64, reshuffled every epoch, drop_last False, 2 epochs;
  * test accuracy on the 10,000 test images in eval mode.

Prints ONE JSON line: {"seed", "test_accuracy", "train_seconds", "threads"}.
train_seconds covers the training loop only (batching, forward, backward, step,
scheduler), not loading the files or the final evaluation -- like Tessera's
"training time".
"""
import argparse
import gzip
import json
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA_DIR = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    return arr.reshape(dims)


def load(split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(os.path.join(DATA_DIR, f"{prefix}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(DATA_DIR, f"{prefix}-labels-idx1-ubyte.gz"))
    x = images.astype(np.float32) / 255.0
    x = (x - MEAN) / STD
    x = torch.from_numpy(np.ascontiguousarray(x.reshape(-1, 1, 28, 28), dtype=np.float32))
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = load("train")
    x_test, y_test = load("test")
    n = x_train.size(0)

    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    steps_per_epoch = math.ceil(n / args.batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.003, total_steps=args.epochs * steps_per_epoch,
        pct_start=0.3, anneal_strategy="cos", cycle_momentum=True,
        base_momentum=0.85, max_momentum=0.95, div_factor=25.0, final_div_factor=1e4)

    model.train()
    t0 = time.perf_counter()
    for _ in range(args.epochs):
        perm = torch.randperm(n)
        for i in range(0, n, args.batch):  # drop_last False: the last batch has 32 images
            idx = perm[i:i + args.batch]
            xb, yb = x_train[idx], y_train[idx]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
            loss.item()  # as Tessera's trainer does every step
    train_seconds = time.perf_counter() - t0

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, x_test.size(0), 1000):
            pred = model(x_test[i:i + 1000]).argmax(dim=1)
            correct += int((pred == y_test[i:i + 1000]).sum())
    acc = correct / x_test.size(0)

    print(json.dumps({"seed": args.seed, "test_accuracy": acc, "train_seconds": round(train_seconds, 2),
                      "threads": args.threads}))


if __name__ == "__main__":
    main()
