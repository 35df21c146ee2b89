// The graph compiler, ONNX and saved graphs from Python: compile(fn) traces a
// Python function (the ops it calls record into the graph, as C++ ops do),
// optimizes and runs the graph; capture/export write it as ONNX or as a
// Tessera graph directory; load runs either without the Python code.
#include "bindings.h"
#include "tessera/compile/compile.h"
#include "tessera/compile/model.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/serialize.h"

namespace tessera::python {

namespace {

// A Python callable as a compile::Function: the tensors in, a tensor or a
// sequence of tensors out. Called by the tracer with the GIL taken back.
compile::Function function_of(py::function fn) {
  auto f = hold(std::move(fn));
  return [f](const TensorList& in) -> TensorList {
    py::gil_scoped_acquire gil;
    py::tuple args(in.size());
    for (size_t i = 0; i < in.size(); ++i) args[i] = tensor_object(in[i]);
    py::object r = (*f)(*args);
    if (is_tensor(r)) return {tensor_ref(r)};
    TensorList out;
    for (py::handle h : r) {
      if (!is_tensor(h)) type_error("compile: the function must return a Tensor or a sequence of Tensors, got a " + type_name(h));
      out.push_back(tensor_ref(h));
    }
    return out;
  };
}

compile::NamedTensors named(const std::vector<std::pair<std::string, Tensor>>& params) {
  return compile::NamedTensors(params.begin(), params.end());
}

std::vector<compile::DynamicDim> dims(const std::vector<std::tuple<int, int, std::string>>& d) {
  std::vector<compile::DynamicDim> out;
  for (auto& [input, dim, name] : d) out.push_back({input, dim, name});
  return out;
}

py::object results(TensorList&& out) {
  if (out.size() == 1) return tensor_object(std::move(out[0]));
  py::tuple t(out.size());
  for (size_t i = 0; i < out.size(); ++i) t[i] = tensor_object(std::move(out[i]));
  return t;
}

TensorList tensor_args(const py::args& args) {
  TensorList in;
  for (py::handle h : args) {
    if (!is_tensor(h)) type_error("a compiled function takes Tensors, got a " + type_name(h));
    in.push_back(tensor_ref(h));
  }
  return in;
}

py::list ports(const std::vector<Model::Port>& ps) {
  py::list l;
  for (const auto& p : ps) l.append(py::make_tuple(p.name, dtype_object(p.dtype), p.shape));
  return l;
}

}  // namespace

void bind_compile(py::module_& m) {
  py::module_ c = m.def_submodule("_compile", "The graph compiler, ONNX and saved graphs");
  py::class_<compile::CompiledFunction>(c, "CompiledFunction")
      .def("__call__", [](compile::CompiledFunction& f, py::args args) {
        TensorList in = tensor_args(args), out;
        {
          py::gil_scoped_release nogil;
          out = f(in);
        }
        return results(std::move(out));
      })
      .def_property_readonly("traces", &compile::CompiledFunction::traces)
      .def_property_readonly("cache_entries", &compile::CompiledFunction::cache_entries)
      .def("graph", [](const compile::CompiledFunction& f) -> py::object {
        auto exe = f.last();
        if (!exe) return py::none();
        return py::str(compile::dump(exe->graph()));
      }, "The optimized graph that ran last, as text (None before the first call).");
  c.def("compile", [](py::function fn, const std::vector<std::pair<std::string, Tensor>>& params,
                      const std::vector<std::tuple<int, int, std::string>>& dynamic, size_t cache_size) {
    compile::CompileOptions o;
    o.dynamic = dims(dynamic);
    o.cache_size = cache_size;
    return compile::compile(function_of(std::move(fn)), o, named(params));
  }, py::arg("fn"), py::arg("params"), py::arg("dynamic"), py::arg("cache_size") = 8);

  // A captured graph, to export or save.
  py::class_<compile::Graph>(c, "Graph")
      .def("__str__", [](const compile::Graph& g) { return compile::dump(g); })
      .def("save", [](const compile::Graph& g, const std::string& dir) { compile::save(g, dir); }, py::arg("dir"))
      .def("export_onnx", [](const compile::Graph& g, const std::string& path) { compile::export_onnx(g, path); },
           py::arg("path"));
  c.def("capture", [](py::function fn, const TensorList& examples, const std::vector<std::pair<std::string, Tensor>>& params,
                      const std::vector<std::tuple<int, int, std::string>>& dynamic, const std::vector<std::string>& names) {
    compile::CaptureOptions o;
    o.dynamic = dims(dynamic);
    o.input_names = names;
    compile::Function f = function_of(std::move(fn));
    py::gil_scoped_release nogil;
    return compile::capture(f, examples, named(params), o);
  }, py::arg("fn"), py::arg("examples"), py::arg("params"), py::arg("dynamic"), py::arg("input_names"));

  py::class_<Model>(c, "Model")
      .def("__call__", [](const Model& model, py::args args) {
        TensorList in = tensor_args(args), out;
        {
          py::gil_scoped_release nogil;
          out = model.run(in);
        }
        return results(std::move(out));
      })
      .def_property_readonly("inputs", [](const Model& model) { return ports(model.inputs()); })
      .def_property_readonly("outputs", [](const Model& model) { return ports(model.outputs()); })
      .def("example_inputs", &Model::example_inputs, py::arg("dynamic") = 1, py::arg("random") = false)
      .def("__str__", [](const Model& model) { return compile::dump(model.graph()); });
  c.def("load", [](const std::string& path) {
    py::gil_scoped_release nogil;
    return load(path);
  }, py::arg("path"), "A saved graph directory or an ONNX file, optimized and ready to run (no Python code runs).");
}

}  // namespace tessera::python
