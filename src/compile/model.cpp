#include "tessera/compile/model.h"

#include <filesystem>

#include "tessera/autograd/grad_mode.h"
#include "tessera/compile/onnx.h"
#include "tessera/compile/passes.h"
#include "tessera/compile/serialize.h"
#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

std::vector<Model::Port> ports(const std::vector<compile::Value*>& vs, const std::vector<std::string>& syms) {
  std::vector<Model::Port> out;
  for (size_t i = 0; i < vs.size(); ++i) {
    const compile::Value* v = vs[i];
    Model::Port p{v->name.empty() ? "output" + std::to_string(i) : v->name, v->dtype, {}};
    for (const compile::SymInt& d : v->shape) p.shape.push_back(d.str(syms));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Model::Model(compile::Graph g, bool optimize) {
  if (optimize) compile::optimize(g);
  exe_ = std::make_shared<const compile::Executable>(std::move(g));
}

TensorList Model::run(const TensorList& inputs) const {
  NoGradGuard no_grad;
  return exe_->run(inputs);
}

Tensor Model::operator()(const Tensor& x) const {
  TensorList out = run({x});
  TS_CHECK(out.size() == 1, "Model: the model has ", out.size(), " outputs; use run()");
  return out[0];
}

TensorList Model::example_inputs(int64_t dynamic, bool random) const {
  TS_CHECK(dynamic >= 0, "example_inputs: the dynamic size must be >= 0, got ", dynamic);
  TensorList xs;
  for (const compile::Value* v : graph().inputs()) {
    Shape s;
    for (const compile::SymInt& d : v->shape) s.push_back(d.is_static() ? d.static_value() : dynamic);
    xs.push_back(random && is_floating(v->dtype) ? ops::randn(s).to(v->dtype) : zeros(s, v->dtype));
  }
  return xs;
}

std::vector<Model::Port> Model::inputs() const { return ports(graph().inputs(), graph().symbols()); }
std::vector<Model::Port> Model::outputs() const { return ports(graph().outputs(), graph().symbols()); }

Model load(const std::string& path) {
  namespace fs = std::filesystem;
  TS_CHECK(fs::exists(path), "load: '", path, "' does not exist");
  if (fs::is_directory(path)) return Model(compile::load_graph(path));
  if (fs::path(path).extension() == ".onnx") return Model(compile::import_onnx(path));
  TS_ERROR("load: '", path, "' is neither a saved Tessera graph (a directory with graph.json and weights.safetensors) nor an "
           "ONNX file (*.onnx)");
}

}  // namespace tessera
