// Dynamic batching (serve/batcher.h).
#include "tessera/serve/batcher.h"

#include <algorithm>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/ops/ops.h"

namespace tessera::serve {

namespace {
double us_between(Batcher::Clock::time_point a, Batcher::Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}
}  // namespace

Batcher::Batcher(std::shared_ptr<const Model> model, const ModelConfig& config,
                 std::function<void(const BatchStats&)> on_batch)
    : model_(std::move(model)), config_(config), on_batch_(std::move(on_batch)) {
  TS_CHECK(model_, "Batcher: no model");
  // Merging concatenates along dimension 0: only when the model leaves it dynamic in every input.
  const auto ins = model_->inputs();
  batching_ = config_.max_batch_size > 1 && !ins.empty();
  for (const auto& p : ins)
    batching_ = batching_ && !p.shape.empty() && static_size(p.shape[0]) < 0;
  for (int i = 0; i < config_.instances; ++i) workers_.emplace_back([this] { work(); });
}

Batcher::~Batcher() {
  drain();
  for (auto& t : workers_) t.join();
}

std::future<TensorList> Batcher::submit(TensorList inputs) {
  auto promise = std::make_shared<std::promise<TensorList>>();
  std::future<TensorList> f = promise->get_future();
  submit(std::move(inputs), [promise](std::exception_ptr error, TensorList outputs) {
    if (error) promise->set_exception(error);
    else promise->set_value(std::move(outputs));
  });
  return f;
}

void Batcher::submit(TensorList inputs, Done done) {
  auto r = std::make_unique<Request>();
  r->rows = !inputs.empty() && inputs[0].dim() > 0 ? inputs[0].size(0) : 0;
  r->inputs = std::move(inputs);
  r->arrived = Clock::now();
  r->done = std::move(done);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) throw RequestError(503, "the server is shutting down");
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue)
      throw RequestError(503, "the model's queue is full (" + std::to_string(config_.max_queue) +
                                  " requests); retry later");
    queue_.push_back(std::move(r));
  }
  cv_.notify_one();
}

void Batcher::finish(Request& r, std::exception_ptr error, TensorList outputs) {
  // Exactly once per request; a callback that throws must not take the worker down with it.
  Done done = std::exchange(r.done, nullptr);
  if (!done) return;
  try {
    done(error, std::move(outputs));
  } catch (...) {
  }
}

void Batcher::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && in_flight_ == 0; });
}

int64_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t Batcher::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

bool Batcher::can_merge(const Request& a, const Request& b) const {
  if (!batching_ || a.inputs.size() != b.inputs.size()) return false;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Tensor &x = a.inputs[i], &y = b.inputs[i];
    if (x.dtype() != y.dtype() || x.dim() != y.dim() || x.dim() == 0) return false;
    for (int64_t d = 1; d < x.dim(); ++d)
      if (x.shape()[d] != y.shape()[d]) return false;
  }
  return true;
}

std::vector<std::unique_ptr<Batcher::Request>> Batcher::next_batch(std::unique_lock<std::mutex>& lock) {
  std::vector<std::unique_ptr<Request>> batch;
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  int64_t rows = batch[0]->rows;
  const auto deadline = batch[0]->arrived + std::chrono::microseconds(config_.max_queue_delay_us);
  auto preferred = [&] {
    return std::find(config_.preferred_batch_sizes.begin(), config_.preferred_batch_sizes.end(), rows) !=
           config_.preferred_batch_sizes.end();
  };
  while (batching_ && rows < config_.max_batch_size && !preferred()) {
    // Take every compatible request that fits; then wait for more until the deadline.
    bool took = false;
    for (auto it = queue_.begin(); it != queue_.end() && rows < config_.max_batch_size;) {
      if (rows + (*it)->rows <= config_.max_batch_size && can_merge(*batch[0], **it)) {
        rows += (*it)->rows;
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
        took = true;
        if (preferred()) break;
      } else {
        ++it;
      }
    }
    if (rows >= config_.max_batch_size || preferred() || stopping_) break;
    if (!took && Clock::now() >= deadline) break;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && queue_.empty()) break;
  }
  return batch;
}

void Batcher::work() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) {
      if (stopping_) return;
      continue;
    }
    auto batch = next_batch(lock);
    ++in_flight_;
    lock.unlock();
    run(batch);
    lock.lock();
    --in_flight_;
    cv_.notify_all();  // drain() waits for the queue and the runs to finish
  }
}

void Batcher::run(std::vector<std::unique_ptr<Request>>& batch) {
  const auto start = Clock::now();
  // Requests that waited past their timeout fail without running.
  std::vector<std::unique_ptr<Request>> live;
  for (auto& r : batch) {
    if (us_between(r->arrived, start) > 1000.0 * static_cast<double>(config_.timeout_ms))
      finish(*r, std::make_exception_ptr(
          RequestError(504, "the request waited more than " + std::to_string(config_.timeout_ms) + " ms")), {});
    else
      live.push_back(std::move(r));
  }
  if (live.empty()) return;
  BatchStats s;
  s.requests = static_cast<int>(live.size());
  s.queue_us = us_between(live[0]->arrived, start);
  try {
    TensorList inputs;
    if (live.size() == 1) {
      inputs = live[0]->inputs;
    } else {
      for (size_t i = 0; i < live[0]->inputs.size(); ++i) {
        TensorList parts;
        for (auto& r : live) parts.push_back(r->inputs[i]);
        inputs.push_back(ops::cat(parts, 0));
      }
    }
    for (auto& r : live) s.rows += r->rows;
    const auto t0 = Clock::now();
    TensorList outs = model_->run(inputs);
    s.compute_us = us_between(t0, Clock::now());
    if (live.size() == 1) {
      finish(*live[0], nullptr, std::move(outs));
    } else {
      // Split every output by rows back to its request.
      for (const Tensor& o : outs)
        TS_CHECK(o.dim() > 0 && o.size(0) == s.rows, "a batched output's first dimension (", o.dim() ? o.size(0) : 0,
                 ") is not the batch's ", s.rows, " rows");
      int64_t at = 0;
      for (auto& r : live) {
        TensorList mine;
        for (const Tensor& o : outs) mine.push_back(o.narrow(0, at, r->rows).contiguous());
        at += r->rows;
        finish(*r, nullptr, std::move(mine));
      }
    }
  } catch (const RequestError&) {
    for (auto& r : live) finish(*r, std::current_exception(), {});
  } catch (const std::exception& e) {
    // A model error is the request's fault (a shape the graph cannot take)
    // or the server's: report it as a 400 naming the model's message.
    for (auto& r : live)
      finish(*r, std::make_exception_ptr(RequestError(400, "the model failed: " + client_message(e))), {});
  }
  if (on_batch_) on_batch_(s);
}

}  // namespace tessera::serve
