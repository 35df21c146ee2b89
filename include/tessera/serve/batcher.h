#pragma once
// Dynamic batching for one model version: requests are queued, merged along
// their first (batch) dimension up to max_batch_size rows or until the oldest
// has waited max_queue_delay_us (whichever comes first; a preferred batch
// size runs as soon as it is reached), run as one call of the model by one of
// `instances` worker threads, and the outputs are split back by rows.
//
// Requests merge only when the model takes a dynamic first dimension in every
// input and the rest of their shapes agree; anything else runs alone. The
// queue is bounded: over max_queue waiting requests, submit() throws
// RequestError(503). A request still queued after timeout_ms fails with 504.
// Memory is bounded by the queue and the batch size whatever the offered load.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tessera/compile/model.h"
#include "tessera/serve/repository.h"

namespace tessera::serve {

// What happened to one run of the model, for metrics.
struct BatchStats {
  int requests = 0;
  int64_t rows = 0;
  double queue_us = 0;    // the oldest request's wait
  double compute_us = 0;  // the model call
};

class Batcher {
 public:
  using Clock = std::chrono::steady_clock;
  // `on_batch` (may be empty) is called from the worker after every run.
  Batcher(std::shared_ptr<const Model> model, const ModelConfig& config,
          std::function<void(const BatchStats&)> on_batch = {});
  ~Batcher();  // drain(), then join the workers
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Called once per request, from a worker thread: its outputs, or the
  // error (a RequestError: 504 timed out in the queue, 400 the model failed).
  using Done = std::function<void(std::exception_ptr error, TensorList outputs)>;
  // Queues a request (inputs in the model's order); `done` is called when it
  // has run. Throws RequestError(503) here when the queue is full or the
  // batcher is draining (and `done` is then never called).
  void submit(TensorList inputs, Done done);
  // The same, its outputs (or error) through a future.
  std::future<TensorList> submit(TensorList inputs);
  // Stops taking requests and finishes every queued one.
  void drain();
  int64_t queued() const;
  int64_t in_flight() const;
  // Whether requests may merge (every input's first dimension is dynamic).
  bool batching() const { return batching_; }

 private:
  struct Request {
    TensorList inputs;
    int64_t rows = 0;
    Clock::time_point arrived;
    Done done;
  };
  static void finish(Request& r, std::exception_ptr error, TensorList outputs);
  void work();
  // Takes the next batch off the queue (lock held), waiting for more
  // requests up to the batching delay.
  std::vector<std::unique_ptr<Request>> next_batch(std::unique_lock<std::mutex>& lock);
  void run(std::vector<std::unique_ptr<Request>>& batch);
  bool can_merge(const Request& a, const Request& b) const;

  std::shared_ptr<const Model> model_;
  ModelConfig config_;
  std::function<void(const BatchStats&)> on_batch_;
  bool batching_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Request>> queue_;
  bool stopping_ = false;
  int64_t in_flight_ = 0;
  std::vector<std::thread> workers_;
};

}  // namespace tessera::serve
