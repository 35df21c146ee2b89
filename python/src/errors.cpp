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
PyObject* make_exception(py::module_& m, const char* name, PyObject* bases, const char* doc) {
  std::string qualified = std::string("tessera.") + name;
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases, nullptr);
  if (!type) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}
}  // namespace

void bind_errors(py::module_& m) {
  static PyObject* error = make_exception(
      m, "Error", py::make_tuple(py::handle(PyExc_ValueError), py::handle(PyExc_RuntimeError)).release().ptr(),
      "A bad argument or input: the message names what was wrong and what would be right. "
      "A ValueError and a RuntimeError.");
  static PyObject* oom = make_exception(m, "OutOfMemoryError",
                                        py::make_tuple(py::handle(error), py::handle(PyExc_MemoryError)).release().ptr(),
                                        "An allocation over tessera.set_memory_limit or beyond what the system gives.");
  static PyObject* internal = make_exception(m, "InternalError", PyExc_RuntimeError,
                                             "A broken invariant inside Tessera: a bug to report.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemoryError& e) {
      PyErr_SetString(oom, e.what());
    } catch (const InternalError& e) {
      PyErr_SetString(internal, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error, e.what());
    }
  });
}

}  // namespace tessera::python
