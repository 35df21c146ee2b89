// The C++ datasets and DataLoader from Python: batches built by C++ threads
// (no GIL), deterministic whatever the worker count (Note [Deterministic
// loading] in data/dataloader.cpp). Python datasets go through
// python/tessera/utils/data.py, with worker processes.
#include "bindings.h"
#include "tessera/data/dataloader.h"
#include "tessera/data/dataset.h"
#include "tessera/data/datasets.h"
#include "tessera/data/shards.h"

namespace tessera::python {

namespace {
py::tuple example(data::Example&& e) {
  py::tuple t(e.size());
  for (size_t i = 0; i < e.size(); ++i) t[i] = tensor_object(std::move(e[i]));
  return t;
}
data::DataLoaderOptions loader_options(int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last, int num_workers) {
  data::DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.seed = seed;
  o.drop_last = drop_last;
  o.num_workers = num_workers;
  return o;
}
}  // namespace

void bind_data(py::module_& m) {
  py::module_ d = m.def_submodule("_data", "The C++ datasets and DataLoader");
  py::class_<data::Dataset, std::shared_ptr<data::Dataset>>(d, "Dataset")
      .def("__len__", &data::Dataset::size)
      .def("__getitem__", [](const data::Dataset& ds, int64_t i) {
        const int64_t n = ds.size();
        if (i < -n || i >= n) throw py::index_error("index " + std::to_string(i) + " is out of range for a dataset of " + std::to_string(n));
        data::Example e;
        {
          py::gil_scoped_release nogil;
          e = ds.get(i < 0 ? i + n : i);
        }
        return example(std::move(e));
      });
  py::class_<data::IterableDataset, std::shared_ptr<data::IterableDataset>>(d, "IterableDataset");
  d.def("mnist", [](const std::string& root, const std::string& split) {
    py::gil_scoped_release nogil;
    return std::shared_ptr<data::Dataset>(std::make_shared<data::MNIST>(root, split));
  }, py::arg("root"), py::arg("split"));
  d.def("fashion_mnist", [](const std::string& root, const std::string& split) {
    py::gil_scoped_release nogil;
    return std::shared_ptr<data::Dataset>(std::make_shared<data::FashionMNIST>(root, split));
  }, py::arg("root") = data::kFashionMNISTRoot, py::arg("split") = "train");
  d.def("tensor_dataset", [](const TensorList& ts) {
    return std::shared_ptr<data::Dataset>(std::make_shared<data::TensorDataset>(ts));
  });
  d.def("csv", [](const std::string& path, int64_t label_column) {
    return std::shared_ptr<data::Dataset>(data::csv_dataset(path, label_column));
  }, py::arg("path"), py::arg("label_column") = -1);
  d.def("npy", [](const std::vector<std::string>& paths) {
    return std::shared_ptr<data::Dataset>(data::npy_dataset(paths));
  }, py::arg("paths"));
  d.def("shards", [](const std::vector<std::string>& shards, const std::vector<std::string>& fields, int64_t buffer) {
    return std::shared_ptr<data::IterableDataset>(std::make_shared<data::ShardedDataset>(shards, fields, buffer));
  }, py::arg("shards"), py::arg("fields"), py::arg("shuffle_buffer") = 0);

  py::class_<data::DataLoader>(d, "DataLoader")
      .def(py::init([](std::shared_ptr<data::Dataset> ds, int64_t batch_size, bool shuffle, uint64_t seed, bool drop_last,
                       int num_workers) {
             return std::make_unique<data::DataLoader>(std::move(ds), loader_options(batch_size, shuffle, seed, drop_last,
                                                                                     num_workers));
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false, py::arg("seed") = 0,
           py::arg("drop_last") = false, py::arg("num_workers") = 0)
      .def(py::init([](std::shared_ptr<data::IterableDataset> ds, int64_t batch_size, bool shuffle, uint64_t seed,
                       bool drop_last, int num_workers) {
             // A stream is read in its order (a shard dataset shuffles with its own buffer).
             return std::make_unique<data::DataLoader>(std::move(ds), loader_options(batch_size, false, seed, drop_last,
                                                                                     num_workers));
           }),
           py::arg("dataset"), py::arg("batch_size") = 1, py::arg("shuffle") = false, py::arg("seed") = 0,
           py::arg("drop_last") = false, py::arg("num_workers") = 0)
      .def("__len__", &data::DataLoader::batches_per_epoch)
      .def("next", [](data::DataLoader& l) -> py::object {
        std::optional<data::Example> e;
        {
          py::gil_scoped_release nogil;
          e = l.next();
        }
        if (!e) return py::none();
        return example(std::move(*e));
      }, "The next batch, or None at the end of the epoch (the next call starts the next epoch).")
      .def_property_readonly("epoch", &data::DataLoader::epoch)
      .def("state", [](const data::DataLoader& l) { return l.state().dump(); })
      .def("load_state", [](data::DataLoader& l, const std::string& s) { l.load_state(nlohmann::json::parse(s)); });
}

}  // namespace tessera::python
