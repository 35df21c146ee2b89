// Dynamic batching: many concurrent distinct requests each get their own
// answer (the one the model gives them alone), merged into fewer runs; a full
// queue is a 503, a request past its timeout a 504, and draining finishes
// everything queued.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tessera/compile/compile.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/serve/batcher.h"
#include "serve_test_util.h"
#include "test_util.h"

using namespace tessera;
using namespace tessera::serve;

namespace {

std::shared_ptr<const Model> mlp() {
  auto net = tessera::testing::serve_mlp(6, 16, 4, 2);
  return std::make_shared<const Model>(tessera::testing::serve_graph(*net, 6));
}

}  // namespace

TEST(ServeBatcher, ConcurrentRequestsGetTheirOwnAnswers) {
  auto model = mlp();
  ModelConfig c;
  c.max_batch_size = 16;
  c.max_queue_delay_us = 2000;
  c.instances = 2;
  std::atomic<int> runs{0}, requests_run{0};
  Batcher b(model, c, [&](const BatchStats& s) {
    runs += 1;
    requests_run += s.requests;
    EXPECT_LE(s.rows, 16);
  });
  EXPECT_TRUE(b.batching());
  constexpr int kThreads = 8, kEach = 25;
  std::atomic<int> wrong{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t)
    clients.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int64_t rows = 1 + (t + i) % 3;
        Tensor x = tessera::testing::rand_f64({rows, 6}, -1, 1, 1000 * t + i).to(DType::F32);
        Tensor got = b.submit({x}).get().at(0);
        Tensor alone = model->run({x}).at(0);
        if (got.shape() != alone.shape() || ops::abs(ops::sub(got, alone)).max().item<float>() > 1e-5f) ++wrong;
      }
    });
  for (auto& c2 : clients) c2.join();
  // A worker reports a run (on_batch) after answering its requests: drain so the last report is in.
  b.drain();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(requests_run.load(), kThreads * kEach);
  EXPECT_LT(runs.load(), kThreads * kEach) << "no request was merged with another";
}

TEST(ServeBatcher, FullQueueTimeoutAndDrain) {
  auto model = mlp();
  ModelConfig c;
  c.max_queue = 3;
  c.instances = 1;
  c.max_batch_size = 1;  // one at a time
  c.timeout_ms = 200;  // the first request starts at once; the others wait out the blocked worker
  std::mutex gate;
  gate.lock();  // holds the worker inside its first run
  std::atomic<bool> first{true};
  Batcher b(model, c, [&](const BatchStats&) {
    if (first.exchange(false)) std::lock_guard<std::mutex> wait(gate);
  });
  Tensor x = ops::randn({1, 6});
  auto f0 = b.submit({x});  // runs, then its stats callback blocks the worker
  while (b.in_flight() == 0) std::this_thread::yield();
  std::vector<std::future<TensorList>> waiting;
  for (int i = 0; i < 3; ++i) waiting.push_back(b.submit({x}));
  try {
    b.submit({x});
    ADD_FAILURE() << "a full queue took a request";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_NE(std::string(e.what()).find("queue is full (3 requests)"), std::string::npos);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // past the timeout
  gate.unlock();
  EXPECT_EQ(f0.get().at(0).shape(), (Shape{1, 4}));
  for (auto& f : waiting) {
    try {
      f.get();
      ADD_FAILURE() << "a request past its timeout ran";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.status(), 504);
    }
  }
  b.drain();
  EXPECT_EQ(b.queued(), 0);
  try {
    b.submit({x});
    ADD_FAILURE() << "a drained batcher took a request";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.status(), 503);
  }
}
