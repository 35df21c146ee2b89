"""The profiler as a context manager (torch.profiler's place):

    with tessera.profiler.profile() as prof:
        loss = model(x).sum(); loss.backward(); opt.step()
    print(prof.table())                       # per op: calls, self/total time, FLOPs, bytes
    print(prof.memory_table())                # what was alive at the peak
    prof.export_chrome_trace("trace.json")    # open in Perfetto or chrome://tracing
"""
from . import _C


class profile:
    """Records every op (and memory, and shapes with record_shapes) while active: `with
    tessera.profiler.profile() as prof:`, then prof.table(), prof.memory_table(), prof.key_averages(),
    prof.export_chrome_trace(path)."""
    def __init__(self, record_memory=True, record_shapes=False):
        self._native = _C._profiler.Profiler(record_memory, record_shapes)

    def __enter__(self):
        self._native.start()
        return self

    def __exit__(self, *exc):
        self._native.stop()
        return False

    def table(self, group_by="op", row_limit=30):
        return self._native.table(group_by, row_limit)

    def memory_table(self, row_limit=20):
        return self._native.memory_table(row_limit)

    def key_averages(self):
        """One dict per op and phase: name, phase, calls, self_ns, total_ns, flops, bytes."""
        return self._native.op_stats()

    def export_chrome_trace(self, path):
        self._native.export_chrome_trace(str(path))
