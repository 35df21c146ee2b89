// Tessera's errors as the Python exceptions Python users expect.
//
// Note [Python exception types]
// The library raises one C++ type, tessera::Error, for every bad argument: a
// shape that does not broadcast, a dim out of range, a value out of its
// domain. Python code written for PyTorch catches RuntimeError for these,
// Python's conventions say ValueError, so tessera.Error is both: a subclass of
// ValueError and of RuntimeError. The bindings raise TypeError themselves for
// an argument of the wrong type and IndexError for an index out of range,
// before the library sees it. An allocation over the limit is
// tessera.OutOfMemoryError (also a MemoryError); a broken invariant inside
// Tessera is tessera.InternalError (a RuntimeError: a bug to report).
#include "bindings.h"
#include "tessera/core/error.h"

namespace tessera::python {

namespace {
PyObject* g_error = nullptr;
PyObject* g_oom = nullptr;
PyObject* g_internal = nullptr;

PyObject* make_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("tessera.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}
}  // namespace

void set_python_error(std::exception_ptr p) {
  try {
    std::rethrow_exception(p);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const OutOfMemoryError& e) {
    PyErr_SetString(g_oom, e.what());
  } catch (const InternalError& e) {
    PyErr_SetString(g_internal, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_error, e.what());
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "an unknown C++ exception");
  }
}

void bind_errors(py::module_& m) {
  g_error = make_exception(
      m, "Error", py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError)).release().ptr(),
      "A bad argument or input: the message names what was wrong and what would be right. "
      "A ValueError and a RuntimeError.");
  g_oom = make_exception(m, "OutOfMemoryError",
                                        py::make_tuple(py::handle(g_error), py::handle(PyExc_MemoryError)).release().ptr(),
                                        "An allocation over tessera.set_memory_limit or beyond what the system gives.");
  g_internal = make_exception(m, "InternalError", PyExc_RuntimeError,
                                             "A broken invariant inside Tessera: a bug to report.");
  // pybind11 translates its own exception types first; Tessera's go through set_python_error.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error&) {
      set_python_error(p);
    }
  });
}

}  // namespace tessera::python
