"""DistributedDataParallel for Python modules: every rank starts from rank
0's parameters and buffers; as backward sums each parameter's gradient into
its .grad, an asynchronous all-reduce (average) of it starts on the
communication thread, overlapping the rest of backward, and the end of
backward waits for them all (as the C++ data parallelism does, one
all-reduce per parameter rather than per bucket). Gradient accumulation over
several backward passes stays exact: each pass averages what it added."""
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
        object.__setattr__(self, "_pending", [])
        g = self._group
        with no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                g.broadcast(t, 0)
        if g.size > 1:
            for p in module.parameters():
                if p.requires_grad:
                    p.register_post_accumulate_grad_hook(self._start)

    def _start(self, param):
        if not self._pending:
            _C._autograd.queue_callback(self._finish)  # once per backward pass
        self._pending.append(self._group.all_reduce_async(param.grad, "avg"))

    def _finish(self):
        pending, self._pending[:] = list(self._pending), []
        for work in pending:
            work.wait()

    def forward(self, *args, **kwargs):
        if self._broadcast_buffers and self._group.size > 1:
            with no_grad():
                for b in self.module.buffers():
                    self._group.broadcast(b, 0)
        return self.module(*args, **kwargs)
