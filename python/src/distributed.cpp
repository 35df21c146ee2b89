// Process groups from Python (Open MPI underneath, as for `tessera train`
// under `tessera launch`): the world group, its collectives on tensors, sub-groups.
#include "bindings.h"
#include <map>

#include "tessera/core/error.h"
#include "tessera/distributed/ddp.h"
#include "tessera/distributed/process_group.h"
#include "tessera/distributed/zero.h"
#include "tessera/optim/optimizer.h"

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

using Named = std::vector<std::pair<std::string, Tensor>>;

// What the C++ data parallelism sees of a Python model. DistributedDataParallel
// and ZeroRedundancy walk a module's named parameters and buffers, so a Python
// model is handed to them as a tree of bare modules holding its own tensors
// (shared, not copied) under its dotted names: one implementation of buckets,
// overlap and sharding for Python and C++ models alike.
std::shared_ptr<nn::Module> tensor_tree(const Named& params, const Named& buffers) {
  auto root = std::make_shared<nn::Module>("PythonModel");
  std::map<std::string, std::shared_ptr<nn::Module>> made;  // dotted path -> module
  auto owner = [&](const std::string& name, std::string& leaf) {
    std::shared_ptr<nn::Module> m = root;
    size_t start = 0;
    for (size_t dot; (dot = name.find('.', start)) != std::string::npos; start = dot + 1) {
      auto& child = made[name.substr(0, dot)];
      if (!child) child = m->register_module(name.substr(start, dot - start), std::make_shared<nn::Module>("Module"));
      m = child;
    }
    leaf = name.substr(start);
    return m;
  };
  std::string leaf;
  for (auto& [name, t] : params) owner(name, leaf)->register_parameter(leaf, t, t.requires_grad());
  for (auto& [name, t] : buffers) owner(name, leaf)->register_buffer(leaf, t);
  return root;
}

// A C++ DistributedDataParallel or ZeroRedundancy with the module it walks,
// which it must not outlive (members are destroyed last to first).
struct PyDdp {
  std::shared_ptr<nn::Module> module;
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
};
struct PyZero {
  std::shared_ptr<nn::Module> module;
  std::unique_ptr<distributed::ZeroRedundancy> zero;
};
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
  d.def("tensor_tree", &tensor_tree, py::arg("parameters"), py::arg("buffers"),
        "A C++ module tree holding a Python model's tensors under their names (shared, not copied).");

  py::class_<PyDdp>(d, "DistributedDataParallel")
      .def(py::init([](std::shared_ptr<nn::Module> module, std::shared_ptr<PG> group, double bucket_cap_mb,
                       double first_bucket_mb, bool find_unused_parameters, bool broadcast_buffers, bool overlap,
                       const std::string& compression, int powersgd_rank, int64_t powersgd_start_step) {
             distributed::DdpOptions o{bucket_cap_mb, first_bucket_mb, find_unused_parameters, broadcast_buffers,
                                       overlap, compression, powersgd_rank, powersgd_start_step};
             py::gil_scoped_release nogil;  // broadcasts rank 0's weights
             auto p = std::make_unique<PyDdp>();
             p->module = std::move(module);
             p->ddp = std::make_unique<distributed::DistributedDataParallel>(*p->module, std::move(group), o);
             return p;
           }),
           py::arg("module"), py::arg("group"), py::kw_only(), py::arg("bucket_cap_mb") = 25.0,
           py::arg("first_bucket_mb") = 1.0, py::arg("find_unused_parameters") = false,
           py::arg("broadcast_buffers") = true, py::arg("overlap") = true, py::arg("compression") = "none",
           py::arg("powersgd_rank") = 1, py::arg("powersgd_start_step") = 1000)
      .def("require_sync", [](PyDdp& p, bool on) { p.ddp->require_sync(on); })
      .def("set_step", [](PyDdp& p, int64_t step) { p.ddp->set_step(step); })
      .def("buckets", [](const PyDdp& p) { return p.ddp->buckets(); })
      .def("last_wait_seconds", [](const PyDdp& p) { return p.ddp->last_wait_seconds(); });

  py::class_<PyZero>(d, "ZeroRedundancy")
      .def(py::init([](std::shared_ptr<nn::Module> module, optim::Optimizer& optimizer, std::shared_ptr<PG> group,
                       int stage, double bucket_cap_mb, double first_bucket_mb, bool find_unused_parameters,
                       bool overlap) {
             distributed::ZeroOptions o{stage, bucket_cap_mb, first_bucket_mb, find_unused_parameters, overlap};
             py::gil_scoped_release nogil;
             auto p = std::make_unique<PyZero>();
             p->module = std::move(module);
             p->zero = std::make_unique<distributed::ZeroRedundancy>(*p->module, optimizer, std::move(group), o);
             return p;
           }),
           py::keep_alive<1, 3>(), py::arg("module"), py::arg("optimizer"), py::arg("group"), py::kw_only(),
           py::arg("stage") = 1, py::arg("bucket_cap_mb") = 25.0, py::arg("first_bucket_mb") = 1.0,
           py::arg("find_unused_parameters") = false, py::arg("overlap") = true)
      .def("step", [](PyZero& p) { py::gil_scoped_release nogil; p.zero->step(); },
           "The optimizer's step on this rank's shard, then every rank's shards gathered.")
      .def("clear_gradients", [](PyZero& p) { p.zero->clear_gradients(); })
      .def("gather_parameters", [](PyZero& p) { py::gil_scoped_release nogil; p.zero->gather_parameters(); })
      .def("set_whole_parameters", [](PyZero& p, bool whole) {
        py::gil_scoped_release nogil;
        p.zero->set_whole_parameters(whole);
      })
      .def("require_sync", [](PyZero& p, bool on) { p.zero->require_sync(on); })
      .def("set_step", [](PyZero& p, int64_t step) { p.zero->set_step(step); })
      .def("consolidated_state", [](PyZero& p) {
        optim::OptimizerState s;
        {
          py::gil_scoped_release nogil;  // gathers every rank's shard
          s = p.zero->consolidated_state();
        }
        return optimizer_state_object(s);
      })
      .def("load_consolidated_state", [](PyZero& p, py::dict tensors, const std::string& groups) {
        optim::OptimizerState s = optimizer_state_from(tensors, groups);
        py::gil_scoped_release nogil;
        p.zero->load_consolidated_state(s);
      })
      .def_property_readonly("stage", [](const PyZero& p) { return p.zero->stage(); })
      .def("segments", [](const PyZero& p) { return p.zero->segments(); })
      .def("shard_numel", [](const PyZero& p) { return p.zero->shard_numel(); })
      .def("last_wait_seconds", [](const PyZero& p) { return p.zero->last_wait_seconds(); });

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
