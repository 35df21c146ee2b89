"""examples/python/ runs: the quick start's CNN in Python, for a few steps."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not FASHION.exists(), reason="dataset-fashion-mnist is not installed")
def test_the_cnn_example_trains(source_dir, tmp_path):
    out = tmp_path / "cnn.safetensors"
    r = subprocess.run([sys.executable, str(source_dir / "examples/python/fashion_mnist_cnn.py"), "--epochs", "1",
                        "--steps", "60", "--output", str(out)], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    m = re.search(r"test accuracy ([0-9.]+) after 60 steps", r.stdout)
    assert m, r.stdout
    assert float(m.group(1)) > 0.6  # 60 steps of Adam already get most of the way (2 epochs: ~0.9)
    import tessera
    weights = tessera.load_file(str(out))
    assert set(weights) == {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight", "fc1.bias",
                            "fc2.weight", "fc2.bias"}
