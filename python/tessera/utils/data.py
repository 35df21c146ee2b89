"""Datasets and the DataLoader, as torch.utils.data.

- A dataset of the C++ library (tessera.data.FashionMNIST, MNIST, CSV, .npy,
  tar shards, TensorDataset) is loaded by the C++ DataLoader: batches built by
  C++ threads without the GIL, the same batches whatever num_workers is.
- A Python dataset (__getitem__ and __len__, or __iter__) is loaded in this
  process (num_workers=0) or by worker processes (num_workers > 0), started by
  multiprocessing's "spawn" by default (safe after Tessera's OpenMP threads
  exist; "fork" on request). Workers send batches back through shared memory:
  only names, shapes and dtypes cross the queue, never pickled objects. With
  "spawn" the dataset itself is pickled once to each worker (as in PyTorch), so
  a script that uses workers guards its entry point with
  `if __name__ == "__main__":`.
"""
import multiprocessing
import numbers
import queue as _queue

import numpy as np

from .. import _C

_D = _C._data


class Dataset:
    """A map-style dataset: __getitem__(i) gives one sample (a tensor, a number, a tuple, list or dict of
    them), __len__ their count."""
    def __getitem__(self, index):
        raise NotImplementedError

    def __len__(self):
        raise NotImplementedError


class IterableDataset:
    """A stream of samples (__iter__); with workers, each worker iterates its own copy (split the stream by
    get_worker_info-style sharding in __iter__)."""
    def __iter__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Rows of tensors that share their first dimension (a C++ dataset: the
    DataLoader gathers a batch's rows in one call)."""

    def __init__(self, *tensors):
        self._native = _D.tensor_dataset(list(tensors))
        self.tensors = tensors

    def __getitem__(self, i):
        return self._native[i]

    def __len__(self):
        return len(self._native)


class _Native(Dataset):
    def __init__(self, native):
        self._native = native

    def __getitem__(self, i):
        return self._native[i]

    def __len__(self):
        return len(self._native)


def FashionMNIST(root="/usr/share/datasets/fashion-mnist", split="train"):
    """Fashion-MNIST (Debian's dataset-fashion-mnist): (image [1, 28, 28] normalized, label)."""
    return _Native(_D.fashion_mnist(str(root), split))


def MNIST(root, split="train"):
    """MNIST from its IDX files under root (train-images-idx3-ubyte, ...): images [1, 28, 28] f32 in [0, 1],
    labels i64; loaded by C++ without the GIL."""
    return _Native(_D.mnist(str(root), split))


def CSVDataset(path, label_column=-1):
    """A numeric CSV file: (features, label) rows (label_column -1: no label)."""
    return _Native(_D.csv(str(path), label_column))


def NpyDataset(*paths):
    """.npy files with the same first dimension, one tensor each per row."""
    return _Native(_D.npy([str(p) for p in paths]))


class ShardedDataset(IterableDataset):
    """WebDataset-style tar shards read as a stream (fields by extension)."""

    def __init__(self, shards, fields, shuffle_buffer=0):
        self._native = _D.shards([str(s) for s in shards], list(fields), shuffle_buffer)


# ---- batches -----------------------------------------------------------------------


def default_collate(samples):
    """Stacks a list of samples: tensors, NumPy arrays and numbers become one
    tensor with a batch dimension; tuples, lists and dicts are collated field by field."""
    first = samples[0]
    if isinstance(first, _C.Tensor):
        return _C.stack(list(samples), 0)
    if isinstance(first, np.ndarray):
        return _C.from_numpy(np.ascontiguousarray(np.stack(samples)))
    if isinstance(first, bool):
        return _C.from_numpy(np.array(samples, dtype=np.bool_))
    if isinstance(first, numbers.Integral):
        return _C.from_numpy(np.array(samples, dtype=np.int64))
    if isinstance(first, numbers.Real):
        return _C.from_numpy(np.array(samples, dtype=np.float32))
    if isinstance(first, dict):
        return {k: default_collate([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(default_collate(list(field)) for field in zip(*samples))
    raise TypeError(f"default_collate: cannot batch a {type(first).__name__} (tensors, arrays, numbers, "
                    "and tuples, lists or dicts of them)")


# Batches cross from a worker process as a structure of placeholders plus arrays in shared memory.
def _flatten(batch, arrays):
    if isinstance(batch, _C.Tensor):
        arrays.append(batch.detach().contiguous().numpy() if batch.dtype != _C.bfloat16 else
                      batch.float().numpy())
        return ("T", len(arrays) - 1, str(batch.dtype) == "tessera.bfloat16")
    if isinstance(batch, dict):
        return ("D", [(k, _flatten(v, arrays)) for k, v in batch.items()])
    if isinstance(batch, (tuple, list)):
        return ("L" if isinstance(batch, list) else "U", [_flatten(v, arrays) for v in batch])
    if isinstance(batch, (numbers.Number, str, bytes)) or batch is None:
        return ("V", batch)
    raise TypeError(f"a worker's batch holds a {type(batch).__name__}: only tensors, numbers, strings, and "
                    "tuples, lists and dicts of them cross between processes")


def _unflatten(spec, tensors):
    kind = spec[0]
    if kind == "T":
        t = tensors[spec[1]]
        return t.to(_C.bfloat16) if spec[2] else t
    if kind == "D":
        return {k: _unflatten(v, tensors) for k, v in spec[1]}
    if kind in "LU":
        items = [_unflatten(v, tensors) for v in spec[1]]
        return items if kind == "L" else tuple(items)
    return spec[1]


def _worker_loop(dataset, collate_fn, tasks, results, worker_id, seed):
    from multiprocessing import shared_memory
    _C.set_num_threads(1)
    _C.manual_seed(seed + worker_id)
    np.random.seed((seed + worker_id) % (2 ** 32))
    while True:
        task = tasks.get()
        if task is None:
            return
        index, indices = task
        try:
            batch = collate_fn([dataset[i] for i in indices])
            arrays = []
            spec = _flatten(batch, arrays)
            names = []
            for a in arrays:
                shm = shared_memory.SharedMemory(create=True, size=max(a.nbytes, 1))
                np.ndarray(a.shape, a.dtype, buffer=shm.buf)[...] = a
                names.append((shm.name, a.shape, a.dtype.str))
                shm.close()
            results.put((index, spec, names, None))
        except Exception as e:  # noqa: BLE001 - the error goes to the main process as text
            results.put((index, None, [], f"{type(e).__name__}: {e}"))


def _receive(names):
    from multiprocessing import shared_memory
    out = []
    for name, shape, dtype in names:
        shm = shared_memory.SharedMemory(name=name)
        try:
            a = np.ndarray(shape, np.dtype(dtype), buffer=shm.buf).copy()
        finally:
            shm.close()
            shm.unlink()
        out.append(_C.from_numpy(a))
    return out


class DataLoader:
    """Batches of a dataset: batch_size, shuffle, drop_last, collate_fn (default: stacks tensors and numbers),
    num_workers (spawned processes for Python datasets, handing batches back through shared memory; C++
    threads for the native datasets), seed. Iterating gives batches in order."""
    def __init__(self, dataset, batch_size=1, shuffle=False, num_workers=0, collate_fn=None, drop_last=False,
                 seed=0, multiprocessing_context=None, timeout=0, prefetch_factor=2, **kwargs):
        if batch_size is None or batch_size < 1:
            raise ValueError(f"DataLoader: batch_size must be a positive int, got {batch_size}")
        if num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be 0 or more, got {num_workers}")
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle
        self.num_workers, self.drop_last, self.seed = num_workers, drop_last, seed
        self.collate_fn = collate_fn or default_collate
        self.timeout = timeout or None
        self.prefetch = max(1, prefetch_factor) * max(1, num_workers)
        self.context = multiprocessing_context or "spawn"
        self._epoch = 0
        native = getattr(dataset, "_native", None)
        self._native = None
        if native is not None and collate_fn is None:
            self._native = _D.DataLoader(native, batch_size, shuffle, seed, drop_last, num_workers)

    def __len__(self):
        if self._native is not None:
            n = len(self._native)
            if n >= 0:
                return n
        if isinstance(self.dataset, IterableDataset):
            raise TypeError("an IterableDataset's DataLoader has no length")
        n = len(self.dataset)
        return n // self.batch_size if self.drop_last else (n + self.batch_size - 1) // self.batch_size

    def _batches(self):
        n = len(self.dataset)
        if self.shuffle:
            order = np.random.default_rng((self.seed, self._epoch)).permutation(n)
        else:
            order = np.arange(n)
        out = [order[i:i + self.batch_size].tolist() for i in range(0, n, self.batch_size)]
        if self.drop_last and out and len(out[-1]) < self.batch_size:
            out.pop()
        return out

    def __iter__(self):
        if self._native is not None:
            return self._iter_native()
        if isinstance(self.dataset, IterableDataset):
            return self._iter_iterable()
        self._epoch += 1
        if self.num_workers == 0:
            return (self.collate_fn([self.dataset[i] for i in b]) for b in self._batches())
        return self._iter_workers(self._batches())

    def _iter_native(self):
        while True:
            batch = self._native.next()
            if batch is None:
                return
            yield batch

    def _iter_iterable(self):
        buf = []
        for sample in self.dataset:
            buf.append(sample)
            if len(buf) == self.batch_size:
                yield self.collate_fn(buf)
                buf = []
        if buf and not self.drop_last:
            yield self.collate_fn(buf)

    def _iter_workers(self, batches):
        ctx = multiprocessing.get_context(self.context)
        tasks = [ctx.Queue() for _ in range(self.num_workers)]
        results = ctx.Queue()
        workers = [ctx.Process(target=_worker_loop, args=(self.dataset, self.collate_fn, tasks[w], results, w,
                                                          self.seed), daemon=True)
                   for w in range(self.num_workers)]
        for p in workers:
            p.start()
        pending, sent, done = {}, 0, 0
        try:
            while done < len(batches):
                while sent < len(batches) and sent - done < self.prefetch:
                    tasks[sent % self.num_workers].put((sent, batches[sent]))
                    sent += 1
                while done not in pending:
                    try:
                        index, spec, names, error = results.get(timeout=self.timeout or 5.0)
                    except _queue.Empty:
                        dead = [p.pid for p in workers if not p.is_alive()]
                        if dead:
                            raise RuntimeError(f"DataLoader: worker processes {dead} exited unexpectedly") from None
                        if self.timeout:
                            raise RuntimeError(f"DataLoader: no batch within timeout={self.timeout} s") from None
                        continue
                    if error is not None:
                        raise RuntimeError(f"DataLoader: a worker failed on batch {index}: {error}")
                    pending[index] = _unflatten(spec, _receive(names))
                yield pending.pop(done)
                done += 1
        finally:
            for q in tasks:
                q.put(None)
            for p in workers:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
            # Batches made but never taken: their shared memory is released here.
            while True:
                try:
                    _, _, names, _ = results.get_nowait()
                except (_queue.Empty, OSError, ValueError):
                    break
                _receive(names)
