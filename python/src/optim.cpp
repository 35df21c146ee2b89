// The C++ optimizers (one fused loop per parameter) under tessera.optim; the
// Python classes in tessera/optim/ give them PyTorch's constructors and
// param_groups as dicts.
#include "bindings.h"
#include "tessera/optim/optimizer.h"

namespace tessera::python {

namespace {
optim::ParamGroup group_of(py::handle params, const optim::Options& options) {
  optim::ParamGroup g;
  for (py::handle p : params) {
    if (!is_tensor(p)) type_error("an optimizer's params must be Tensors, got " + type_name(p));
    g.params.push_back(p.cast<Tensor>());
  }
  g.options = options;
  return g;
}
}  // namespace

void bind_optim(py::module_& m) {
  py::module_ o = m.def_submodule("_optim", "The C++ optimizers");
  py::class_<optim::Optimizer>(o, "Optimizer")
      .def("step", [](optim::Optimizer& opt) { py::gil_scoped_release nogil; opt.step(); })
      .def("zero_grad", [](optim::Optimizer& opt, bool set_to_none) { opt.zero_grad(set_to_none); },
           py::arg("set_to_none") = true)
      .def_property_readonly("name", &optim::Optimizer::name)
      .def("num_groups", [](const optim::Optimizer& opt) { return opt.param_groups().size(); })
      .def("group_options", [](const optim::Optimizer& opt, size_t i) { return opt.param_groups().at(i).options; })
      .def("set_group_option", [](optim::Optimizer& opt, size_t i, const std::string& key, double v) {
        opt.param_groups().at(i).options[key] = v;
      })
      .def("group_params", [](const optim::Optimizer& opt, size_t i) { return opt.param_groups().at(i).params; })
      .def("add_param_group", [](optim::Optimizer& opt, py::handle params, const optim::Options& options) {
        opt.add_param_group(group_of(params, options));
      })
      .def("state_dict", [](const optim::Optimizer& opt) {
        optim::OptimizerState s = opt.state_dict();
        py::dict tensors;
        for (auto& [k, t] : s.tensors) tensors[py::str(k)] = tensor_object(t);
        return py::make_tuple(tensors, py::str(s.groups.dump()));
      })
      .def("load_state_dict", [](optim::Optimizer& opt, py::dict tensors, const std::string& groups) {
        optim::OptimizerState s;
        for (auto [k, v] : tensors) s.tensors.emplace_back(py::str(k), v.cast<Tensor>());
        s.groups = nlohmann::json::parse(groups);
        opt.load_state_dict(s);
      });
  o.def("make", [](const std::string& name, py::list groups, const optim::Options& defaults) {
    std::vector<optim::ParamGroup> gs;
    for (py::handle g : groups) {
      py::tuple t = g.cast<py::tuple>();
      gs.push_back(group_of(t[0], t[1].cast<optim::Options>()));
    }
    return optim::make_optimizer(name, std::move(gs), defaults);
  }, py::arg("name"), py::arg("groups"), py::arg("defaults"));
  o.def("names", &optim::optimizer_names);
  o.def("clip_grad_norm_", [](py::handle params, double max_norm, double norm_type, bool error_if_nonfinite) {
    TensorList ps;
    for (py::handle p : params) ps.push_back(p.cast<Tensor>());
    py::gil_scoped_release nogil;
    return optim::clip_grad_norm_(ps, max_norm, norm_type, error_if_nonfinite);
  }, py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false);
}

}  // namespace tessera::python
