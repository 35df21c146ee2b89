"""tessera.distributed: the process group of a job started by
`tessera launch -n N -- python3 script.py` (Open MPI underneath; one process
alone when not launched) and its collectives, with torch.distributed's names.

    import tessera.distributed as dist
    dist.init_process_group()
    dist.all_reduce(t)                      # in place, summed over the ranks
    model = dist.DistributedDataParallel(model)  # gradients averaged in backward, in buckets
    opt = dist.ZeroRedundancyOptimizer(model, tessera.optim.AdamW, stage=2, lr=1e-3)  # or ZeRO

Both are the C++ implementations, run on a Python model's own tensors. A
training config's tensor and pipeline parallelism (which restructure the C++
model) run through tessera.train.fit under `tessera launch` (docs/distributed.md)."""
from .. import _C

_D = _C._distributed


class ReduceOp:
    """The reductions of all_reduce and reduce_scatter: SUM, AVG, MAX, MIN."""
    SUM, AVG, MAX, MIN = "sum", "avg", "max", "min"


_world = None


def init_process_group(backend=None, **kwargs):
    """Joins the job's world group (the launcher's MPI job); returns it."""
    global _world
    if _world is None:
        _world = _D.world()
    return _world


def _group(group):
    return group if group is not None else init_process_group()


def is_initialized():
    """Whether init_process_group has run in this process."""
    return _world is not None


def is_available():
    """True: Tessera is always built with its process groups (one process alone when not launched)."""
    return True


def get_rank(group=None):
    """This process's rank in the group (the world by default), 0 to size - 1."""
    return _group(group).rank


def get_world_size(group=None):
    """The number of processes in the group (the world by default)."""
    return _group(group).size


def get_local_rank():
    """This process's rank among those on its machine."""
    return _D.local_rank()


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    """Reduces `tensor` over the ranks in place (op: ReduceOp.SUM, AVG, MAX, MIN); every rank ends with the
    result."""
    _group(group).all_reduce(tensor, op)


def broadcast(tensor, src, group=None):
    """Rank src's `tensor` to every rank, in place."""
    _group(group).broadcast(tensor, src)


def all_gather(tensor_list, tensor, group=None):
    """Fills tensor_list (one tensor per rank) with every rank's `tensor`."""
    g = _group(group)
    if len(tensor_list) != g.size:
        raise ValueError(f"all_gather: {len(tensor_list)} output tensors for {g.size} ranks")
    out = _C.ops.full([g.size] + list(tensor.shape), 0, dtype=tensor.dtype)
    g.all_gather(out, tensor.contiguous())
    for i, t in enumerate(tensor_list):
        t.copy_(out[i])


def all_gather_into_tensor(output, input, group=None):
    """Every rank's `input` [...] concatenated along dim 0 into `output` [world * n, ...]."""
    _group(group).all_gather(output, input)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None):
    """`input` [world * n, ...] reduced over the ranks; each rank keeps its n rows in `output`."""
    _group(group).reduce_scatter(output, input, op)


def send(tensor, dst, group=None, tag=0):
    """Sends `tensor` to rank dst (blocking until received); tag pairs it with the recv."""
    _group(group).send(tensor, dst, tag)


def recv(tensor, src, group=None, tag=0):
    """Receives into `tensor` (its shape and dtype must match the sender's) from rank src."""
    _group(group).recv(tensor, src, tag)


def barrier(group=None):
    """Waits until every rank of the group has reached it."""
    _group(group).barrier()


def new_group(ranks):
    """A process group of the given world ranks (every rank of the world calls it)."""
    return init_process_group().new_group(list(ranks))


def destroy_process_group():
    """A no-op kept for torch.distributed's scripts: the world group lives as long as the process."""
    pass  # the world group lives as long as the process (MPI is finalized at exit)


from .ddp import DistributedDataParallel  # noqa: E402,F401
from .zero import ZeroRedundancyOptimizer  # noqa: E402,F401
from . import optim  # noqa: E402,F401
