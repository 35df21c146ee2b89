"""ZeRO (sharded data parallelism) for Python models, by the C++
implementation: every rank runs the whole model on its share of each batch, as
under DistributedDataParallel, but the optimizer state (stage 1), the
gradients (stage 2) and the parameters (stage 3, C++ models) are split into
one shard per rank; each rank steps its shard and the shards are all-gathered.
It averages the gradients itself, during backward: do not also wrap the model
in DistributedDataParallel.

    model = MyModel()
    opt = dist.ZeroRedundancyOptimizer(model, tessera.optim.AdamW, stage=2, lr=1e-3)
    loss_fn(model(x_shard), y_shard).backward()   # reduce-scatters while backward runs
    opt.step()                                      # this rank's shard, then all-gather
    opt.zero_grad()

At stage 2 a parameter's .grad holds its gradient only on the rank whose shard
it is in; at stage 3 the parameters are whole only inside
`with opt.whole_parameters():` (to save or inspect them). The optimizer's state_dict() gathers every rank's shard into the
form one process saves (every rank must call it), so it loads at any world
size and stage."""
from .. import _C
from ..optim import run_closure
from .ddp import _native_tree, switched

_D = _C._distributed


class ZeroRedundancyOptimizer:
    """torch.distributed.optim.ZeroRedundancyOptimizer's constructor, with
    `params` the model itself (or its parameters) and ZeRO's stage. Stage 3
    gathers each unit's parameters around its forward, which needs the C++
    modules (a zoo model from tessera.nn.zoo.build); Python models use 1 or 2."""

    def __init__(self, params, optimizer_class, process_group=None, *, stage=1, bucket_cap_mb=25,
                 first_bucket_mb=1, find_unused_parameters=False, overlap=True, **defaults):
        from . import init_process_group
        from ..nn.module import Module
        if isinstance(params, Module):
            model = params
            tree = _native_tree(model)
            self.optim = optimizer_class(model.parameters(), **defaults)
        else:
            groups = list(params)
            if not groups:
                raise ValueError("ZeroRedundancyOptimizer got an empty parameter list")
            flat = [p for g in groups for p in g["params"]] if isinstance(groups[0], dict) else groups
            tree = _D.tensor_tree([(f"param{i}", p) for i, p in enumerate(flat)], [])
            self.optim = optimizer_class(groups, **defaults)
        if stage == 3 and tree.type_name == "PythonModel":
            raise ValueError("ZeroRedundancyOptimizer: stage 3 gathers parameters around each C++ module's forward "
                             "and needs a C++ model (tessera.nn.zoo.build); a Python model uses stage 1 or 2")
        self._zero = _D.ZeroRedundancy(tree, self.optim._native, process_group or init_process_group(), stage=stage,
                                       bucket_cap_mb=float(bucket_cap_mb), first_bucket_mb=float(first_bucket_mb),
                                       find_unused_parameters=find_unused_parameters, overlap=overlap)

    # What LR schedulers and users read of an optimizer.
    @property
    def param_groups(self):
        return self.optim.param_groups

    @property
    def defaults(self):
        return self.optim.defaults

    @property
    def _native(self):
        return self.optim._native

    @property
    def stage(self):
        return self._zero.stage

    def step(self, closure=None):
        loss = run_closure(closure)
        self._zero.step()
        return loss

    def zero_grad(self, set_to_none=True):
        self._zero.clear_gradients()

    def no_sync(self):
        """Backward inside only accumulates; the next one outside reduces the sum."""
        return switched(self._zero.require_sync, False)

    def whole_parameters(self):
        """Stage 3: between steps the parameters hold no data (meta tensors); inside
        this, every rank holds them whole (to save, load or inspect; every rank
        enters). Leaving it writes each rank's chunk back. Other stages: always whole."""
        return switched(self._zero.set_whole_parameters, True)

    def state_dict(self):
        """The whole optimizer state, gathered from every rank (a collective: every rank calls it)."""
        tensors, groups = self._zero.consolidated_state()
        return {"state": tensors, "param_groups": groups}

    def load_state_dict(self, state):
        """A whole state (from state_dict() at any world size, or from one process); each rank keeps its shard."""
        self._zero.load_consolidated_state(state["state"], state["param_groups"])

    def segments(self):
        """The parameters' names per segment (the unit of communication)."""
        return self._zero.segments()

    def shard_numel(self):
        """The number of elements this rank's shards hold."""
        return self._zero.shard_numel()

    def last_wait_seconds(self):
        return self._zero.last_wait_seconds()
