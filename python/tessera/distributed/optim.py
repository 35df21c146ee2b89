"""torch.distributed.optim's name for ZeRO."""
from .zero import ZeroRedundancyOptimizer  # noqa: F401
