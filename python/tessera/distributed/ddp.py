"""DistributedDataParallel for Python modules: every rank starts from rank
0's parameters and buffers, and each parameter's gradient is averaged over the
ranks as backward produces it. One all-reduce per parameter, waited for in the
backward pass: correct, but without the bucketing and overlap of the C++ data
parallelism that tessera.train.fit runs (parallel.data in a config)."""
from .. import _C
from ..autograd import no_grad
from ..nn.module import Module


class DistributedDataParallel(Module):
    def __init__(self, module, process_group=None, broadcast_buffers=True, **kwargs):
        super().__init__()
        from . import init_process_group
        self.module = module
        object.__setattr__(self, "_group", process_group or init_process_group())
        object.__setattr__(self, "_broadcast_buffers", broadcast_buffers)
        g = self._group
        with no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                g.broadcast(t, 0)
        if g.size > 1:
            for p in module.parameters():
                if p.requires_grad:
                    p.register_hook(self._average)

    def _average(self, grad):
        g = grad.contiguous().clone()
        self._group.all_reduce(g, "avg")
        return g

    def forward(self, *args, **kwargs):
        if self._broadcast_buffers and self._group.size > 1:
            with no_grad():
                for b in self.module.buffers():
                    self._group.broadcast(b, 0)
        return self.module(*args, **kwargs)
