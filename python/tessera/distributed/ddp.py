"""DistributedDataParallel for Python modules, by the C++ data parallelism
itself: every rank starts from rank 0's parameters and buffers; gradients live
in flat buckets (25 MB, the first 1 MB so that it starts early), and each
bucket is all-reduced (averaged) on the communication thread as soon as
backward has produced all of its gradients, while backward goes on with the
layers below; the end of backward waits for the buckets and leaves the averages
in .grad (views into the buckets). None of it runs Python code.

    model = dist.DistributedDataParallel(model)
    loss_fn(model(x_shard), y_shard).backward()   # all-reduces while backward runs
    opt.step()

Gradient accumulation: inside `with model.no_sync():` backward only sums into
.grad; the next backward outside it all-reduces the sum."""
import contextlib

from .. import _C
from ..autograd import no_grad
from ..nn.module import Module

_D = _C._distributed


@contextlib.contextmanager
def switched(setter, inside):
    """setter(inside) for the block, setter(not inside) after it, however it ends."""
    setter(inside)
    try:
        yield
    finally:
        setter(not inside)


def _native_tree(module):
    """The C++ module a C++ data parallelism walks: a CppModule's own, or a tree
    holding a Python model's tensors under their names (shared, not copied)."""
    native = getattr(module, "_native", None)
    if isinstance(native, _C._nn.Module):
        return native
    return _D.tensor_tree(list(module.named_parameters()), list(module.named_buffers()))


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel's constructor. device_ids,
    output_device, gradient_as_bucket_view (always so) and static_graph are
    accepted and have no effect on the CPU. compression="bf16" sends f32
    buckets as bf16, "powersgd" sends each matrix gradient as two rank-r
    factors from powersgd_start_step on (both with error feedback)."""

    def __init__(self, module, device_ids=None, output_device=None, broadcast_buffers=True, process_group=None,
                 bucket_cap_mb=25, find_unused_parameters=False, gradient_as_bucket_view=True, static_graph=False,
                 *, first_bucket_mb=1, overlap=True, compression="none", powersgd_rank=1, powersgd_start_step=1000):
        super().__init__()
        from . import init_process_group
        self.module = module
        group = process_group or init_process_group()
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_broadcast_buffers", broadcast_buffers)
        object.__setattr__(self, "_native_ddp", _D.DistributedDataParallel(
            _native_tree(module), group, bucket_cap_mb=float(bucket_cap_mb), first_bucket_mb=float(first_bucket_mb),
            find_unused_parameters=find_unused_parameters, broadcast_buffers=broadcast_buffers, overlap=overlap,
            compression=compression, powersgd_rank=powersgd_rank, powersgd_start_step=powersgd_start_step))

    def no_sync(self):
        """Backward inside only accumulates into .grad; the next one outside all-reduces the sum."""
        return switched(self._native_ddp.require_sync, False)

    def buckets(self):
        """The parameters' names per bucket, in the order they are all-reduced."""
        return self._native_ddp.buckets()

    def last_wait_seconds(self):
        """Seconds the end of the last backward waited for communication (what overlap did not hide)."""
        return self._native_ddp.last_wait_seconds()

    def forward(self, *args, **kwargs):
        if self._broadcast_buffers and self._group.size > 1:  # as PyTorch: rank 0's buffers at every forward
            with no_grad():
                for b in self.module.buffers():
                    self._group.broadcast(b, 0)
        return self.module(*args, **kwargs)
