// The Trainer from Python: tessera.train.fit(config) builds the recipe a YAML
// config describes and trains it as `tessera train` does (checkpoints,
// resume, metrics, mixed precision, data, tensor or pipeline parallelism
// under `tessera launch`).
#include <nlohmann/json.hpp>

#include "bindings.h"
#include "tessera/distributed/process_group.h"
#include "tessera/io/config.h"
#include "tessera/distributed/trainer_parallel.h"
#include "tessera/train/recipe.h"
#include "tessera/train/trainer.h"

namespace tessera::python {

void bind_train(py::module_& m) {
  py::module_ t = m.def_submodule("_train", "The Trainer and recipes");
  // fit(config JSON, resume, progress, profile_steps) -> (summary JSON, stopped early)
  t.def("fit", [](const std::string& config_text, const std::string& resume, int progress, int64_t profile) {
    nlohmann::json config = nlohmann::json::parse(config_text);
    train::TrainerOptions o;
    o.resume = resume;
    o.progress = progress;
    o.profile_steps = profile;
    // Ctrl-C while fit() runs: the Trainer checkpoints and stops; Python then raises KeyboardInterrupt.
    o.handle_signals = true;
    nlohmann::json summary;
    bool stopped = false;
    {
      py::gil_scoped_release nogil;
      if (distributed::is_distributed()) distributed::check_same_config(*distributed::world(), config);
      train::Recipe recipe = train::build_recipe(config, "config", false, true);
      if (distributed::is_distributed() || recipe.parallel.data > 1 || recipe.parallel.splits_model())
        o.parallel = distributed::trainer_parallel(recipe.parallel, distributed::world());
      train::Trainer trainer(std::move(recipe), o);
      summary = trainer.fit();
      stopped = trainer.stopped_early();
    }
    return py::make_tuple(summary.dump(), stopped);
  }, py::arg("config"), py::arg("resume") = "", py::arg("progress") = 0, py::arg("profile_steps") = -1);
  t.def("load_yaml", [](const std::string& path) { return io::load_yaml(path).dump(); }, py::arg("path"));
  t.def("apply_override", [](const std::string& config_text, const std::string& assignment) {
    nlohmann::json config = nlohmann::json::parse(config_text);
    train::apply_override(config, assignment);
    return config.dump();
  });
}

}  // namespace tessera::python
