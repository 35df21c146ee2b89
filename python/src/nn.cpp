// The C++ layers and the model zoo from Python: any nn::Module (a Linear, a
// ResNet, the GPT, the Llama) as tessera.nn.CppModule, whose parameters are
// the C++ module's own tensors, so a Python Module may hold one and train it.
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "tessera/io/config.h"
#include "tessera/llm/gguf.h"
#include "tessera/llm/gpt_gguf.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/nn/module.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/train/recipe.h"

namespace tessera::python {

namespace {

py::list named(const nn::NamedTensors& ts) {
  py::list l;
  for (const auto& [name, t] : ts) l.append(py::make_tuple(name, tensor_object(t)));
  return l;
}

// A Llama or GPT of the zoo as a GGUF file, with the tokenizer of another GGUF file.
void save_gguf(const nn::Module& m, const std::string& path, const std::string& tokenizer_from, const std::string& type) {
  auto t = llm::ggml_type_from_name(type);
  TS_CHECK(t, "save_gguf: unknown weight type '", type, "' (F32, F16, BF16, Q8_0 or Q4_0)");
  std::optional<llm::Tokenizer> tok;
  if (!tokenizer_from.empty()) tok = llm::Tokenizer::from_gguf(llm::GgufFile::open(tokenizer_from));
  llm::GgufExportOptions o;
  o.type = *t;
  o.tokenizer = tok ? &*tok : nullptr;
  if (auto* llama = dynamic_cast<const nn::zoo::Llama*>(&m)) return llm::save_llama_gguf(*llama, path, o);
  if (auto* gpt = dynamic_cast<const nn::zoo::GPT*>(&m)) return llm::save_gpt_gguf(*gpt, path, o);
  TS_ERROR("save_gguf: a ", m.type_name(), " is neither a Llama nor a GPT of the zoo");
}

}  // namespace

void bind_nn(py::module_& m) {
  py::module_ n = m.def_submodule("_nn", "The C++ modules");
  py::class_<nn::Module, std::shared_ptr<nn::Module>>(n, "Module")
      .def("__call__", [](nn::Module& mod, const Tensor& x) {
        py::gil_scoped_release nogil;
        return mod(x);
      })
      .def_property_readonly("type_name", &nn::Module::type_name)
      .def("named_parameters", [](const nn::Module& mod, bool recurse) { return named(mod.named_parameters(recurse)); },
           py::arg("recurse") = true)
      .def("named_buffers", [](const nn::Module& mod, bool recurse) { return named(mod.named_buffers(recurse)); },
           py::arg("recurse") = true)
      .def("named_children", [](const nn::Module& mod) { return mod.named_children(); })
      .def("train", [](nn::Module& mod, bool on) { mod.train(on); }, py::arg("mode") = true)
      .def_property_readonly("training", &nn::Module::is_training)
      .def("num_parameters", &nn::Module::num_parameters, py::arg("trainable_only") = false)
      .def("__repr__", &nn::Module::str);
  n.def("build_model", [](const std::string& config_json) {
    io::Config c(nlohmann::json::parse(config_json), "model");
    return train::build_model(c);
  }, py::arg("config"), "A model of the zoo from its config ({'name': 'llama', 'dim': ...}), as `model:` in a YAML config.");
  n.def("model_names", &train::model_names);
  n.def("save_gguf", &save_gguf, py::arg("module"), py::arg("path"), py::arg("tokenizer_from") = "",
        py::arg("type") = "F32");
}

}  // namespace tessera::python
