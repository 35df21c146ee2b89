// Random numbers, the caching allocator, threads and determinism.
#include <cmath>
#include <thread>
#include <vector>

#include "tessera/core/allocator.h"
#include "tessera/core/parallel.h"
#include "test_util.h"

namespace tessera {
namespace {

using namespace ops;

// Runs f with n threads and restores the previous count.
template <typename F>
auto with_threads(int n, F&& f) {
  int prev = get_num_threads();
  set_num_threads(n);
  auto r = f();
  set_num_threads(prev);
  return r;
}

TEST(Random, SameSeedSameNumbersWhateverTheThreads) {
  auto draw = [] {
    manual_seed(42);
    return TensorList{rand({100003}), randn({7, 9000}, kF64), randint(-5, 5, {5000}), bernoulli({3000}, 0.3)};
  };
  TensorList one = with_threads(1, draw), two = with_threads(2, draw);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(all(eq(one[i], two[i])).item<bool>()) << i;
  manual_seed(43);
  EXPECT_FALSE(all(eq(rand({100}), one[0].slice(0, 0, 100))).item<bool>());
}

TEST(Random, ExplicitGeneratorsAreIndependent) {
  Generator a(7), b(7);
  Tensor x = rand({10}, {}, &a);
  manual_seed(1);
  rand({1000});  // touches only the default generator
  EXPECT_TRUE(all(eq(x, rand({10}, {}, &b))).item<bool>());
  EXPECT_EQ(a.offset(), b.offset());
}

TEST(Random, Distributions) {
  manual_seed(0);
  Tensor u = rand({200000});
  EXPECT_NEAR(mean(u).item<double>(), 0.5, 0.005);
  EXPECT_GE(amin(u).item<float>(), 0.0f);
  EXPECT_LT(amax(u).item<float>(), 1.0f);
  Tensor n = randn({200000}, kF64);
  EXPECT_NEAR(mean(n).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(ops::std(n).item<double>(), 1.0, 0.01);
  Tensor m = normal({100000}, 3.0, 0.5);
  EXPECT_NEAR(mean(m).item<double>(), 3.0, 0.01);
  Tensor r = randint(2, 6, {50000});
  EXPECT_EQ(amin(r).item<int64_t>(), 2);
  EXPECT_EQ(amax(r).item<int64_t>(), 5);
  Tensor b = bernoulli(full({100000}, 0.25));
  EXPECT_NEAR(mean(b).item<double>(), 0.25, 0.01);
  Tensor d = dropout(ones({100000}), 0.2);
  EXPECT_NEAR(mean(d).item<double>(), 1.0, 0.02);  // scaled by 1/(1-p)
  EXPECT_NEAR(mean(eq(d, 0).to(kF32)).item<double>(), 0.2, 0.01);
  EXPECT_THROW(bernoulli(full({2}, 1.5)), Error);
  EXPECT_THROW(randint(3, 3, {2}), Error);
}

TEST(Threads, ReductionsMatchAcrossThreadCounts) {
  manual_seed(3);
  Tensor x = randn({3, 1 << 18});
  Tensor big = randn({1 << 20});
  auto run = [&] {
    return TensorList{sum(x), sum(x, {1}), sum(x, {0}), sum(big), mean(big), amax(big), var(x, {1}),
                      softmax(x, 1), layer_norm(x, {1 << 18}), cumsum(big, 0)};
  };
  TensorList one = with_threads(1, run), two = with_threads(2, run);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(all(eq(one[i], two[i])).item<bool>()) << "result " << i;
}

TEST(Threads, NumThreadsIsSettable) {
  int prev = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(prev);
  EXPECT_THROW(set_num_threads(0), Error);
}

// Note [Thread count for every thread]: a count set on one thread holds for
// threads started after (a server's engine thread), and a ThreadLimit lowers
// it on its own thread only.
TEST(Threads, TheCountHoldsOnEveryThreadAndALimitOnItsOwn) {
  const int prev = get_num_threads();
  set_num_threads(3);
  int seen = 0, limited = 0, after = 0, other = 0;
  std::thread([&] {
    seen = get_num_threads();
    {
      ThreadLimit one(1);
      limited = get_num_threads();
      std::thread([&] { other = get_num_threads(); }).join();
    }
    after = get_num_threads();
  }).join();
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(limited, 1);
  EXPECT_EQ(other, 3);  // a limit is its thread's alone
  EXPECT_EQ(after, 3);
  {
    ThreadLimit more(8);  // a limit never raises the count
    EXPECT_EQ(get_num_threads(), 3);
  }
  set_num_threads(prev);
}

// 96 light items then 24 a hundred times heavier (decode tokens' attention
// beside a long prompt's): each thread gets one contiguous range of about
// half the cost, every item once, whatever the thread count.
TEST(Threads, BalancedRangesSplitByCost) {
  const int prev = get_num_threads();
  auto cost = [](int64_t i) { return i < 96 ? 1.0 : 100.0; };
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    std::vector<int> owner(120, -1);
    std::vector<double> load(static_cast<size_t>(threads), 0);
    parallel_for_balanced(120, 10, cost, [&](int64_t b, int64_t e) {
      const int t = omp_get_thread_num();
      for (int64_t i = b; i < e; ++i) {
        owner[static_cast<size_t>(i)] = t;
        load[static_cast<size_t>(t)] += cost(i);
      }
    });
    for (int64_t i = 0; i < 120; ++i) {
      ASSERT_GE(owner[static_cast<size_t>(i)], 0) << i;
      if (i > 0) EXPECT_GE(owner[static_cast<size_t>(i)], owner[static_cast<size_t>(i - 1)]) << i;  // contiguous, in order
    }
    for (int t = 0; t < threads; ++t)
      EXPECT_NEAR(load[static_cast<size_t>(t)], 2496.0 / threads, 100) << threads << " threads, thread " << t;
  }
  int calls = 0;
  parallel_for_balanced(120, 1e9, cost, [&](int64_t b, int64_t e) {  // under min_cost: one call, serial
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 120);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
  set_num_threads(prev);
}

TEST(Threads, ErrorsInsideParallelRegionsReachTheCaller) {
  EXPECT_THROW(parallel_for(0, 1000000, 10, [](int64_t b, int64_t) {
    if (b > 0) throw Error("boom");
  }), Error);
}

TEST(Memory, CachingAllocatorReusesBlocks) {
  empty_cache();
  int64_t base = memory_stats().current_bytes;
  { Tensor a = empty({1 << 20}); }
  MemoryStats s1 = memory_stats();
  { Tensor b = empty({1 << 20}); }
  MemoryStats s2 = memory_stats();
  EXPECT_EQ(s2.cache_hits, s1.cache_hits + 1);
  EXPECT_EQ(s2.os_allocations, s1.os_allocations);
  EXPECT_EQ(s2.current_bytes, base);
  EXPECT_GE(s2.reserved_bytes, (1 << 20) * 4);
  reset_peak_memory();
  { Tensor c = empty({1 << 18}); }
  EXPECT_GE(memory_stats().peak_bytes, base + (1 << 18) * 4);
  empty_cache();
  EXPECT_EQ(memory_stats().reserved_bytes, memory_stats().current_bytes > 0 ? memory_stats().reserved_bytes : 0);
}

TEST(Memory, BlocksAre64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000, 100000}) {
    Tensor t = empty({n}, kU8);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << n;
  }
}

TEST(Memory, TrainingLoopReturnsToBaseline) {
  manual_seed(0);
  Tensor w1 = mul(randn({32, 16}), 0.1).requires_grad_();
  Tensor w2 = mul(randn({4, 32}), 0.1).requires_grad_();
  Tensor x = randn({8, 16});
  Tensor target = randint(0, 4, {8});
  auto step = [&] {
    Tensor loss = cross_entropy(linear(gelu(linear(x, w1)), w2), target);
    loss.backward();
    NoGradGuard ng;
    w1.sub_(w1.grad(), 0.01);
    w2.sub_(w2.grad(), 0.01);
    w1.grad().zero_();
    w2.grad().zero_();
  };
  step();  // first step creates the .grad buffers
  int64_t baseline = memory_stats().current_bytes;
  for (int i = 0; i < 1000; ++i) step();
  EXPECT_EQ(memory_stats().current_bytes, baseline);
}

}  // namespace
}  // namespace tessera
