#pragma once
// DataLoader: batches from a Dataset (shuffled with a seed) or an IterableDataset,
// built by N worker threads ahead of the consumer through a bounded queue.
//
// Determinism: for a Dataset, batch b of epoch e holds the same samples, built
// with the same randomness, for any number of workers (the permutation and each
// sample's generator depend only on seed, epoch and index). The position
// (epoch, next batch) can be saved mid-epoch and restored.
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "tessera/data/dataset.h"

namespace tessera::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;
  bool drop_last = false;
  int num_workers = 0;     // 0: batches are built on the calling thread
  int prefetch_factor = 2; // batches each worker may build ahead
  // Data parallelism: the loader yields rank shard_rank's rows of each global
  // batch of batch_size (batch_size / shard_count rows each, a contiguous run
  // of the epoch's permutation), so the position and the samples do not depend
  // on the number of ranks. A short last batch is filled up by repeating rows
  // from the epoch's start (pad_last_batch: training, where every rank must
  // step together) or split as it is (evaluation, whose counts stay true; a
  // rank may then get an empty Example).
  int shard_rank = 0;
  int shard_count = 1;
  bool pad_last_batch = true;
  // Custom collate; when set, samples are fetched one by one with get().
  std::function<Example(const std::vector<Example>&)> collate;
};

class DataLoader {
 public:
  DataLoader(DatasetPtr dataset, DataLoaderOptions options);
  DataLoader(IterableDatasetPtr dataset, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches in one epoch (-1 for an IterableDataset).
  int64_t batches_per_epoch() const;
  // The next batch of the current epoch, or nullopt at its end (then the next
  // call starts the following epoch).
  std::optional<Example> next();
  int64_t epoch() const { return epoch_; }
  int64_t batch_index() const { return next_batch_; }  // batches already returned this epoch
  // Seconds the consumer spent waiting for batches since the last reset.
  double wait_seconds() const { return wait_seconds_; }
  void reset_wait_seconds() { wait_seconds_ = 0; }

  nlohmann::json state() const;               // {epoch, batch, seed}
  void load_state(const nlohmann::json& s);   // continues at that batch

 private:
  void start_epoch();
  void stop_workers();
  void worker_loop(int w);
  Example build_batch(int64_t b);
  std::vector<int64_t> batch_indices(int64_t b) const;

  DatasetPtr dataset_;
  IterableDatasetPtr iterable_;
  DataLoaderOptions opt_;
  int64_t epoch_ = 0, next_batch_ = 0;
  bool epoch_started_ = false;
  std::vector<int64_t> order_;
  double wait_seconds_ = 0;

  // worker state (for the current epoch)
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Example> ready_;
  std::map<int64_t, std::exception_ptr> failed_;
  int64_t claimed_ = 0;  // next batch a worker may claim (map-style)
  bool stop_ = false;
  // iterable: one stream and one queue per worker, read round-robin
  std::optional<Example> next_iterable();
  std::optional<Example> collate_from(IterableDataset::Stream& s);
  std::vector<std::unique_ptr<IterableDataset::Stream>> streams_;
  std::vector<std::deque<Example>> queues_;
  std::vector<bool> done_;
  std::vector<std::exception_ptr> errors_;
  size_t rr_ = 0;
};

}  // namespace tessera::data
