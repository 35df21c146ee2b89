// The C++ optimizers (one fused loop per parameter) under tessera.optim; the
// Python classes in tessera/optim/ give them PyTorch's constructors and
// param_groups as dicts.
#include "bindings.h"
#include "tessera/optim/optimizer.h"
#include "tessera/optim/scheduler.h"

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

py::tuple optimizer_state_object(const optim::OptimizerState& s) {
  py::dict tensors;
  for (auto& [k, t] : s.tensors) tensors[py::str(k)] = tensor_object(t);
  return py::make_tuple(tensors, py::str(s.groups.dump()));
}

optim::OptimizerState optimizer_state_from(py::dict tensors, const std::string& groups) {
  optim::OptimizerState s;
  for (auto [k, v] : tensors) {
    if (!is_tensor(v)) type_error("an optimizer state's '" + py::str(k).cast<std::string>() + "' must be a Tensor, got " + type_name(v));
    s.tensors.emplace_back(py::str(k), v.cast<Tensor>());
  }
  s.groups = nlohmann::json::parse(groups);
  return s;
}

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
      .def("state_dict", [](const optim::Optimizer& opt) { return optimizer_state_object(opt.state_dict()); })
      .def("load_state_dict", [](optim::Optimizer& opt, py::dict tensors, const std::string& groups) {
        opt.load_state_dict(optimizer_state_from(tensors, groups));
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

  // The LR schedulers, with torch.optim.lr_scheduler's arguments; each keeps its optimizer alive.
  using optim::Optimizer;
  py::class_<optim::LRScheduler>(o, "LRScheduler")
      .def("step", [](optim::LRScheduler& s, py::object metric) {
        if (metric.is_none()) s.step();
        else s.step(metric.cast<double>());
      }, py::arg("metric") = py::none())
      .def("get_last_lr", &optim::LRScheduler::get_last_lr)
      .def_property_readonly("last_epoch", &optim::LRScheduler::last_epoch)
      .def("state_dict", [](const optim::LRScheduler& s) { return s.state_dict().dump(); })
      .def("load_state_dict", [](optim::LRScheduler& s, const std::string& j) { s.load_state_dict(nlohmann::json::parse(j)); });
  auto keep = py::keep_alive<1, 2>();
  py::class_<optim::StepLR, optim::LRScheduler>(o, "StepLR")
      .def(py::init<Optimizer&, int64_t, double>(), keep, py::arg("optimizer"), py::arg("step_size"), py::arg("gamma") = 0.1);
  py::class_<optim::MultiStepLR, optim::LRScheduler>(o, "MultiStepLR")
      .def(py::init<Optimizer&, std::vector<int64_t>, double>(), keep, py::arg("optimizer"), py::arg("milestones"),
           py::arg("gamma") = 0.1);
  py::class_<optim::ExponentialLR, optim::LRScheduler>(o, "ExponentialLR")
      .def(py::init<Optimizer&, double>(), keep, py::arg("optimizer"), py::arg("gamma"));
  py::class_<optim::CosineAnnealingLR, optim::LRScheduler>(o, "CosineAnnealingLR")
      .def(py::init<Optimizer&, int64_t, double>(), keep, py::arg("optimizer"), py::arg("T_max"), py::arg("eta_min") = 0.0);
  py::class_<optim::LinearLR, optim::LRScheduler>(o, "LinearLR")
      .def(py::init<Optimizer&, double, double, int64_t>(), keep, py::arg("optimizer"), py::arg("start_factor") = 1.0 / 3,
           py::arg("end_factor") = 1.0, py::arg("total_iters") = 5);
  py::class_<optim::WarmupCosineLR, optim::LRScheduler>(o, "WarmupCosineLR")
      .def(py::init<Optimizer&, int64_t, int64_t, double>(), keep, py::arg("optimizer"), py::arg("warmup_steps"),
           py::arg("total_steps"), py::arg("min_lr") = 0.0);
  py::class_<optim::OneCycleLR, optim::LRScheduler>(o, "OneCycleLR")
      .def(py::init<Optimizer&, double, int64_t, double, const std::string&, bool, double, double, double, double>(), keep,
           py::arg("optimizer"), py::arg("max_lr"), py::arg("total_steps"), py::arg("pct_start") = 0.3,
           py::arg("anneal_strategy") = "cos", py::arg("cycle_momentum") = true, py::arg("base_momentum") = 0.85,
           py::arg("max_momentum") = 0.95, py::arg("div_factor") = 25.0, py::arg("final_div_factor") = 1e4);
  py::class_<optim::ReduceLROnPlateau, optim::LRScheduler>(o, "ReduceLROnPlateau")
      .def(py::init<Optimizer&, const std::string&, double, int64_t, double, const std::string&, int64_t, double, double>(),
           keep, py::arg("optimizer"), py::arg("mode") = "min", py::arg("factor") = 0.1, py::arg("patience") = 10,
           py::arg("threshold") = 1e-4, py::arg("threshold_mode") = "rel", py::arg("cooldown") = 0,
           py::arg("min_lr") = 0.0, py::arg("eps") = 1e-8);
  o.def("clip_grad_norm_", [](py::handle params, double max_norm, double norm_type, bool error_if_nonfinite) {
    TensorList ps;
    for (py::handle p : params) ps.push_back(p.cast<Tensor>());
    py::gil_scoped_release nogil;
    return optim::clip_grad_norm_(ps, max_norm, norm_type, error_if_nonfinite);
  }, py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type") = 2.0, py::arg("error_if_nonfinite") = false);
}

}  // namespace tessera::python
