"""tessera.utils: checkpoint (activation checkpointing) and data (datasets, DataLoader)."""
from . import checkpoint, data  # noqa: F401
