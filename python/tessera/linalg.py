"""The ops PyTorch has in torch.linalg."""
from ._C._linalg import *  # noqa: F401,F403
