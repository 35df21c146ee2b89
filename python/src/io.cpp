// Files from Python: safetensors, the only tensor format Tessera loads (no
// code runs when a file is read, unlike a pickle).
#include "bindings.h"
#include "tessera/io/safetensors.h"

namespace tessera::python {

void bind_io(py::module_& m) {
  m.def("save_file", [](py::dict tensors, const std::string& path, py::object metadata) {
    io::NamedTensors ts;
    for (auto [k, v] : tensors) {
      if (!py::isinstance<py::str>(k)) type_error("save_file: names must be str, got " + type_name(k));
      if (!is_tensor(v)) type_error("save_file: '" + k.cast<std::string>() + "' is a " + type_name(v) + ", not a Tensor");
      ts.emplace_back(k.cast<std::string>(), v.cast<Tensor>().detach());
    }
    io::Metadata md;
    if (!metadata.is_none()) md = metadata.cast<io::Metadata>();
    py::gil_scoped_release nogil;
    io::save_safetensors(path, ts, md);
  }, py::arg("tensors"), py::arg("filename"), py::arg("metadata") = py::none(),
     "Writes {name: Tensor} as a safetensors file, atomically (a crash leaves the old file or the new one).");
  m.def("load_file", [](const std::string& path) {
    io::NamedTensors ts;
    {
      py::gil_scoped_release nogil;
      ts = io::load_safetensors(path);
    }
    py::dict d;
    for (auto& [k, t] : ts) d[py::str(k)] = tensor_object(t);
    return d;
  }, py::arg("filename"), "Reads a safetensors file into {name: Tensor}; a malformed file is a tessera.Error naming what is wrong.");
}

}  // namespace tessera::python
