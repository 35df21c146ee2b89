#include "tessera/train/meta_size.h"

#include <mutex>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/trace.h"
#include "tessera/ops/ops.h"

namespace tessera::train {
namespace {

// Sums the FLOPs the ops report (trace::add_flops) while it is installed.
class FlopCounter : public trace::Listener {
 public:
  FlopCounter() { trace::add_listener(this); }
  ~FlopCounter() override { trace::remove_listener(this); }
  void scope_end(const trace::Scope& s) override {
    std::lock_guard<std::mutex> lock(mu_);
    total_ += s.flops;
  }
  int64_t total() {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }

 private:
  std::mutex mu_;
  int64_t total_ = 0;
};

void add_module_sizes(nn::Module& m, const std::string& path, int depth, std::vector<ModuleSize>& out) {
  ModuleSize s{path, m.type_name(), 0, 0};
  for (const Tensor& p : m.parameters()) {
    s.params += p.numel();
    s.bytes += static_cast<int64_t>(p.nbytes());
  }
  out.push_back(s);
  if (depth == 2) return;
  for (auto& [name, child] : m.named_children())
    add_module_sizes(*child, path.empty() ? name : path + "." + name, depth + 1, out);
}

}  // namespace

MetaSize size_on_meta(const MetaSizeRequest& r) {
  const Device meta = Device::meta();
  DeviceScope on_meta(meta);
  MetaSize s;
  const int64_t base = memory_stats(meta).current_bytes;
  nn::ModulePtr model = r.build();
  s.param_bytes = memory_stats(meta).current_bytes - base;
  add_module_sizes(*model, "", 0, s.modules);
  for (const Tensor& p : model->parameters()) {
    s.params += p.numel();
    s.param_bytes_by_dtype[dtype_name(p.dtype())] += static_cast<int64_t>(p.nbytes());
    if (p.requires_grad()) {
      s.trainable += p.numel();
      s.grad_bytes += static_cast<int64_t>(allocation_size(p.nbytes()));
    }
  }
  model->train();
  const MetaInput in = r.input(*model);
  const bool language_model = in.dtype == DType::I64;
  Tensor x = language_model ? zeros(in.shape, DType::I64) : ops::randn(in.shape);
  const int64_t before_step = memory_stats(meta).current_bytes;
  reset_peak_memory(meta);
  {
    FlopCounter flops;
    Tensor y = model->forward(x);
    s.forward_flops = flops.total();
    Tensor loss = language_model
                      ? ops::cross_entropy(y.reshape({-1, y.size(-1)}), zeros({y.numel() / y.size(-1)}, DType::I64))
                      : ops::cross_entropy(y, zeros({y.size(0)}, DType::I64));
    loss.backward();
    s.step_flops = flops.total();
  }
  // Gradients stay after backward; the peak above the model counts them too,
  // so they are taken out to leave the activations.
  s.activation_peak = std::max<int64_t>(0, memory_stats(meta).peak_bytes - before_step - s.grad_bytes);
  if (r.make_optimizer) {
    try {
      optim::OptimizerPtr opt = r.make_optimizer(*model);
      const int64_t before = memory_stats(meta).current_bytes;
      opt->step();
      s.optimizer_bytes = memory_stats(meta).current_bytes - before;
    } catch (const Error& e) {
      s.optimizer_note = e.what();
    }
  } else {
    s.optimizer_bytes = 0;
    s.optimizer_note = "no optimizer";
  }
  return s;
}

RankMemory per_rank_memory(const MetaSize& s, int64_t ranks) {
  TS_CHECK(ranks >= 1, "per_rank_memory: ranks must be at least 1, got ", ranks);
  const int64_t P = s.param_bytes, G = s.grad_bytes, O = std::max<int64_t>(s.optimizer_bytes, 0),
                A = s.activation_peak;
  auto shard = [&](int64_t b) { return (b + ranks - 1) / ranks; };
  return {P + G + O + A, P + G + shard(O) + A, P + shard(G + O) + A, shard(P + G + O) + A};
}

}  // namespace tessera::train
