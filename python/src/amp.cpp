// Mixed precision and activation checkpointing from Python: autocast (the C++
// autocast::Guard, thread-local as in PyTorch), the GradScaler, and
// checkpoint over a Python function.
#include <memory>

#include "bindings.h"
#include "tessera/autograd/checkpoint.h"
#include "tessera/ops/autocast.h"
#include "tessera/optim/optimizer.h"
#include "tessera/train/grad_scaler.h"

namespace tessera::python {

namespace {

// `with tessera.autocast("cpu", dtype=tessera.bfloat16):` — the guard lives
// from __enter__ to __exit__ on the entering thread.
class Autocast {
 public:
  Autocast(const std::string& device_type, py::object dtype, bool enabled, py::object cache_enabled)
      : dtype_(dtype.is_none() ? DType::BF16 : to_dtype(dtype)), enabled_(enabled) {
    Device d = parse_device(device_type);
    if (d.type != DeviceType::CPU && d.type != DeviceType::CUDA)
      throw py::value_error("autocast: device_type must be 'cpu' or 'cuda', got '" + device_type + "'");
    if (dtype_ != DType::BF16 && dtype_ != DType::F16)
      throw py::value_error(std::string("autocast: dtype must be tessera.bfloat16 or tessera.float16, got ") +
                            dtype_name(dtype_));
  }
  void enter() {
    if (guard_) throw py::value_error("autocast: this context is already entered; make a new one to nest");
    guard_ = std::make_unique<autocast::Guard>(dtype_, enabled_);
  }
  void exit() { guard_.reset(); }

 private:
  DType dtype_;
  bool enabled_;
  std::unique_ptr<autocast::Guard> guard_;
};

}  // namespace

void bind_amp(py::module_& m) {
  py::module_ a = m.def_submodule("_amp", "Mixed precision and checkpointing");
  py::class_<Autocast>(a, "autocast", "Mixed precision for the block: ops that gain from it (matmul, conv, linear, "
                                     "attention) run in dtype (bfloat16 or float16), ops that need range stay f32. "
                                     "`with tessera.autocast(\"cpu\", dtype=tessera.bfloat16):`")
      .def(py::init<const std::string&, py::object, bool, py::object>(), py::arg("device_type"),
           py::arg("dtype") = py::none(), py::arg("enabled") = true, py::arg("cache_enabled") = py::none())
      .def("__enter__", [](Autocast& self) { self.enter(); return &self; }, py::return_value_policy::reference)
      .def("__exit__", [](Autocast& self, py::args) { self.exit(); return false; });
  a.def("is_autocast_enabled", [] { return autocast::enabled(); });
  a.def("get_autocast_dtype", [] { return dtype_object(autocast::dtype()); });

  py::class_<train::GradScaler>(a, "GradScaler")
      .def(py::init([](double init_scale, double growth_factor, double backoff_factor, int64_t growth_interval,
                       bool enabled) {
             return train::GradScaler({init_scale, growth_factor, backoff_factor, growth_interval, enabled});
           }),
           py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0, py::arg("backoff_factor") = 0.5,
           py::arg("growth_interval") = 2000, py::arg("enabled") = true)
      .def("scale", [](train::GradScaler& s, const Tensor& loss) { py::gil_scoped_release nogil; return s.scale(loss); })
      .def("unscale_", [](train::GradScaler& s, optim::Optimizer& o) { py::gil_scoped_release nogil; s.unscale_(o); })
      .def("step", [](train::GradScaler& s, optim::Optimizer& o) { py::gil_scoped_release nogil; return s.step(o); })
      .def("update", [](train::GradScaler& s, std::optional<double> new_scale) { s.update(new_scale); },
           py::arg("new_scale") = py::none())
      .def("get_scale", &train::GradScaler::get_scale)
      .def("is_enabled", &train::GradScaler::enabled)
      .def_property_readonly("skipped_steps", &train::GradScaler::skipped_steps)
      .def("state_dict", [](const train::GradScaler& s) { return s.state_dict().dump(); })
      .def("load_state_dict", [](train::GradScaler& s, const std::string& j) { s.load_state_dict(nlohmann::json::parse(j)); });

  // checkpoint(fn, inputs): runs fn(inputs) without keeping its activations and
  // runs it again in the backward pass (the same random numbers both times).
  a.def("checkpoint", [](py::function function, const TensorList& inputs) {
    auto fn = hold(std::move(function));  // the recompute in backward calls it again
    autograd::CheckpointFn f = [fn](const TensorList& in) -> TensorList {
      py::gil_scoped_acquire gil;
      py::object r = (*fn)(in);
      if (is_tensor(r)) return {r.cast<Tensor>()};
      TensorList out;
      for (py::handle h : r) out.push_back(h.cast<Tensor>());
      return out;
    };
    py::gil_scoped_release nogil;
    return autograd::checkpoint_flat(f, inputs);
  }, py::arg("function"), py::arg("inputs"));
}

}  // namespace tessera::python
