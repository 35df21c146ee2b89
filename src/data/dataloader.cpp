#include "tessera/data/dataloader.h"

#include <chrono>

#include "tessera/autograd/grad_mode.h"

namespace tessera::data {

namespace {
uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

DataLoader::DataLoader(DatasetPtr dataset, DataLoaderOptions options) : dataset_(std::move(dataset)), opt_(options) {
  TS_CHECK(dataset_, "DataLoader: the dataset is null");
  TS_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opt_.batch_size);
  TS_CHECK(opt_.num_workers >= 0 && opt_.num_workers <= 256, "DataLoader: num_workers must be in [0, 256], got ",
           opt_.num_workers);
  TS_CHECK(opt_.prefetch_factor >= 1, "DataLoader: prefetch_factor must be at least 1");
  TS_CHECK(dataset_->size() > 0, "DataLoader: the dataset is empty");
  TS_CHECK(opt_.shard_count >= 1 && opt_.shard_rank >= 0 && opt_.shard_rank < opt_.shard_count,
           "DataLoader: shard_rank ", opt_.shard_rank, " is not in [0, shard_count ", opt_.shard_count, ")");
  TS_CHECK(!opt_.pad_last_batch || opt_.batch_size % opt_.shard_count == 0, "DataLoader: the batch of ",
           opt_.batch_size, " does not divide among ", opt_.shard_count, " ranks; make it a multiple of ",
           opt_.shard_count);
}

DataLoader::DataLoader(IterableDatasetPtr dataset, DataLoaderOptions options)
    : iterable_(std::move(dataset)), opt_(options) {
  TS_CHECK(iterable_, "DataLoader: the dataset is null");
  TS_CHECK(opt_.batch_size > 0, "DataLoader: batch_size must be positive, got ", opt_.batch_size);
  TS_CHECK(opt_.shard_count >= 1 && opt_.shard_rank >= 0 && opt_.shard_rank < opt_.shard_count,
           "DataLoader: shard_rank ", opt_.shard_rank, " is not in [0, shard_count ", opt_.shard_count, ")");
  TS_CHECK(opt_.batch_size % opt_.shard_count == 0, "DataLoader: the batch of ", opt_.batch_size,
           " does not divide among ", opt_.shard_count, " ranks; make it a multiple of ", opt_.shard_count);
  opt_.batch_size /= opt_.shard_count;  // a stream has no global batches: each rank collates its own
  TS_CHECK(!opt_.shuffle, "DataLoader: shuffle applies to map-style datasets; an IterableDataset shuffles itself "
           "(e.g. a shard shuffle buffer)");
  TS_CHECK(opt_.num_workers >= 0 && opt_.num_workers <= 256, "DataLoader: num_workers must be in [0, 256]");
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::batches_per_epoch() const {
  if (!dataset_) return -1;
  int64_t n = dataset_->size();
  return opt_.drop_last ? n / opt_.batch_size : (n + opt_.batch_size - 1) / opt_.batch_size;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t b) const {
  int64_t begin = b * opt_.batch_size, end = std::min<int64_t>(begin + opt_.batch_size, order_.size());
  std::vector<int64_t> global(order_.begin() + begin, order_.begin() + end);
  if (opt_.shard_count == 1) return global;
  const int64_t n = opt_.shard_count, r = opt_.shard_rank;
  if (opt_.pad_last_batch) {  // as PyTorch's DistributedSampler: repeat rows from the start
    for (size_t i = 0; static_cast<int64_t>(global.size()) < opt_.batch_size; ++i)
      global.push_back(order_[i % order_.size()]);
    const int64_t per = opt_.batch_size / n;
    return std::vector<int64_t>(global.begin() + r * per, global.begin() + (r + 1) * per);
  }
  const int64_t m = static_cast<int64_t>(global.size());
  return std::vector<int64_t>(global.begin() + r * m / n, global.begin() + (r + 1) * m / n);
}

Example DataLoader::build_batch(int64_t b) {
  NoGradGuard no_grad;
  std::vector<int64_t> idx = batch_indices(b);
  if (idx.empty()) return Example{};  // this rank's share of a short, unpadded last batch
  std::vector<Example> samples;
  if (!opt_.collate) {
    // Seed per sample even on the fast path: get_batch may call get().
    seed_sample_generator(opt_.seed, epoch_, idx.front());
    return dataset_->get_batch(idx);
  }
  for (int64_t i : idx) {
    seed_sample_generator(opt_.seed, epoch_, i);
    samples.push_back(dataset_->get(i));
  }
  return opt_.collate(samples);
}

void DataLoader::start_epoch() {
  stop_workers();
  epoch_started_ = true;
  stop_ = false;
  ready_.clear();
  failed_.clear();
  if (dataset_) {
    const int64_t n = dataset_->size();
    order_.resize(n);
    for (int64_t i = 0; i < n; ++i) order_[i] = i;
    if (opt_.shuffle) {  // Fisher-Yates from (seed, epoch): the same for any worker count
      uint64_t state = opt_.seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(epoch_) + 1;
      for (int64_t i = n - 1; i > 0; --i) std::swap(order_[i], order_[splitmix(state) % static_cast<uint64_t>(i + 1)]);
    }
    claimed_ = next_batch_;
  } else {
    const int w = std::max(1, opt_.num_workers);
    streams_.clear();
    // With ranks, each rank's workers read their own part of the stream (its shards).
    const int r = opt_.shard_rank, n = opt_.shard_count;
    for (int i = 0; i < w; ++i) streams_.push_back(iterable_->open(r * w + i, n * w, epoch_, opt_.seed));
    queues_.assign(w, {});
    done_.assign(w, false);
    errors_.assign(w, nullptr);
    rr_ = 0;
  }
  for (int w = 0; w < opt_.num_workers; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

std::optional<Example> DataLoader::collate_from(IterableDataset::Stream& s) {
  std::vector<Example> samples;
  while (static_cast<int64_t>(samples.size()) < opt_.batch_size) {
    auto e = s.next();
    if (!e) break;
    samples.push_back(std::move(*e));
  }
  if (samples.empty() || (opt_.drop_last && static_cast<int64_t>(samples.size()) < opt_.batch_size))
    return std::nullopt;
  return opt_.collate ? opt_.collate(samples) : default_collate(samples);
}

void DataLoader::worker_loop(int w) {
  NoGradGuard no_grad;
  const int64_t limit = static_cast<int64_t>(opt_.num_workers) * opt_.prefetch_factor;
  for (;;) {
    if (dataset_) {
      int64_t b;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || claimed_ - next_batch_ < limit; });
        if (stop_ || claimed_ >= batches_per_epoch()) return;
        b = claimed_++;
      }
      Example batch;
      std::exception_ptr err;
      try {
        batch = build_batch(b);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err)
        failed_[b] = err;
      else
        ready_[b] = std::move(batch);
      cv_.notify_all();
    } else {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int>(queues_[w].size()) < opt_.prefetch_factor; });
        if (stop_) return;
      }
      std::optional<Example> batch;
      std::exception_ptr err;
      try {
        batch = collate_from(*streams_[w]);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (err || !batch) {
        errors_[w] = err;
        done_[w] = true;
        cv_.notify_all();
        return;
      }
      queues_[w].push_back(std::move(*batch));
      cv_.notify_all();
    }
  }
}

std::optional<Example> DataLoader::next_iterable() {
  const size_t w = queues_.size();
  if (opt_.num_workers == 0) {
    for (size_t tried = 0; tried < w; ++tried, ++rr_) {
      size_t q = rr_ % w;
      if (done_[q]) continue;
      if (auto b = collate_from(*streams_[q])) {
        ++rr_;
        return b;
      }
      done_[q] = true;
    }
    return std::nullopt;
  }
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    bool all_done = true;
    for (size_t i = 0; i < w; ++i) all_done = all_done && done_[i] && queues_[i].empty();
    if (all_done) return std::nullopt;
    size_t q = rr_ % w;
    cv_.wait(lock, [&] { return !queues_[q].empty() || done_[q]; });
    if (!queues_[q].empty()) {
      Example b = std::move(queues_[q].front());
      queues_[q].pop_front();
      ++rr_;
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      lock.unlock();
      cv_.notify_all();
      return b;
    }
    if (errors_[q]) std::rethrow_exception(errors_[q]);
    ++rr_;  // this worker's stream has ended: skip it
  }
}

std::optional<Example> DataLoader::next() {
  if (!epoch_started_) start_epoch();
  std::optional<Example> out;
  if (dataset_) {
    if (next_batch_ < batches_per_epoch()) {
      const int64_t b = next_batch_;
      if (opt_.num_workers == 0) {
        out = build_batch(b);
        ++next_batch_;
        return out;
      }
      auto t0 = std::chrono::steady_clock::now();
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return ready_.count(b) || failed_.count(b); });
      wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (failed_.count(b)) {
        auto err = failed_[b];
        lock.unlock();
        stop_workers();
        epoch_started_ = false;  // the epoch restarts at this batch on the next call
        std::rethrow_exception(err);
      }
      out = std::move(ready_[b]);
      ready_.erase(b);
      ++next_batch_;
      lock.unlock();
      cv_.notify_all();
      return out;
    }
  } else {
    out = next_iterable();
    if (out) {
      ++next_batch_;
      return out;
    }
  }
  // end of the epoch
  stop_workers();
  ++epoch_;
  next_batch_ = 0;
  epoch_started_ = false;
  return std::nullopt;
}

nlohmann::json DataLoader::state() const {
  return {{"epoch", epoch_}, {"batch", next_batch_}, {"seed", opt_.seed}};
}

void DataLoader::load_state(const nlohmann::json& s) {
  TS_CHECK(s.is_object() && s.contains("epoch") && s["epoch"].is_number_integer() && s.contains("batch") &&
               s["batch"].is_number_integer(),
           "DataLoader: state must have integer 'epoch' and 'batch', got ", s.dump());
  int64_t epoch = s["epoch"].get<int64_t>(), batch = s["batch"].get<int64_t>();
  TS_CHECK(epoch >= 0 && batch >= 0, "DataLoader: negative epoch or batch in state ", s.dump());
  if (s.contains("seed")) {
    TS_CHECK(s["seed"].is_number_unsigned(), "DataLoader: state 'seed' must be a non-negative integer");
    opt_.seed = s["seed"].get<uint64_t>();
  }
  stop_workers();
  epoch_ = epoch;
  epoch_started_ = false;
  if (dataset_) {
    TS_CHECK(batch <= batches_per_epoch(), "DataLoader: state batch ", batch, " is past the ", batches_per_epoch(),
             " batches of an epoch (a different dataset or batch size?)");
    next_batch_ = batch;
  } else {  // a stream cannot seek: replay and drop the batches already seen
    next_batch_ = 0;
    for (int64_t i = 0; i < batch; ++i) {
      auto b = next();
      TS_CHECK(b.has_value(), "DataLoader: state batch ", batch, " is past the end of the stream");
    }
  }
}

}  // namespace tessera::data
