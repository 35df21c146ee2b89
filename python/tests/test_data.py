"""tessera.utils.data: the C++ datasets through the C++ loader, Python datasets
in the process and in worker processes (batches through shared memory)."""
import os

import numpy as np
import pytest

import tessera
from tessera.utils.data import DataLoader, TensorDataset

from data_fixtures import Broken, Counting, Squares

FASHION = "/usr/share/datasets/fashion-mnist"


def batches(loader):
    return [[t.tolist() if isinstance(t, tessera.Tensor) else {k: v.tolist() for k, v in t.items()} for t in b]
            for b in loader]


@pytest.mark.skipif(not os.path.isdir(FASHION), reason="dataset-fashion-mnist is not installed")
def test_native_datasets_load_in_cpp_threads_and_do_not_depend_on_workers():
    ds = tessera.data.FashionMNIST(split="test")
    assert len(ds) == 10000
    x, y = ds[0]
    assert x.shape == (1, 28, 28) and y.dtype == tessera.int64
    a = DataLoader(ds, batch_size=256, shuffle=True, seed=3, num_workers=0)
    b = DataLoader(ds, batch_size=256, shuffle=True, seed=3, num_workers=2)
    assert len(a) == 40
    for (xa, ya), (xb, yb) in zip(a, b):
        assert (ya == yb).all().item() and (xa == xb).all().item()


def test_tensor_dataset_batches():
    ds = TensorDataset(tessera.arange(10).float().reshape(10, 1), tessera.arange(10))
    out = list(DataLoader(ds, batch_size=4))
    assert [b[1].tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(list(DataLoader(ds, batch_size=4, drop_last=True))) == 2


def test_python_dataset_with_worker_processes_equals_the_main_process():
    ds = Squares()
    main = batches(DataLoader(ds, batch_size=5, shuffle=True, seed=1))
    def segments():  # shared memory blocks (multiprocessing.shared_memory names them psm_*)
        return {n for n in os.listdir("/dev/shm") if n.startswith("psm_")} if os.path.isdir("/dev/shm") else set()

    shm_before = segments()
    workers = batches(DataLoader(ds, batch_size=5, shuffle=True, seed=1, num_workers=2))
    assert workers == main and len(main) == 8
    assert main[0][2]["half"] == [row[0] / 2 for row in main[0][0]]
    assert not (segments() - shm_before), "shared memory left behind"
    # Shuffled: each epoch a new order, every sample once.
    loader = DataLoader(ds, batch_size=37, shuffle=True)
    e1, e2 = [b[1].tolist() for b in loader][0], [b[1].tolist() for b in loader][0]
    assert sorted(e1) == sorted(i * i for i in range(37)) and e1 != e2


def test_a_worker_error_names_the_batch():
    with pytest.raises(RuntimeError, match="sample 7 is corrupt"):
        list(DataLoader(Broken(), batch_size=2, num_workers=2))
    with pytest.raises(ValueError, match="sample 7"):
        list(DataLoader(Broken(), batch_size=2))


def test_iterable_datasets_and_bad_arguments():
    assert [b.tolist() for b in DataLoader(Counting(), batch_size=4)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(Squares(), batch_size=0)
    with pytest.raises(TypeError, match="length"):
        len(DataLoader(Counting()))


def test_tar_shards_written_by_python_tarfile_stream_through_the_cpp_loader(tmp_path):
    import io
    import tarfile
    paths = []
    for s in range(2):
        path = tmp_path / f"train-{s:03d}.tar"
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s * 5, s * 5 + 5):
                buf = io.BytesIO()
                np.save(buf, np.full(3, i, dtype=np.float32))
                for name, data in ((f"{i:06d}.x.npy", buf.getvalue()), (f"{i:06d}.y.cls", str(i).encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(path)
    ds = tessera.data.ShardedDataset(paths, ["x.npy", "y.cls"])
    seen = []
    for x, y in DataLoader(ds, batch_size=4):
        assert x.shape[1:] == (3,) and (x[:, 0] == y.float()).all().item()
        seen += y.tolist()
    assert sorted(seen) == list(range(10))
