// Autograd from Python: grad modes, backward/grad over lists, anomaly mode,
// and the node a Python autograd.Function records (python/tessera/autograd.py).
#include <mutex>
#include <set>

#include "bindings.h"
#include "tessera/autograd/anomaly.h"
#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/autograd/node.h"

namespace tessera::python {

namespace {

TensorList tensors_of(py::handle seq, const char* what) {
  TensorList r;
  if (is_tensor(seq)) return {seq.cast<Tensor>()};
  for (py::handle h : seq) {
    if (h.is_none()) r.push_back(Tensor());
    else if (is_tensor(h)) r.push_back(h.cast<Tensor>());
    else type_error(std::string(what) + ": expected Tensors, got " + type_name(h));
  }
  return r;
}

// Node names outlive every node: a Function's class name, interned.
const char* intern(const std::string& s) {
  static std::mutex mu;
  static std::set<std::string>* names = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  return names->insert(s).first->c_str();
}

// Anomaly mode as a flag Python can set and read (the guard is scoped in C++).
std::unique_ptr<autograd::DetectAnomalyGuard>& anomaly_guard() {
  static auto* g = new std::unique_ptr<autograd::DetectAnomalyGuard>();
  return *g;
}

}  // namespace

void bind_autograd(py::module_& m) {
  py::module_ a = m.def_submodule("_autograd", "Autograd's engine and modes");
  a.def("is_grad_enabled", &GradMode::is_enabled);
  a.def("set_grad_enabled", &GradMode::set_enabled, py::arg("mode"));
  a.def("backward", [](py::handle tensors, py::handle grads, bool retain_graph, bool create_graph) {
    TensorList outs = tensors_of(tensors, "backward"), gs = grads.is_none() ? TensorList{} : tensors_of(grads, "backward");
    py::gil_scoped_release nogil;
    autograd::backward(outs, gs, retain_graph, create_graph);
  }, py::arg("tensors"), py::arg("grad_tensors") = py::none(), py::arg("retain_graph") = false, py::arg("create_graph") = false);
  a.def("grad", [](py::handle outputs, py::handle inputs, py::handle grads, py::object retain_graph, bool create_graph,
                   bool allow_unused) {
    TensorList outs = tensors_of(outputs, "grad"), ins = tensors_of(inputs, "grad");
    TensorList gs = grads.is_none() ? TensorList{} : tensors_of(grads, "grad");
    std::optional<bool> retain;
    if (!retain_graph.is_none()) retain = retain_graph.cast<bool>();
    TensorList r;
    {
      py::gil_scoped_release nogil;
      r = autograd::grad(outs, ins, gs, retain, create_graph, allow_unused);
    }
    py::tuple t(r.size());
    for (size_t i = 0; i < r.size(); ++i) t[i] = r[i].defined() ? tensor_object(r[i]) : py::none();
    return t;
  }, py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs") = py::none(), py::arg("retain_graph") = py::none(),
     py::arg("create_graph") = false, py::arg("allow_unused") = false);
  a.def("queue_callback", [](py::function fn) {
    auto f = hold(std::move(fn));
    autograd::queue_callback([f] {
      py::gil_scoped_acquire gil;
      (*f)();
    });
  }, py::arg("callback"), "Runs callback once the backward pass running on this thread has finished.");
  a.def("set_detect_anomaly", [](bool on) {
    if (on && !anomaly_guard()) anomaly_guard() = std::make_unique<autograd::DetectAnomalyGuard>();
    if (!on) anomaly_guard().reset();
  });
  a.def("is_anomaly_enabled", &autograd::anomaly_mode_enabled);
  // record(name, inputs, outputs, backward): makes `outputs` (computed from
  // `inputs` without a graph) the results of one node whose VJP calls
  // backward(grads) -> one gradient (or None) per input. Returns the outputs.
  a.def("record", [](const std::string& name, py::handle inputs, py::handle outputs, py::function backward) {
    TensorList ins = tensors_of(inputs, "record"), outs = tensors_of(outputs, "record");
    if (!autograd::any_requires_grad(ins)) return outs;
    auto fn = hold(std::move(backward));
    size_t n_inputs = ins.size();
    std::string node_name = name + "Backward";
    autograd::VjpFn vjp = [fn, n_inputs, node_name](const autograd::VjpArgs& args) -> TensorList {
      py::gil_scoped_acquire gil;
      py::list grads;
      for (const Tensor& g : args.grads) grads.append(g.defined() ? tensor_object(g) : py::none());
      py::object r = (*fn)(grads);
      TensorList out;
      for (py::handle h : r) out.push_back(h.is_none() ? Tensor() : h.cast<Tensor>());
      if (out.size() != n_inputs)
        throw py::value_error(node_name + ": backward returned " + std::to_string(out.size()) + " gradients for " +
                              std::to_string(n_inputs) + " tensor inputs");
      return out;
    };
    autograd::record(intern(node_name), ins, outs, std::move(vjp));
    return outs;
  });
}

}  // namespace tessera::python
