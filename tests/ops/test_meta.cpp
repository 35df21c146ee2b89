// Every op of ops.def on the meta device (Note [The meta device]): its sample
// call with the inputs moved to meta gives outputs with the CPU run's shapes,
// dtypes and strides, on meta, aliasing the same inputs. An op that reads data
// outside the seam fails there with "a meta tensor has no data"; those still
// to be moved behind it are listed below, so that moving one (or breaking
// one) fails this test until the list says so.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "op_samples.h"
#include "ops/op_utils.h"
#include "tessera/core/allocator.h"
#include "tessera/ops/op_table.h"
#include "tessera/ops/ops.h"

namespace tessera {
namespace {

// Ops whose outputs depend on their inputs' values (a data-dependent size, or
// a check of the values): on meta they fail, by design, as on PyTorch's.
const std::set<std::string> kNeedData = {"masked_select", "nonzero", "unique"};


bool shares(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.numel() > 0 && b.numel() > 0 && a.storage().get() == b.storage().get();
}

TEST(Meta, EveryOpRunsItsShapeRuleWithoutData) {
  std::map<std::string, std::string> failed;
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = ops::op_table()[i];
    const testing::OpSample& s = testing::op_samples()[i];
    auto id = static_cast<ops::OpId>(i);
    TensorList cpu_out = ops::invoke(id, s.inputs, s.attrs);
    TensorList meta_in;
    for (const Tensor& t : s.inputs) meta_in.push_back(t.defined() ? t.to(Device::meta()) : Tensor());
    TensorList meta_out;
    try {
      DeviceScope on_meta(Device::meta());  // for factories, which have no inputs
      meta_out = ops::invoke(id, meta_in, s.attrs);
    } catch (const Error& err) {
      failed[std::string(e.name)] = err.what();
      continue;
    }
    ASSERT_EQ(meta_out.size(), cpu_out.size()) << e.name;
    for (size_t k = 0; k < cpu_out.size(); ++k) {
      const Tensor &c = cpu_out[k], &m = meta_out[k];
      ASSERT_EQ(c.defined(), m.defined()) << e.name << " output " << k;
      if (!c.defined()) continue;
      EXPECT_TRUE(m.is_meta()) << e.name << " output " << k << " is on " << m.device();
      EXPECT_EQ(shape_str(m.shape()), shape_str(c.shape())) << e.name << " output " << k;
      EXPECT_EQ(m.dtype(), c.dtype()) << e.name << " output " << k;
      if (c.numel() > 1) EXPECT_EQ(shape_str(m.strides()), shape_str(c.strides())) << e.name << " output " << k;
      for (size_t j = 0; j < s.inputs.size(); ++j)
        EXPECT_EQ(shares(m, meta_in[j]), shares(c, s.inputs[j]))
            << e.name << ": output " << k << " and input " << j << " alias on one device and not the other";
    }
  }
  const std::set<std::string>& expected = kNeedData;
  for (const auto& [name, what] : failed)
    EXPECT_TRUE(expected.count(name)) << name << " fails on meta: " << what;
  for (const std::string& name : expected)
    EXPECT_TRUE(failed.count(name)) << name << " is listed as failing on meta but runs: take it off the list";
}

TEST(Meta, ReadingDataIsAnError) {
  Tensor t = empty({2, 3}, TensorOptions(DType::F32, Device::meta()));
  EXPECT_TRUE(t.is_meta());
  try {
    t.raw_data();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a meta tensor has no data"), std::string::npos) << e.what();
  }
  EXPECT_THROW(t.item(), Error);
  EXPECT_THROW(t.to(Device::cpu()), Error);
}

TEST(Meta, MixingDevicesNamesBoth) {
  Tensor a = ones({2}), b = empty({2}, TensorOptions(DType::F32, Device::meta()));
  try {
    ops::add(a, b);
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    EXPECT_NE(m.find("meta"), std::string::npos) << m;
  }
  EXPECT_EQ(current_device(), Device::cpu());  // the failed op left the current device as it was
}

// A number wrapped outside the op (the Scalar overloads wrap on the caller's
// device) joins the meta tensor's device, as it joins any device.
TEST(Meta, NumbersJoinAMetaTensor) {
  Tensor m = empty({2, 3}, TensorOptions(DType::F32, Device::meta()));
  for (const Tensor& y : {ops::add(m, 1.0), m * 2.0, 3.0 - m, ops::div(m, 2), ops::maximum(m, ops::wrap_scalar(0.5)),
                          ops::where(ops::gt(m, 0.0), m, 0.0)}) {
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.dtype(), DType::F32);
    EXPECT_EQ(y.shape(), Shape({2, 3}));
  }
  m.add_(1.0);
  m.mul_(2.0);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(current_device(), Device::cpu());
}

TEST(Meta, ViewsAndInPlaceOpsKeepTheirAliasing) {
  Tensor x = empty({4, 6}, TensorOptions(DType::F32, Device::meta()));
  Tensor v = x.transpose(0, 1).slice(0, 1, 4);
  EXPECT_EQ(v.storage().get(), x.storage().get());
  EXPECT_EQ(shape_str(v.shape()), "[3, 4]");
  EXPECT_EQ(shape_str(v.strides()), "[1, 6]");
  uint32_t before = x.version();
  v.add_(1.0);
  EXPECT_GT(x.version(), before);
  Tensor y = ops::matmul(x, empty({6, 5}, TensorOptions(DType::F32, Device::meta())));
  EXPECT_EQ(shape_str(y.shape()), "[4, 5]");
  EXPECT_TRUE(y.is_meta());
}

TEST(Meta, MemoryIsCountedNotAllocated) {
  MemoryStats cpu0 = memory_stats(), meta0 = memory_stats(Device::meta());
  {
    Tensor t = empty({1024, 1024}, TensorOptions(DType::F32, Device::meta()));
    EXPECT_EQ(memory_stats(Device::meta()).current_bytes - meta0.current_bytes,
              static_cast<int64_t>(allocation_size(4 << 20)));
    EXPECT_EQ(memory_stats().current_bytes, cpu0.current_bytes);
  }
  EXPECT_EQ(memory_stats(Device::meta()).current_bytes, meta0.current_bytes);
}

TEST(Meta, BackwardRunsOnMeta) {
  DeviceScope on_meta(Device::meta());
  Tensor w = ops::randn({8, 4}).requires_grad_();
  Tensor x = ops::randn({3, 8});
  Tensor loss = ops::sum(ops::relu(ops::matmul(x, w)));
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_EQ(shape_str(w.grad().shape()), "[8, 4]");
}

TEST(Meta, ToAndFromTheCpu) {
  Tensor c = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor m = c.to(Device::meta());
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(shape_str(m.shape()), "[2, 3]");
  EXPECT_TRUE(c.to(Device::cpu()).is_same(c));
  EXPECT_EQ(parse_device("meta"), Device::meta());
  EXPECT_EQ(device_str(parse_device("cuda:3")), "cuda:3");
  EXPECT_THROW(parse_device("tpu"), Error);
  EXPECT_THROW(empty({2}, TensorOptions(DType::F32, Device(DeviceType::CUDA))), Error);
}

}  // namespace
}  // namespace tessera
