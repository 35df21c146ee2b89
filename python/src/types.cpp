// dtypes, devices and Python numbers.
#include <array>

#include "bindings.h"
#include "tessera/core/error.h"

namespace tessera::ops {
// torch.result_type over tensors (wrapped numbers promote by category); the
// library's own rule (src/ops/op_utils.h), exported from libtessera.so.
DType result_type(std::initializer_list<const Tensor*> ts);
}  // namespace tessera::ops

namespace tessera::python {

namespace {
// PyTorch's names, so that code written for torch reads the same.
constexpr std::array<const char*, kNumDTypes> kNames = {"bool",  "uint8",    "int8",    "int32",  "int64",
                                                        "float16", "bfloat16", "float32", "float64"};
std::array<py::object, kNumDTypes>& dtype_objects() {
  static auto* objects = new std::array<py::object, kNumDTypes>();  // never freed: lives as long as the module
  return *objects;
}
}  // namespace

py::object dtype_object(DType t) { return dtype_objects()[static_cast<int>(t)]; }

bool is_dtype(py::handle h) { return py::isinstance<PyDType>(h); }

DType to_dtype(py::handle h) {
  if (is_dtype(h)) return h.cast<const PyDType&>().value;
  if (py::isinstance<py::str>(h)) {
    std::string s = h.cast<std::string>();
    for (int i = 0; i < kNumDTypes; ++i)
      if (s == kNames[i]) return static_cast<DType>(i);
    if (auto d = dtype_from_name(s)) return *d;
  }
  type_error("expected a dtype (tessera.float32, tessera.int64, ...), got " + type_name(h));
}

Device to_device(py::handle h) {
  if (py::isinstance<PyDevice>(h)) return h.cast<const PyDevice&>().value;
  if (py::isinstance<py::str>(h)) return parse_device(h.cast<std::string>());
  type_error("expected a device (tessera.device('cpu') or 'cpu'), got " + type_name(h));
}

std::optional<int64_t> index_value(py::handle h) {
  if (!PyIndex_Check(h.ptr())) return std::nullopt;
  PyObject* i = PyNumber_Index(h.ptr());
  if (!i) {
    PyErr_Clear();
    return std::nullopt;
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
  Py_DECREF(i);
  if (overflow || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return std::nullopt;
  }
  return static_cast<int64_t>(v);
}

bool is_number(py::handle h) {
  if (PyBool_Check(h.ptr()) || PyLong_Check(h.ptr()) || PyFloat_Check(h.ptr())) return true;
  // NumPy scalars (np.float32(1), np.int64(2)) without importing NumPy: they
  // implement __index__ (integers) or __float__ and are not sequences.
  if (is_tensor(h) || PySequence_Check(h.ptr())) return false;
  return PyIndex_Check(h.ptr()) || (PyNumber_Check(h.ptr()) && py::hasattr(h, "__float__") && py::hasattr(h, "dtype"));
}

Scalar to_scalar(py::handle h) {
  if (PyBool_Check(h.ptr())) return Scalar(h.ptr() == Py_True);
  if (PyLong_Check(h.ptr())) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
    if (overflow) throw py::value_error("the integer " + py::str(h).cast<std::string>() + " does not fit in int64");
    return Scalar(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(h.ptr())) return Scalar(PyFloat_AS_DOUBLE(h.ptr()));
  if (auto i = index_value(h)) return Scalar(*i);
  if (py::hasattr(h, "__float__") && py::hasattr(h, "dtype")) {
    std::string kind = py::str(h.attr("dtype").attr("kind"));
    if (kind == "b") return Scalar(h.cast<bool>());
    return Scalar(h.attr("__float__")().cast<double>());
  }
  type_error("expected a number (bool, int or float), got " + type_name(h));
}

py::object scalar_object(const Scalar& s) {
  if (s.is_bool()) return py::bool_(s.to<bool>());
  if (s.is_integral()) return py::int_(s.to<int64_t>());
  return py::float_(s.to<double>());
}

Tensor wrap_number(py::handle h) {
  Scalar s = to_scalar(h);
  Tensor t = scalar_tensor(s, s.is_floating() ? DType::F64 : s.dtype());
  t.impl()->wrapped_number = true;
  return t;
}

std::string type_name(py::handle h) {
  if (h.is_none()) return "None";
  return py::str(py::type::handle_of(h).attr("__name__"));
}

void type_error(const std::string& msg) { throw py::type_error(msg); }

void bind_types(py::module_& m) {
  py::class_<PyDType>(m, "dtype", "An element type: tessera.float32, tessera.int64, ...")
      .def_property_readonly("is_floating_point", [](const PyDType& d) { return is_floating(d.value); })
      .def_property_readonly("itemsize", [](const PyDType& d) { return dtype_size(d.value); })
      .def("__repr__", [](const PyDType& d) { return std::string("tessera.") + kNames[static_cast<int>(d.value)]; })
      .def("__reduce__", [](const PyDType& d) { return py::str(std::string("") + kNames[static_cast<int>(d.value)]); });
  // Named as in PyTorch; bool as bool_ here, so that the module (and its
  // stubs) never shadows Python's bool. tessera/__init__.py adds tessera.bool
  // and the other spellings (float, double, half, long, int).
  for (int i = 0; i < kNumDTypes; ++i) {
    dtype_objects()[i] = py::cast(PyDType{static_cast<DType>(i)});
    m.attr(i == 0 ? "bool_" : kNames[i]) = dtype_objects()[i];
  }

  py::class_<PyDevice>(m, "device", "Where a tensor lives: tessera.device('cpu'), 'meta', 'cuda:0'")
      .def(py::init([](const std::string& s) { return PyDevice{parse_device(s)}; }), py::arg("type"))
      .def(py::init([](const std::string& s, int index) {
             Device d = parse_device(s);
             d.index = static_cast<int16_t>(index);
             return PyDevice{d};
           }),
           py::arg("type"), py::arg("index"))
      .def_property_readonly("type", [](const PyDevice& d) { return std::string(device_type_name(d.value.type)); })
      .def_property_readonly("index", [](const PyDevice& d) -> py::object {
        if (d.value.type != DeviceType::CUDA) return py::none();
        return py::int_(d.value.index);
      })
      .def("__eq__", [](const PyDevice& a, py::handle b) {
        try { return a.value == to_device(b); } catch (...) { return false; }
      })
      .def("__hash__", [](const PyDevice& d) { return static_cast<int>(d.value.type) * 1024 + d.value.index; })
      .def("__str__", [](const PyDevice& d) { return device_str(d.value); })
      .def("__repr__", [](const PyDevice& d) { return "device(type='" + std::string(device_type_name(d.value.type)) + "')"; });

  m.def("get_default_dtype", [] { return dtype_object(default_float_dtype()); });
  m.def("set_default_dtype", [](py::handle d) { set_default_float_dtype(to_dtype(d)); }, py::arg("dtype"));
  m.def("result_type", [](py::handle a, py::handle b) {
    Tensor x = is_tensor(a) ? a.cast<Tensor>() : wrap_number(a), y = is_tensor(b) ? b.cast<Tensor>() : wrap_number(b);
    return dtype_object(ops::result_type({&x, &y}));
  }, py::arg("tensor1"), py::arg("tensor2"), "The dtype an op on the two computes in (tensors or Python numbers).");
  m.def("promote_types", [](py::handle a, py::handle b) { return dtype_object(promote_types(to_dtype(a), to_dtype(b))); });
}

}  // namespace tessera::python
