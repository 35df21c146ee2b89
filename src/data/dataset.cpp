#include "tessera/data/dataset.h"

#include "tessera/ops/ops.h"

namespace tessera::data {

namespace {
thread_local Generator t_sample_gen;
thread_local uint64_t t_seed = 0;  // the (seed, epoch) of the batch being built
thread_local int64_t t_epoch = 0;
}  // namespace

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Example> samples;
  samples.reserve(indices.size());
  const uint64_t seed = t_seed;
  const int64_t epoch = t_epoch;
  for (int64_t i : indices) {
    seed_sample_generator(seed, epoch, i);
    samples.push_back(get(i));
  }
  return default_collate(samples);
}

Example default_collate(const std::vector<Example>& samples) {
  TS_CHECK(!samples.empty(), "collate: no samples");
  const size_t fields = samples[0].size();
  Example out;
  for (size_t f = 0; f < fields; ++f) {
    TensorList col;
    col.reserve(samples.size());
    for (size_t s = 0; s < samples.size(); ++s) {
      TS_CHECK(samples[s].size() == fields, "collate: sample ", s, " has ", samples[s].size(), " fields, sample 0 has ",
               fields);
      TS_CHECK(IntArrayRef(samples[s][f].shape()).equals(samples[0][f].shape()), "collate: field ", f, " of sample ", s,
               " has shape ", shape_str(samples[s][f].shape()), ", sample 0 has ", shape_str(samples[0][f].shape()),
               " (use a custom collate to pad)");
      col.push_back(samples[s][f]);
    }
    out.push_back(ops::stack(col, 0));
  }
  return out;
}

Generator& sample_generator() { return t_sample_gen; }

// Each (seed, epoch, index) gets its own Philox stream: the key is a hash of
// the three, so neighbouring samples do not share random numbers.
void seed_sample_generator(uint64_t seed, int64_t epoch, int64_t index) {
  uint64_t h = seed ^ 0x9e3779b97f4a7c15ull;
  for (uint64_t v : {static_cast<uint64_t>(epoch), static_cast<uint64_t>(index)}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  t_seed = seed;
  t_epoch = epoch;
  t_sample_gen.set_state(h, 0);
}

TensorDataset::TensorDataset(TensorList tensors) : tensors_(std::move(tensors)) {
  TS_CHECK(!tensors_.empty(), "TensorDataset: needs at least one tensor");
  n_ = tensors_[0].dim() > 0 ? tensors_[0].size(0) : 0;
  for (size_t i = 0; i < tensors_.size(); ++i)
    TS_CHECK(tensors_[i].dim() > 0 && tensors_[i].size(0) == n_, "TensorDataset: tensor ", i, " has shape ",
             shape_str(tensors_[i].shape()), "; every tensor needs ", n_, " rows");
}

Example TensorDataset::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < n_, "TensorDataset: index ", i, " is out of range for ", n_, " samples");
  Example e;
  for (auto& t : tensors_) e.push_back(t.select(0, i));
  return e;
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  for (int64_t i : indices) TS_CHECK(i >= 0 && i < n_, "TensorDataset: index ", i, " is out of range for ", n_);
  Tensor idx = tensor(indices);
  Example e;
  for (auto& t : tensors_) e.push_back(ops::index_select(t, 0, idx));
  return e;
}

Subset::Subset(DatasetPtr base, int64_t begin, int64_t end) : base_(std::move(base)), begin_(begin), end_(end) {
  TS_CHECK(base_ && 0 <= begin && begin <= end && end <= base_->size(), "Subset: [", begin, ", ", end,
           ") is not a range of the ", base_ ? base_->size() : 0, " samples");
}

Example Subset::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < size(), "Subset: index ", i, " is out of range for ", size(), " samples");
  return base_->get(begin_ + i);
}

Example Subset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shifted;
  for (int64_t i : indices) {
    TS_CHECK(i >= 0 && i < size(), "Subset: index ", i, " is out of range for ", size(), " samples");
    shifted.push_back(begin_ + i);
  }
  return base_->get_batch(shifted);
}

}  // namespace tessera::data
