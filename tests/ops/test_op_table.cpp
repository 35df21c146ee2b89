// The op table (src/ops/ops.def) against the ops' behaviour: every op's
// declared properties are checked on its sample call (op_samples.h) — its
// signature, aliasing by data pointers, randomness by repeated runs, FLOPs
// against the ops' own counts, the backward support, the fusion class, the
// autocast policy, the ONNX mapping by a round trip and the layout by blocked
// runs — and every op is documented in docs/ops.md. A new op without a row, or a row that says
// something the op does not do, fails here.
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "op_samples.h"
#include "ops/op_utils.h"
#include "tessera/autograd/engine.h"
#include "tessera/compile/capture.h"
#include "tessera/compile/executor.h"
#include "tessera/compile/onnx.h"
#include "tessera/ops/op_table.h"
#include "tessera/profiler/profiler.h"
#include "test_util.h"

namespace tessera {
namespace {

using ops::OpId;

const ops::OpEntry& entry(int i) { return ops::op_table()[i]; }
OpId id(int i) { return static_cast<OpId>(i); }

TEST(OpTable, EveryOpIsDocumented) {
  std::ifstream f(std::string(TESSERA_SOURCE_DIR) + "/docs/ops.md");
  ASSERT_TRUE(f.good()) << "docs/ops.md is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  ASSERT_GT(ops::op_count(), 100);
  for (int i = 0; i < ops::op_count(); ++i) {
    std::string name(entry(i).name);
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name << " is not in docs/ops.md";
  }
}

TEST(OpTable, NamesAreUnique) {
  std::set<std::string_view> seen;
  for (int i = 0; i < ops::op_count(); ++i) EXPECT_TRUE(seen.insert(entry(i).name).second) << entry(i).name;
}

// The sample call matches the declared signature, and so do its results.
TEST(OpTable, SignaturesMatchTheCalls) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    const int k = static_cast<int>(s.inputs.size());
    EXPECT_TRUE(e.in.variadic || (k >= e.in.min && k <= e.in.max)) << e.name << ": " << k << " inputs for \"" << e.inputs << "\"";
    for (int j = 0; j < std::min(k, e.in.required); ++j) EXPECT_TRUE(s.inputs[j].defined()) << e.name << " input " << j;
    TensorList out = ops::invoke(id(i), s.inputs, s.attrs);
    const int m = static_cast<int>(out.size());
    EXPECT_TRUE(e.out.variadic || (m >= e.out.min && m <= e.out.max)) << e.name << ": " << m << " outputs for \"" << e.outputs << "\"";
  }
}

bool shares_memory(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.numel() > 0 && b.numel() > 0 && a.storage().get() == b.storage().get();
}

// kFresh: no output shares memory with an input. kView: output 0 shares input
// 0's. (kMayAlias ops share only when there is nothing to do.)
TEST(OpTable, AliasingByDataPointers) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    TensorList out = ops::invoke(id(i), s.inputs, s.attrs);
    if (e.alias == ops::Alias::kFresh) {
      for (const Tensor& y : out)
        for (const Tensor& x : s.inputs) EXPECT_FALSE(shares_memory(y, x)) << e.name << " is declared kFresh";
    } else if (e.alias == ops::Alias::kView) {
      ASSERT_FALSE(out.empty());
      EXPECT_TRUE(shares_memory(out[0], s.inputs[0])) << e.name << " is declared kView";
    }
  }
}

bool same_values(const TensorList& a, const TensorList& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].defined() != b[k].defined()) return false;
    if (!a[k].defined()) continue;
    if (!IntArrayRef(a[k].shape()).equals(b[k].shape()) || a[k].dtype() != b[k].dtype()) return false;
    Tensor x = a[k].to(DType::F64).contiguous(), y = b[k].to(DType::F64).contiguous();
    const double *p = x.data_ptr<double>(), *q = y.data_ptr<double>();
    for (int64_t j = 0; j < x.numel(); ++j)
      if (!(p[j] == q[j] || (std::isnan(p[j]) && std::isnan(q[j])))) return false;
  }
  return true;
}

// Random ops give the same values for the same seed and others for another;
// the rest do not depend on the generator at all.
TEST(OpTable, RandomnessByRepeatedRuns) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    auto run = [&](uint64_t seed) {
      manual_seed(seed);
      return ops::invoke(id(i), s.inputs, s.attrs);
    };
    TensorList a = run(7), b = run(7), c = run(8);
    EXPECT_TRUE(same_values(a, b)) << e.name << ": two runs with one seed differ";
    const bool random = ops::is_random(id(i), s.attrs);
    if (e.rng == ops::Rng::kRng) EXPECT_TRUE(random) << e.name;
    if (e.rng == ops::Rng::kNoRng) EXPECT_FALSE(random) << e.name;
    EXPECT_EQ(!same_values(a, c), random) << e.name << (random ? " is declared random but ignores the seed"
                                                                 : " is declared not random but depends on the seed");
  }
}

// The declared FLOP class against what the ops count themselves (the
// profiler's figure) for every op that counts.
TEST(OpTable, FlopsMatchTheOpsOwnCounts) {
  int counted = 0;
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    profiler::Profiler prof;
    TensorList out = ops::invoke(id(i), s.inputs, s.attrs);
    prof.stop();
    int64_t measured = 0;
    for (const auto& r : prof.op_stats()) measured += r.flops;
    std::vector<Shape> in_shapes, out_shapes;
    for (const Tensor& t : s.inputs) in_shapes.push_back(t.defined() ? t.shape() : Shape{});
    for (const Tensor& t : out) out_shapes.push_back(t.defined() ? t.shape() : Shape{});
    const int64_t declared = ops::op_flops(id(i), in_shapes, out_shapes, s.attrs);
    const bool dense = e.flops == ops::Flops::kFlopMatmul || e.flops == ops::Flops::kFlopConv ||
                       e.flops == ops::Flops::kFlopConvTranspose || e.flops == ops::Flops::kFlopAttention;
    if (measured > 0 && (dense || e.flops == ops::Flops::kFlopCustom)) {
      EXPECT_EQ(declared, measured) << e.name << ": ops.def's FLOP class disagrees with the op's own count";
      ++counted;
    } else if (dense) {
      ADD_FAILURE() << e.name << " is declared a dense product but counted no FLOPs";
    }
    if (e.flops == ops::Flops::kFlopNone) EXPECT_EQ(declared, 0) << e.name;
  }
  EXPECT_GE(counted, 15);
}

// kNone ops record no gradient; the others do, and kFirstOnly refuses a
// second derivative while kGradGrad gives one.
TEST(OpTable, BackwardSupport) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    TensorList in;
    int first_float = -1;
    for (size_t k = 0; k < s.inputs.size(); ++k) {
      Tensor t = s.inputs[k].defined() ? s.inputs[k].detach().clone() : Tensor();
      if (t.defined() && is_floating(t.dtype())) {
        t.requires_grad_(true);
        if (first_float < 0) first_float = static_cast<int>(k);
      }
      in.push_back(t);
    }
    if (first_float < 0) continue;  // nothing to differentiate
    TensorList out;
    const std::string refused = testing::error_of([&] { out = ops::invoke(id(i), in, s.attrs); });
    if (!refused.empty()) {  // an op without a gradient may refuse inputs that want one
      EXPECT_EQ(e.grad, ops::GradSupport::kNone) << e.name << ": " << refused;
      continue;
    }
    const Tensor* y = nullptr;
    for (const Tensor& t : out)
      if (!y && t.defined() && is_floating(t.dtype())) y = &t;
    if (e.grad == ops::GradSupport::kNone) {
      for (const Tensor& t : out) EXPECT_FALSE(t.defined() && t.requires_grad()) << e.name << " is declared kNone";
      continue;
    }
    ASSERT_TRUE(y) << e.name;
    EXPECT_TRUE(y->requires_grad()) << e.name << " is declared differentiable but recorded no gradient";
    if (!y->requires_grad() || e.grad == ops::GradSupport::kFused) continue;
    // A second derivative: of a non-linear function of the first (so that it
    // depends on the input), for as far as the op lets the graph be built.
    Tensor loss = ops::sum(ops::mul(*y, ops::sin(y->detach() + 0.5)));
    const std::string second = testing::error_of([&] {
      TensorList g = autograd::grad({loss}, {in[first_float]}, {}, /*retain_graph=*/true, /*create_graph=*/true);
      if (g[0].defined() && g[0].requires_grad())
        autograd::grad({ops::sum(ops::square(g[0]))}, {in[first_float]}, {}, true, false, /*allow_unused=*/true);
    });
    if (e.grad == ops::GradSupport::kFirstOnly)
      EXPECT_NE(second, "") << e.name << " is declared kFirstOnly but differentiates twice";
    else
      EXPECT_EQ(second, "") << e.name << " is declared kGradGrad: " << second;
  }
}

// kPointwise ops become an instruction of a fused kernel; no other op does.
TEST(OpTable, FusionClass) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    const bool fusable = ops::elementwise_kernel(id(i), s.attrs, static_cast<int>(s.inputs.size())).has_value();
    EXPECT_EQ(fusable, e.fusion == ops::Fusion::kPointwise) << e.name;
  }
}

// Under bf16 autocast: kAmpLower ops compute f32 inputs in bf16, kAmpF32 ops
// compute bf16 inputs in f32, and kAmpNone ops are left as they are.
TEST(OpTable, AutocastPolicy) {
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    if (s.inputs.empty() || !s.inputs[0].defined() || s.inputs[0].dtype() != DType::F32) continue;
    TensorList in = s.inputs;
    if (e.amp == autocast::Policy::kF32)
      for (Tensor& t : in)
        if (t.defined() && t.dtype() == DType::F32) t = t.to(DType::BF16);
    TensorList plain = ops::invoke(id(i), in, s.attrs);
    TensorList cast;
    {
      autocast::Guard amp(DType::BF16);
      cast = ops::invoke(id(i), in, s.attrs);
    }
    if (plain.empty() || !plain[0].defined() || !is_floating(plain[0].dtype())) continue;
    switch (e.amp) {
      case autocast::Policy::kLower: EXPECT_EQ(cast[0].dtype(), DType::BF16) << e.name; break;
      case autocast::Policy::kF32: EXPECT_EQ(cast[0].dtype(), DType::F32) << e.name; break;
      case autocast::Policy::kNone: EXPECT_EQ(cast[0].dtype(), plain[0].dtype()) << e.name; break;
      case autocast::Policy::kPromote: break;  // lists of one dtype: nothing to promote
    }
  }
}

// ONNX by round trip: a graph of the one call is exported (an ONNX node of the
// declared type for kOp), read back and run to the same values; kNone and
// kCompilerMade ops are refused by the exporter.
TEST(OpTable, OnnxMappingByRoundTrip) {
  int round_trips = 0;
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    TensorList examples;
    for (const Tensor& t : s.inputs)
      if (t.defined()) examples.push_back(t);
    if (e.in.variadic || examples.size() != s.inputs.size()) continue;  // graph inputs are dense; lists and gaps: below
    compile::Graph g;
    try {
      g = compile::capture([&](const TensorList& x) { return ops::invoke(id(i), x, s.attrs); }, examples);
    } catch (const Error&) {
      continue;  // not capturable as its own graph (data-dependent outputs)
    }
    std::string bytes, error;
    try {
      bytes = compile::onnx_bytes(g);
    } catch (const Error& err) {
      error = err.what();
    }
    if (e.onnx.kind == ops::OnnxKind::kNone || e.onnx.kind == ops::OnnxKind::kCompilerMade) {
      EXPECT_NE(error, "") << e.name << " is declared not exportable, but exported";
      continue;
    }
    if (!error.empty()) {
      // An exportable op may refuse attributes it has no ONNX form for (training
      // mode, returned indices), saying so; never for want of a mapping.
      EXPECT_EQ(error.find("has no mapping to ONNX"), std::string::npos) << e.name << " is declared exportable: " << error;
      EXPECT_NE(error.find(std::string(e.name)), std::string::npos) << error;
      continue;
    }
    if (e.onnx.kind == ops::OnnxKind::kOp)
      EXPECT_NE(bytes.find(std::string(e.onnx.type)), std::string::npos) << e.name << " exports no " << e.onnx.type << " node";
    compile::Graph back = compile::import_onnx_bytes(bytes, std::string(e.name) + ".onnx");
    compile::Executable exe(std::move(back));
    TensorList want = ops::invoke(id(i), s.inputs, s.attrs), got = exe.run(examples);
    ASSERT_EQ(want.size(), got.size()) << e.name;
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_CLOSE(got[k].to(want[k].dtype()), want[k], 1e-4, 1e-5) << e.name << " output " << k;
    ++round_trips;
  }
  EXPECT_GE(round_trips, 60);
}

// Layout by behaviour: a kBlocked op given channel-blocked tensors and its
// block attributes computes the blocked form of its NCHW result; a
// kLayoutChange op converts to blocks and back; a kPlain op's call carries no
// block attribute. A new kBlocked op needs its blocked run here.
TEST(OpTable, LayoutByBehaviour) {
  const int64_t b = 8;
  auto blocks = [&](const Tensor& t) { return ops::channel_blocks(t, b); };
  auto with = [](ops::Attrs a, std::initializer_list<std::pair<const char*, int64_t>> set) {
    for (const auto& [k, v] : set) a.set(k, v);
    return a;
  };
  Generator gen(71);
  auto rn = [&](IntArrayRef s) { return ops::randn(s, DType::F32, &gen); };
  // Each kBlocked op: its NCHW call and its blocked call on 8 channels.
  std::map<OpId, std::function<std::pair<Tensor, Tensor>()>> blocked_runs = {
      {OpId::fused_conv2d, [&] {
         const ops::Attrs& a = testing::op_samples()[static_cast<int>(OpId::fused_conv2d)].attrs;
         Tensor x = rn({1, b, 5, 5}), w = rn({b, b, 3, 3}), bias = rn({b}), r = rn({1, b, 5, 5});
         Tensor plain = ops::invoke(OpId::fused_conv2d, {x, w, bias, r}, a)[0];
         Tensor blocked = ops::invoke(OpId::fused_conv2d, {blocks(x), w, bias, blocks(r)},
                                      with(a, {{"input_block", b}, {"output_block", b}}))[0];
         return std::pair{blocks(plain), blocked};
       }},
      {OpId::max_pool2d, [&] {
         ops::Attrs a = testing::op_samples()[static_cast<int>(OpId::max_pool2d)].attrs;
         a.set("return_indices", false);
         Tensor x = rn({1, b, 5, 5});
         Tensor plain = ops::invoke(OpId::max_pool2d, {x}, with(a, {{"channel_block", 0}}))[0];
         Tensor blocked = ops::invoke(OpId::max_pool2d, {blocks(x)}, with(a, {{"channel_block", b}}))[0];
         return std::pair{blocks(plain), blocked};
       }},
  };
  int checked = 0;
  for (int i = 0; i < ops::op_count(); ++i) {
    const ops::OpEntry& e = entry(i);
    const testing::OpSample& s = testing::op_samples()[i];
    switch (e.layout) {
      case ops::Layout::kBlocked: {
        auto run = blocked_runs.find(id(i));
        ASSERT_NE(run, blocked_runs.end()) << e.name << " is declared kBlocked: add its blocked run to this test";
        auto [want, got] = run->second();
        EXPECT_CLOSE(got, want, 1e-4, 1e-5) << e.name;
        ++checked;
        break;
      }
      case ops::Layout::kLayoutChange: {
        Tensor y = ops::invoke(id(i), s.inputs, s.attrs)[0];
        EXPECT_NE(y.dim(), s.inputs[0].dim()) << e.name << " is declared kLayoutChange but kept the layout";
        EXPECT_CLOSE(ops::invoke(id(i), {y}, s.attrs)[0], s.inputs[0], 0.0, 0.0) << e.name << " does not convert back";
        ++checked;
        break;
      }
      case ops::Layout::kPlain:
        for (const char* k : {"input_block", "output_block", "channel_block"})
          if (const ops::AttrValue* a = s.attrs.find(k))
            EXPECT_EQ(std::get<int64_t>(*a), 0) << e.name << " is declared kPlain but runs blocked";
        EXPECT_EQ(blocked_runs.count(id(i)), 0u) << e.name << " runs blocked but is declared kPlain";
        break;
    }
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace tessera
