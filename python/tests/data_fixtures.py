"""Datasets for test_data.py, in a module of their own so that spawned worker
processes can import them."""
import numpy as np

import tessera
from tessera.utils.data import Dataset, IterableDataset


class Squares(Dataset):
    """(x [3] float, x^2 label, a dict field): a bit of everything collate handles."""

    def __len__(self):
        return 37

    def __getitem__(self, i):
        x = np.full(3, i, dtype=np.float32)
        return tessera.from_numpy(x), i * i, {"half": i / 2}


class Broken(Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i == 7:
            raise ValueError("sample 7 is corrupt")
        return tessera.ones(2)


class Counting(IterableDataset):
    def __iter__(self):
        return iter(range(10))
