#pragma once
// Datasets. A sample (an Example) is a list of tensors, e.g. {image, label}.
// Dataset is random access and must allow get() from several threads at once;
// IterableDataset is a stream, split across loader workers.
//
// Randomness inside a sample (augmentation) comes from sample_generator(): the
// DataLoader seeds it from (seed, epoch, sample index) before each get(), so a
// sample is the same whichever worker thread builds it.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"

namespace tessera::data {

using Example = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  // A whole batch at once; the default stacks get() of each index.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};
using DatasetPtr = std::shared_ptr<const Dataset>;

class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  // A stream of samples for one worker of `num_workers` in `epoch`.
  class Stream {
   public:
    virtual ~Stream() = default;
    virtual std::optional<Example> next() = 0;
  };
  virtual std::unique_ptr<Stream> open(int worker, int num_workers, int64_t epoch, uint64_t seed) const = 0;
};
using IterableDatasetPtr = std::shared_ptr<const IterableDataset>;

// Stacks each field of the samples along a new dim 0.
Example default_collate(const std::vector<Example>& samples);

// The generator for the sample being built on this thread (see above).
Generator& sample_generator();
// Seeds this thread's sample generator; the DataLoader calls it.
void seed_sample_generator(uint64_t seed, int64_t epoch, int64_t index);

// Samples are rows of the given tensors (all of the same length).
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(TensorList tensors);
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const TensorList& tensors() const { return tensors_; }

 private:
  TensorList tensors_;
  int64_t n_;
};

// A dataset's samples [begin, end) (e.g. a train/validation split).
class Subset : public Dataset {
 public:
  Subset(DatasetPtr base, int64_t begin, int64_t end);
  int64_t size() const override { return end_ - begin_; }
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

 private:
  DatasetPtr base_;
  int64_t begin_, end_;
};

// Applies a per-sample function (e.g. a transform of field 0) on top of a dataset.
class MapDataset : public Dataset {
 public:
  using Fn = std::function<Example(Example)>;
  MapDataset(DatasetPtr base, Fn fn) : base_(std::move(base)), fn_(std::move(fn)) {}
  int64_t size() const override { return base_->size(); }
  Example get(int64_t i) const override { return fn_(base_->get(i)); }

 private:
  DatasetPtr base_;
  Fn fn_;
};

}  // namespace tessera::data
