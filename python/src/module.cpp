// tessera._C: the extension module. python/tessera/ builds the public API
// (tessera.nn, tessera.optim, ...) on it.
//
// Note [The GIL]
// Every op, kernel and backward pass runs with the GIL released, so Python
// threads run Tessera calls in parallel and a long call does not stall other
// threads. What calls back into Python from C++ — a tensor hook, a Python
// autograd.Function's backward, the deleter of a NumPy array's memory —
// takes the GIL back for just that call.
#include "bindings.h"
#include "tessera/core/allocator.h"
#include "tessera/core/generator.h"
#include "tessera/core/parallel.h"
#include "tessera/version.h"

namespace tessera::python {

PYBIND11_MODULE(_C, m) {
  m.doc() = "Tessera's C++ library (libtessera.so); import tessera, not this.";
  bind_errors(m);
  bind_types(m);
  bind_tensor(m);
  bind_interop(m);
  bind_ops(m);
  bind_autograd(m);
  bind_optim(m);
  bind_io(m);
  bind_amp(m);
  bind_compile(m);
  bind_serve(m);
  bind_llm(m);
  bind_nn(m);
  bind_layers(m);
  bind_train(m);
  bind_profiler(m);
  bind_distributed(m);
  bind_data(m);
  bind_quant(m);

  m.attr("__version__") = TESSERA_VERSION;
  m.def("manual_seed", [](uint64_t seed) { manual_seed(seed); }, py::arg("seed"),
        "Seeds the default generator (rand, randn, dropout, initializers).");
  m.def("get_num_threads", &get_num_threads);
  m.def("set_num_threads", &set_num_threads, py::arg("n"));
  m.def("memory_allocated", [] { return memory_allocated(); }, "Bytes in live CPU tensors.");
  m.def("max_memory_allocated", [] { return max_memory_allocated(); });
  m.def("memory_stats", [] {
    MemoryStats s = memory_stats();
    py::dict d;
    d["current_bytes"] = s.current_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["reserved_bytes"] = s.reserved_bytes;
    d["allocations"] = s.allocations;
    d["cache_hits"] = s.cache_hits;
    d["os_allocations"] = s.os_allocations;
    return d;
  });
  m.def("set_memory_limit", &set_memory_limit, py::arg("bytes"),
        "Caps the bytes live CPU tensors may hold; an allocation over it raises tessera.OutOfMemoryError.");
}

}  // namespace tessera::python
