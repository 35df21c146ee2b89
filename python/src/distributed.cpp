// Process groups from Python (Open MPI underneath, as for `tessera train`
// under `tessera launch`): the world group, its collectives on tensors, sub-groups.
#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/distributed/process_group.h"

namespace tessera::python {

namespace {
distributed::ReduceOp reduce_op(const std::string& s) {
  if (s == "sum") return distributed::ReduceOp::kSum;
  if (s == "avg") return distributed::ReduceOp::kAvg;
  if (s == "max") return distributed::ReduceOp::kMax;
  if (s == "min") return distributed::ReduceOp::kMin;
  TS_ERROR("reduce op '", s, "' is not one of sum, avg, max, min");
}

// Runs a collective with the GIL released and waits for it.
template <typename F>
void run(F f) {
  py::gil_scoped_release nogil;
  f()->wait();
}
}  // namespace

void bind_distributed(py::module_& m) {
  py::module_ d = m.def_submodule("_distributed", "Process groups");
  using PG = distributed::ProcessGroup;
  py::class_<distributed::Work, std::shared_ptr<distributed::Work>>(d, "Work")
      .def("wait", [](distributed::Work& w) { py::gil_scoped_release nogil; w.wait(); })
      .def("is_completed", &distributed::Work::is_completed);
  py::class_<PG, std::shared_ptr<PG>>(d, "ProcessGroup")
      .def("all_reduce_async", [](PG& g, const Tensor& t, const std::string& op) {
        py::gil_scoped_release nogil;
        return g.allreduce(t, reduce_op(op));
      }, py::arg("tensor"), py::arg("op") = "sum", "Starts an all-reduce in place; wait() on the result.")
      .def_property_readonly("rank", &PG::rank)
      .def_property_readonly("size", &PG::size)
      .def("all_reduce", [](PG& g, const Tensor& t, const std::string& op) { run([&] { return g.allreduce(t, reduce_op(op)); }); },
           py::arg("tensor"), py::arg("op") = "sum")
      .def("broadcast", [](PG& g, const Tensor& t, int root) { run([&] { return g.broadcast(t, root); }); },
           py::arg("tensor"), py::arg("src"))
      .def("all_gather", [](PG& g, const Tensor& out, const Tensor& in) { run([&] { return g.allgather(out, in); }); },
           py::arg("output"), py::arg("input"))
      .def("reduce_scatter", [](PG& g, const Tensor& out, const Tensor& in, const std::string& op) {
        run([&] { return g.reduce_scatter(out, in, reduce_op(op)); });
      }, py::arg("output"), py::arg("input"), py::arg("op") = "sum")
      .def("send", [](PG& g, const Tensor& t, int dst, int tag) { run([&] { return g.send(t, dst, tag); }); },
           py::arg("tensor"), py::arg("dst"), py::arg("tag") = 0)
      .def("recv", [](PG& g, const Tensor& t, int src, int tag) { run([&] { return g.recv(t, src, tag); }); },
           py::arg("tensor"), py::arg("src"), py::arg("tag") = 0)
      .def("barrier", [](PG& g) { run([&] { return g.barrier(); }); })
      .def("new_group", [](PG& g, const std::vector<int>& ranks) {
        py::gil_scoped_release nogil;
        return g.new_group(ranks);
      }, py::arg("ranks"));
  d.def("world", [] {
    py::gil_scoped_release nogil;
    return distributed::world();
  }, "The group of every process of the job (one process alone when not launched).");
  d.def("is_distributed", [] {
    py::gil_scoped_release nogil;
    return distributed::is_distributed();
  });
  d.def("local_rank", &distributed::local_rank);
}

}  // namespace tessera::python
