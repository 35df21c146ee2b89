"""Tessera from Python: tensors, autograd, nn and optim over the same C++ library
(libtessera.so) the `tessera` command line uses. docs/python.md is the guide.

    import tessera
    x = tessera.randn(4, 3, requires_grad=True)
    (x @ x.T).sum().backward()
"""
import sys as _sys

from . import _C

# The extension's submodules, importable by name (import tessera._C.ops) and
# seen by stubgen (scripts/python_stubs.py).
for _name in ("ops", "_functional", "_linalg", "_autograd", "_optim", "_amp", "_compile", "_serve", "_llm", "_nn", "_train", "_profiler", "_distributed", "_data", "_quant", "_layers", "return_types"):
    _sys.modules[f"{__name__}._C.{_name}"] = getattr(_C, _name)
_sys.modules[f"{__name__}.return_types"] = _C.return_types  # torch.max(x, 1) is a tessera.return_types.max
from ._C import (  # noqa: F401
    Tensor, dtype, device, Error, OutOfMemoryError, InternalError,
    uint8, int8, int32, int64, float16, bfloat16, float32, float64,
    from_numpy, from_dlpack, save_file, load_file, manual_seed, get_num_threads, set_num_threads,
    get_default_dtype, set_default_dtype, promote_types, is_tensor, numel,
    memory_allocated, max_memory_allocated, memory_stats, set_memory_limit,
    __version__,
)
# PyTorch's dtype spellings (here, not in _C, whose stubs would shadow the builtins).
bool = _C.bool_
float, double, half, long, int = float32, float64, float16, int64, int32

# The ops PyTorch has in the torch namespace, bound from the op table
# (python/src/op_signatures.def): tessera.sum, tessera.matmul, ...
from ._C import *  # noqa: F401,F403
from ._C import ops  # noqa: F401  every op by its ops.def name
from ._C import return_types  # noqa: F401
from ._factories import (  # noqa: F401
    tensor, as_tensor, zeros, ones, full, empty, zeros_like, ones_like, full_like, empty_like,
    rand, randn, randint, rand_like, randn_like, arange,
)
from .autograd import (  # noqa: F401
    no_grad, enable_grad, inference_mode, set_grad_enabled, is_grad_enabled,
)
from . import amp, autograd, distributed, linalg, llm, nn, onnx, optim, profiler, quantization, serve, train, utils  # noqa: F401,E402,E501
from .utils import data  # noqa: F401,E402  tessera.data as well as tessera.utils.data
from .amp import autocast  # noqa: F401,E402
from ._compile import compile, export, load_model  # noqa: F401,E402


def flatten(input, start_dim=0, end_dim=-1):
    """Flattens dims start_dim..end_dim into one (a view where the strides allow)."""
    return input.flatten(start_dim, end_dim)
