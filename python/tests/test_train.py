"""tessera.train.fit: a YAML config trained by the C++ Trainer from Python,
resumed, and stopped by Ctrl-C into a KeyboardInterrupt with a checkpoint."""
import os
import signal
import subprocess
import sys
import time

import pytest

import tessera

FASHION = "/usr/share/datasets/fashion-mnist"


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist is not installed")
def test_fit_trains_a_config_and_resumes(source_dir, tmp_path):
    cfg = source_dir / "examples/configs/fashion_mnist_mlp.yaml"
    s = tessera.train.fit(cfg, overrides=["train.epochs=1", "train.num_workers=0"], output=tmp_path / "run")
    assert s["steps"] == 469 and s["eval"]["accuracy"] > 0.83
    assert os.path.isdir(s["checkpoint"])
    s2 = tessera.train.fit(cfg, overrides=["train.epochs=2", "train.num_workers=0"], output=tmp_path / "run",
                           resume="latest")
    assert s2["steps"] == 938  # one more epoch from the checkpoint
    with pytest.raises(tessera.Error, match="epochs"):
        tessera.train.fit(cfg, overrides=["train.epochs=-1"], output=tmp_path / "bad")
    with pytest.raises(TypeError):
        tessera.train.fit(42)


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist is not installed")
def test_ctrl_c_checkpoints_and_raises_keyboard_interrupt(source_dir, tmp_path):
    script = (
        "import sys, tessera\n"
        "try:\n"
        f"    tessera.train.fit({str(source_dir / 'examples/configs/fashion_mnist_cnn.yaml')!r}, "
        f"overrides=['train.epochs=5'], output={str(tmp_path / 'run')!r})\n"
        "except KeyboardInterrupt as e:\n"
        "    print('interrupted:', e); sys.exit(3)\n")
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    # Wait for training to start (its metrics file appears), then Ctrl-C.
    deadline = time.time() + 120
    while not (tmp_path / "run" / "metrics.jsonl").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    assert p.returncode == 3, out
    assert "interrupted: training stopped" in out
    assert any((tmp_path / "run" / "checkpoints").iterdir())
