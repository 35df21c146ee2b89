// Core on its own: this binary links core's objects and nothing above them
// (no ops, no autograd, no backend). Core calling into a higher layer is a
// link error here. The tests use core's own API: tensors made and read
// without ops, sizes checked before allocation, the allocator's limits, the
// generator, threads, and locale-independent numbers.
#include <gtest/gtest.h>

#include <cstring>

#include "tessera/core/allocator.h"
#include "tessera/core/generator.h"
#include "tessera/core/numbers.h"
#include "tessera/core/parallel.h"
#include "tessera/core/tensor.h"

namespace tessera {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CoreAlone, TensorsFromBuffersAndTheirSizes) {
  const float v[] = {1, 2, 3, 4, 5, 6};
  Tensor t = from_buffer(v, {2, 3}, DType::F32);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_EQ(t.nbytes(), 24u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(std::memcmp(t.raw_data(), v, sizeof v), 0);
  Tensor s = from_buffer(v + 4, {}, DType::F32);
  EXPECT_EQ(s.item().to_double(), 5.0);
  EXPECT_TRUE(empty({0, 5}, DType::F64).is_contiguous());
}

TEST(CoreAlone, SizesAreCheckedBeforeAnythingIsAllocated) {
  EXPECT_NE(error_of([] { empty({int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 31}); }).find("64-bit"),
            std::string::npos);
  EXPECT_NE(error_of([] { empty({int64_t{1} << 62}, DType::F32); }).find("64-bit"), std::string::npos);
  EXPECT_NE(error_of([] { empty({3, -2}); }).find("negative"), std::string::npos);
  EXPECT_THROW(checked_mul(int64_t{1} << 40, int64_t{1} << 40, "test"), Error);
  EXPECT_EQ(checked_add(2, 3, "test"), 5);
  const int64_t before = memory_allocated();
  set_max_allocation(int64_t{1} << 20);
  const std::string msg = error_of([] { empty({1024, 1024}, DType::F32); });
  EXPECT_NE(msg.find("a tensor of shape [1024, 1024] f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("largest single allocation allowed, 1.0 MiB"), std::string::npos) << msg;
  set_max_allocation(0);
  EXPECT_EQ(memory_allocated(), before);
  EXPECT_EQ(empty({1024, 1024}, DType::F32).numel(), 1 << 20);
}

TEST(CoreAlone, GeneratorThreadsAndNumbers) {
  Generator a(42), b(42);
  EXPECT_EQ(a.seed(), b.seed());
  std::vector<int> hit(1000, 0);
  parallel_for(0, 1000, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) hit[static_cast<size_t>(i)]++;
  });
  for (int h : hit) EXPECT_EQ(h, 1);
  EXPECT_EQ(format_double(0.1), "0.10000000000000001");
  EXPECT_EQ(parse_double("2.5e-3").value(), 2.5e-3);
  EXPECT_FALSE(parse_double("1,5").has_value());
  EXPECT_EQ(parse_int64("-42").value(), -42);
}

}  // namespace
}  // namespace tessera
