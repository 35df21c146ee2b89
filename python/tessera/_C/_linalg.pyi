from tessera._C import Tensor, dtype
import builtins
from typing import Iterable, Union

def vector_norm(x: Tensor, p: builtins.float = ..., dim: Union[builtins.int,Iterable[builtins.int]] = ..., keepdim: builtins.bool = ...) -> Tensor: ...
