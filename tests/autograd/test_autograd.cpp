// The autograd engine: accumulation, retain_graph, hooks, retain_grad, the
// functional grad(), double backward, in-place version checks, deep graphs.
#include <thread>

#include "tessera/autograd/checkpoint.h"
#include "tessera/core/allocator.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace ops;

TEST(Autograd, AccumulatesIntoLeaves) {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  sum(x).backward();  // a second graph adds to .grad
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
}

TEST(Autograd, SharedInputsSumTheirGradients) {
  Tensor x = tensor({2.0}).requires_grad_();
  Tensor y = add(mul(x, x), mul(x, 3.0));  // y = x^2 + 3x
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 7.0f);
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor y = sum(exp(x));
  y.backward(Tensor(), true);
  y.backward();
  EXPECT_CLOSE(x.grad(), mul(exp(x.detach()), 2.0));
  Tensor z = sum(exp(x));
  z.backward();
  try {
    z.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Autograd, NonScalarNeedsGradient) {
  Tensor x = ones({3}).requires_grad_();
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.backward(), Error);
  y.backward(tensor({1.0, 0.0, -1.0}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 0, -2}));
}

TEST(Autograd, GradFunctionalFormLeavesGradUntouched) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor w = tensor({3.0, 4.0}).requires_grad_();
  Tensor y = sum(mul(x, w));
  auto g = autograd::grad({y}, {x});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  Tensor unused = ones({1}).requires_grad_();
  Tensor y2 = sum(mul(x, w));
  EXPECT_THROW(autograd::grad({y2}, {unused}), Error);
  Tensor y3 = sum(mul(x, w));
  auto g3 = autograd::grad({y3}, {unused, w}, {}, {}, false, true);
  EXPECT_FALSE(g3[0].defined());
  EXPECT_EQ(g3[1].to_vector<float>(), (std::vector<float>{1, 2}));
}

TEST(Autograd, GradOfNonLeafInput) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = mul(x, 3.0);
  Tensor y = sum(square(h));
  auto g = autograd::grad({y}, {h});
  EXPECT_EQ(g[0].to_vector<float>(), (std::vector<float>{6, 12}));
}

TEST(Autograd, DoubleBackward) {
  Tensor x = tensor({0.5, -1.0}, {}, kF64).requires_grad_();
  Tensor y = sum(pow(x, 3));
  auto g = autograd::grad({y}, {x}, {}, {}, true);  // 3x^2
  EXPECT_TRUE(g[0].requires_grad());
  auto gg = autograd::grad({sum(g[0])}, {x});  // 6x
  EXPECT_CLOSE(gg[0], tensor({3.0, -6.0}, {}, kF64));
  // And through a fused op (softmax) the second derivative matches finite differences.
  Tensor z = testing::rand_f64({2, 3}).requires_grad_();
  EXPECT_TRUE(testing::gradgradcheck([](const TensorList& t) { return softmax(t[0], 1); }, {z}));
}

TEST(Autograd, HooksAndRetainGrad) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = mul(x, 2.0);
  h.retain_grad();
  int calls = 0;
  h.register_hook([&](const Tensor& g) {
    ++calls;
    return mul(g, 10.0);  // replaces the gradient flowing on
  });
  x.register_hook([&](const Tensor& g) {
    ++calls;
    return Tensor();  // observes only
  });
  sum(h).backward();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{20, 20}));
  EXPECT_EQ(h.grad().to_vector<float>(), (std::vector<float>{10, 10}));
  EXPECT_THROW(ones({1}).register_hook([](const Tensor& g) { return g; }), Error);
}

TEST(Autograd, GradModeGuards) {
  Tensor x = ones({2}).requires_grad_();
  {
    NoGradGuard ng;
    EXPECT_FALSE(mul(x, 2.0).requires_grad());
    {
      EnableGradGuard eg;
      EXPECT_TRUE(mul(x, 2.0).requires_grad());
    }
  }
  EXPECT_TRUE(mul(x, 2.0).requires_grad());
  EXPECT_FALSE(mul(x, 2.0).detach().requires_grad());
  // Grad mode is per thread.
  bool other = true;
  std::thread t([&] {
    NoGradGuard ng;
    other = GradMode::is_enabled();
  });
  t.join();
  EXPECT_FALSE(other);
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(Autograd, InPlaceOnSavedTensorIsAnError) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor h = mul(x, 1.0);
  Tensor y = exp(h);  // exp saves its output
  y.mul_(2.0);
  try {
    sum(y).backward();
    FAIL() << "expected a version error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("in-place"), std::string::npos) << e.what();
  }
}

TEST(Autograd, InPlaceOpsRecordGradients) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor w = tensor({3.0, 5.0}).requires_grad_();
  Tensor h = mul(x, 2.0);
  h.mul_(w);          // h = 2 x w
  h.add_(x, 3.0);     // h = 2 x w + 3 x
  sum(h).backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{9, 13}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_THROW(x.add_(1.0), Error);  // a leaf that requires grad
  {
    NoGradGuard ng;
    x.sub_(x.grad(), 0.5);  // an optimizer step is fine
  }
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{-3.5, -4.5}));
  Tensor i = ones({2}, kI32);
  EXPECT_THROW(i.add_(0.5), Error);  // f32 result cannot be stored in i32
}

TEST(Autograd, DeepChainDoesNotOverflowTheStack) {
  Tensor x = tensor({1.0}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = add(y, 0.0);
  sum(y).backward();
  EXPECT_EQ(x.grad().item<float>(), 1.0f);
  // Freeing a deep graph that never ran backward (nodes still hold saved
  // tensors) must not recurse either.
  Tensor z = x;
  for (int i = 0; i < 100000; ++i) z = mul(z, 1.0);
  z = Tensor();
  SUCCEED();
}

TEST(Autograd, SavedTensorsAreReleasedAfterBackward) {
  Tensor x = ones({1024, 256}).requires_grad_();
  int64_t before = memory_stats().current_bytes;
  {
    Tensor y = sum(exp(mul(x, 2.0)));
    y.backward();
    // Only the gradient survives backward; intermediates and saved tensors are gone.
  }
  int64_t after = memory_stats().current_bytes;
  EXPECT_LE(after - before, 1024 * 256 * 4 + 4096);
}

TEST(Autograd, IntegerOutputsDoNotRequireGrad) {
  Tensor x = tensor({1.0, 3.0, 2.0}).requires_grad_();
  EXPECT_FALSE(argmax(x).requires_grad());
  EXPECT_FALSE(gt(x, 1.0).requires_grad());
  auto [v, i] = max(x, 0);
  EXPECT_TRUE(v.requires_grad());
  EXPECT_FALSE(i.requires_grad());
}

// ---- post-accumulate hooks and end-of-backward callbacks (what data parallelism builds on)

TEST(Autograd, PostAccumulateHookSeesTheSummedGrad) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  std::vector<std::vector<float>> seen;
  size_t h = x.register_post_accumulate_grad_hook([&](const Tensor& p) { seen.push_back(p.grad().to_vector<float>()); });
  // x is used twice: the engine sums both paths before the leaf's node runs, so the hook fires once.
  sum(add(mul(x, 3.0), mul(x, x))).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{5, 7}));
  sum(x).backward();  // a second backward accumulates first, then calls the hook
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{6, 8}));
  x.remove_post_accumulate_grad_hook(h);
  sum(x).backward();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_THROW(x.remove_post_accumulate_grad_hook(7), Error);
  Tensor y = mul(x, 2.0);
  EXPECT_THROW(y.register_post_accumulate_grad_hook([](const Tensor&) {}), Error);  // not a leaf
}

TEST(Autograd, PostAccumulateHookRunsAfterPreHooks) {
  Tensor x = tensor({1.0}).requires_grad_();
  x.register_hook([](const Tensor& g) { return mul(g, 10.0); });
  float at_hook = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor& p) { at_hook = p.grad().item<float>(); });
  sum(x).backward();
  EXPECT_FLOAT_EQ(at_hook, 10.0f);
}

TEST(Autograd, CallbacksRunAfterTheWholeBackwardInOrder) {
  Tensor a = tensor({1.0}).requires_grad_(), b = tensor({2.0}).requires_grad_();
  std::vector<std::string> log;
  auto hook = [&](const char* name) {
    return [&log, name](const Tensor&) {
      log.push_back(std::string("hook ") + name);
      autograd::queue_callback([&log, name] {
        log.push_back(std::string("callback ") + name);
        if (std::string(name) == "a") autograd::queue_callback([&log] { log.push_back("queued by a callback"); });
      });
    };
  };
  a.register_post_accumulate_grad_hook(hook("a"));
  b.register_post_accumulate_grad_hook(hook("b"));
  sum(add(mul(a, b), a)).backward();
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0].rfind("hook", 0), 0u);
  EXPECT_EQ(log[1].rfind("hook", 0), 0u);
  EXPECT_EQ(log[2].rfind("callback", 0), 0u);
  EXPECT_EQ(log[3].rfind("callback", 0), 0u);
  EXPECT_EQ(log[4], "queued by a callback");
  EXPECT_THROW(autograd::queue_callback([] {}), Error);  // outside backward
}

TEST(Autograd, CallbacksWaitForTheOutermostBackwardThroughACheckpoint) {
  // The checkpoint recomputes its segment and runs a nested grad() on it; a
  // hook that fires inside that nested pass queues a callback, which must run
  // only after the outer backward has also reached w and v.
  Tensor w = tensor({3.0}).requires_grad_(), v = tensor({0.5}).requires_grad_();
  Tensor x = tensor({2.0});
  std::vector<std::string> log;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("w"); });
  v.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("v"); });
  Tensor h = autograd::checkpoint(
      [&](const Tensor& a) {
        Tensor t = mul(a, w);
        t.register_hook([&](const Tensor&) {
          log.push_back("inner");
          autograd::queue_callback([&] { log.push_back("done"); });
          return Tensor();
        });
        return mul(t, 1.0);
      },
      x);
  log.clear();  // the first run's hook never fires; only the recompute's does
  sum(mul(h, v)).backward();
  EXPECT_EQ(log, (std::vector<std::string>{"v", "inner", "w", "done"}));
  EXPECT_FLOAT_EQ(w.grad().item<float>(), 1.0f);
}

TEST(Autograd, AFailedBackwardDropsItsCallbacks) {
  Tensor x = tensor({1.0}).requires_grad_();
  int ran = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&] { ++ran; });
    TS_ERROR("hook failed");
  });
  EXPECT_THROW(sum(x).backward(), Error);
  Tensor y = tensor({1.0}).requires_grad_();
  sum(y).backward();  // a later backward does not run the stale callback
  EXPECT_EQ(ran, 0);
}

}  // namespace
}  // namespace tessera
