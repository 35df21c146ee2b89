#pragma once
// The `tessera._C` extension: one pybind11 module over libtessera.so. Each
// bind_*.cpp file binds one layer; this header holds what they share — the
// conversions between Python objects and Tessera's values, and the rule that
// every call into C++ runs with the GIL released (Note [The GIL] in module.cpp).
#include <pybind11/pybind11.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/dtype.h"
#include "tessera/core/scalar.h"
#include "tessera/core/tensor.h"

namespace tessera::python {

namespace py = pybind11;

// tessera.float32 and its kin: one object per dtype, compared by identity.
struct PyDType {
  DType value;
};
py::object dtype_object(DType t);
bool is_dtype(py::handle h);
DType to_dtype(py::handle h);  // a tessera dtype, or a TypeError naming what was given

// tessera.device("cpu").
struct PyDevice {
  Device value;
};
Device to_device(py::handle h);  // a tessera.device or a string ("cpu", "meta", "cuda:0")

// The integer a Python object stands for through __index__ (int, NumPy
// integers), or nullopt (no __index__, one that raises, or out of int64).
std::optional<int64_t> index_value(py::handle h);

// Python numbers: bool, int (also NumPy integers) and float (also NumPy floats).
bool is_number(py::handle h);
Scalar to_scalar(py::handle h);
py::object scalar_object(const Scalar& s);

// A Python number as a 0-D tensor that promotes like one (a "wrapped number":
// t + 1.5 keeps t's float dtype, as in PyTorch).
Tensor wrap_number(py::handle h);

// Tensors cross as tessera.Tensor; `tensor_object` gives the Python object.
py::object tensor_object(Tensor t);
bool is_tensor(py::handle h);
const Tensor& tensor_ref(py::handle h);  // h must be a tessera.Tensor (is_tensor)

// An optimizer's state as Python holds it: ({name: tensor}, the groups as JSON
// text), what Optimizer.state_dict gives and a ZeRO's consolidated state too.
}  // namespace tessera::python
namespace tessera::optim {
struct OptimizerState;
}
namespace tessera::python {
py::tuple optimizer_state_object(const optim::OptimizerState& s);
optim::OptimizerState optimizer_state_from(py::dict tensors, const std::string& groups);

// A short description of a Python value's type for error messages ("int", "list", "Tensor").
std::string type_name(py::handle h);

// A Python callable kept by C++ code that may let go of it without the GIL (a
// hook or callback stored in a std::function, destroyed inside backward or on
// another thread): the last owner takes the GIL to release it.
inline std::shared_ptr<py::function> hold(py::function f) {
  return std::shared_ptr<py::function>(new py::function(std::move(f)), [](py::function* p) {
    if (!Py_IsInitialized()) return;  // at exit: Python is gone, nothing to release
    py::gil_scoped_acquire gil;
    delete p;
  });
}

// Sets the Python error for a C++ exception (for entry points outside
// pybind11's dispatcher): the same mapping as the registered translator.
void set_python_error(std::exception_ptr p);

// "...: expected X, got Y" as a Python TypeError.
[[noreturn]] void type_error(const std::string& msg);

void bind_errors(py::module_& m);
void bind_types(py::module_& m);
void bind_tensor(py::module_& m);
void bind_interop(py::module_& m);
void bind_ops(py::module_& m);
void bind_autograd(py::module_& m);
void bind_layers(py::module_& m);  // after bind_nn (the layers derive from its Module)
void bind_optim(py::module_& m);
void bind_io(py::module_& m);
void bind_amp(py::module_& m);
void bind_compile(py::module_& m);
void bind_serve(py::module_& m);
void bind_llm(py::module_& m);
void bind_nn(py::module_& m);
void bind_train(py::module_& m);
void bind_profiler(py::module_& m);
void bind_distributed(py::module_& m);
void bind_data(py::module_& m);
void bind_quant(py::module_& m);

}  // namespace tessera::python
