"""tessera.serve: the inference server (KServe v2 over HTTP, dynamic batching;
docs/serving.md) started from Python on a model compiled from Python. The
server runs the saved graph on its own threads; no Python runs per request.

    server = tessera.serve.Server(port=8000)
    server.serve("cnn", model, tessera.randn(1, 1, 28, 28), dynamic=True)
    ...                       # POST /v2/models/cnn/infer
    server.stop()
"""
import os
import tempfile

from . import _C
from ._compile import export


class Server:
    """The KServe v2 HTTP server (docs/serving.md) in this process, on its own threads: serve(name, model,
    example) traces and serves a model; load(name, path) serves a saved graph or ONNX file; dynamic
    batching; port 0 picks a free port."""
    def __init__(self, host="127.0.0.1", port=8000, api_key="", threads=64):
        """port 0 picks a free one (see .port)."""
        self._native = _C._serve.Server(host, port, api_key, threads)
        self._dirs = []

    @property
    def port(self):
        return self._native.port

    def load(self, name, path, version=1, max_batch_size=64, max_queue_delay_us=500, instances=1, warmup_runs=3):
        """Serves a saved graph directory or an ONNX file as model `name`."""
        self._native.load(name, str(path), version, max_batch_size, max_queue_delay_us, instances, warmup_runs)

    def serve(self, name, model, example_args, *, dynamic=True, version=1, **config):
        """Traces model(*example_args) (eval mode) into a graph with a dynamic
        batch dimension (an example of batch 1 is repeated to 2 for the trace),
        saves it, and serves it as `name`."""
        args = (example_args,) if isinstance(example_args, _C.Tensor) else tuple(example_args)
        if dynamic is True:  # a dynamic batch is traced at size 2 or more (1 would be specialized)
            args = tuple(a if a.shape[0] >= 2 else _C.cat([a] * 2) for a in args)
        d = tempfile.mkdtemp(prefix=f"tessera-serve-{name}-")
        self._dirs.append(d)
        path = os.path.join(d, "model.tsr")
        export(model, args, path, dynamic=dynamic)
        self.load(name, path, version, **config)
        return path

    def unload(self, name, version=1):
        self._native.unload(name, version)

    def stop(self):
        self._native.stop()
        import shutil
        for d in self._dirs:
            shutil.rmtree(d, ignore_errors=True)
        self._dirs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
