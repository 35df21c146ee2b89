// Quantization and pruning from Python: static int8 of a captured graph (any
// model, Python or C++), weight quantization and pruning of the C++ modules.
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "tessera/compile/model.h"
#include "tessera/quant/prune.h"
#include "tessera/quant/ptq.h"
#include "tessera/quant/qat.h"
#include "tessera/quant/weights.h"

namespace tessera::python {

void bind_quant(py::module_& m) {
  py::module_ q = m.def_submodule("_quant", "Quantization and pruning");
  // quantize_static(graph, calibration batches, config JSON) -> (int8 Model, report text)
  q.def("quantize_static", [](const compile::Graph& g, const std::vector<TensorList>& calibration,
                              const std::string& config) {
    quant::PtqConfig c = quant::ptq_config_from_json(nlohmann::json::parse(config));
    quant::PtqResult r;
    {
      py::gil_scoped_release nogil;
      r = quant::quantize_static(g, calibration, c);
    }
    std::string report = r.report.text();
    return py::make_tuple(std::make_unique<Model>(std::move(r.graph)), report);
  }, py::arg("graph"), py::arg("calibration"), py::arg("config") = "{}");
  q.def("quantize_weights", [](nn::Module& mod, const std::string& config) {
    py::gil_scoped_release nogil;
    return quant::quantize_weights(mod, quant::weight_quant_config_from_json(nlohmann::json::parse(config))).str();
  }, py::arg("module"), py::arg("config") = "{}");
  q.def("prune", [](nn::Module& mod, double sparsity, const std::string& method, bool global,
                    const std::vector<std::string>& skip) {
    py::gil_scoped_release nogil;
    return quant::prune(mod, quant::PruneConfig{sparsity, method, global, skip}).str();
  }, py::arg("module"), py::arg("sparsity") = 0.5, py::arg("method") = "magnitude", py::arg("global_") = false,
     py::arg("skip") = std::vector<std::string>{});
  // Quantization-aware training of a C++ module (Note [QAT layers] in quant/qat.h).
  q.def("prepare_qat", [](nn::Module& mod, const std::string& config) {
    quant::QatConfig c = quant::qat_config_from_json(nlohmann::json::parse(config));
    py::gil_scoped_release nogil;
    return quant::prepare_qat(mod, c).str();
  }, py::arg("module"), py::arg("config") = "{}");
  q.def("is_qat_prepared", [](const nn::Module& mod) { return quant::is_qat_prepared(mod); });
  q.def("convert_qat", [](nn::Module& mod, const Tensor& example, const std::vector<TensorList>& calibration,
                          const std::string& config) {
    quant::PtqConfig c = quant::ptq_config_from_json(nlohmann::json::parse(config));
    quant::PtqResult r;
    {
      py::gil_scoped_release nogil;
      r = quant::convert_qat(mod, example, calibration, c);
    }
    std::string report = r.report.text();
    return py::make_tuple(std::make_unique<Model>(std::move(r.graph)), report);
  }, py::arg("module"), py::arg("example"), py::arg("calibration") = std::vector<TensorList>{}, py::arg("config") = "{}");
  q.def("sparsity_report", [](nn::Module& mod) { return quant::sparsity_report(mod).str(); });
  q.def("make_pruning_permanent", [](nn::Module& mod) { quant::make_pruning_permanent(mod); });
}

}  // namespace tessera::python
