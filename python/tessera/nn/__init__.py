"""tessera.nn: Module (subclassable in Python, as torch.nn.Module), Parameter,
the layers, and nn.functional."""
from . import functional, init  # noqa: F401
from .module import Module, Parameter, Sequential, ModuleList, ModuleDict  # noqa: F401
from .layers import *  # noqa: F401,F403
from .cpp import CppModule  # noqa: F401
# The layers only the C++ library has, as CppModules (tessera.nn.cpp has every C++ layer).
from .cpp import Bilinear, MultiheadAttention, TransformerEncoderLayer, Unflatten  # noqa: F401
from . import cpp as zoo  # noqa: F401  tessera.nn.zoo.build("resnet18"), build("llama", ...)
