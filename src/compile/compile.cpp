#include "tessera/compile/compile.h"

#include "tessera/core/allocator.h"

#include <list>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/generator.h"
#include "tessera/nn/module.h"
#include "tessera/optim/optimizer.h"
#include "tessera/ops/autocast.h"

namespace tessera::compile {

struct CompiledFunction::State {
  Function fn;
  std::shared_ptr<nn::Module> module;
  NamedTensors params;
  CompileOptions opts;
  std::mutex mu;
  // The guard: what must be equal for a cached graph to be reused. Built on
  // every call, so plain integers rather than text.
  struct Key {
    std::vector<int64_t> words;
    std::vector<const void*> params;
    bool operator==(const Key&) const = default;
  };
  std::list<std::pair<Key, std::shared_ptr<const Executable>>> cache;  // most recent first
  std::shared_ptr<const Executable> last;
  int traces = 0;
  // A joint forward+backward graph (compile_train_step): traced with
  // gradients recorded, run without (the backward is in the graph).
  bool joint = false;

  NamedTensors current_params() const {
    if (!module) return params;
    NamedTensors p = module->named_parameters();
    for (auto& b : module->named_buffers()) p.push_back(b);
    return p;
  }
  // The same tensors without their names (cheaper: no strings), for the guard.
  TensorList current_param_tensors() const {
    if (!module) {
      TensorList p;
      for (const auto& [name, t] : params) p.push_back(t);
      return p;
    }
    TensorList p = module->parameters();
    for (Tensor& b : module->buffers()) p.push_back(std::move(b));
    return p;
  }

  // The guard (see key()).
  Key key(const TensorList& inputs, const TensorList& ps) const {
    Key k;
    k.words.reserve(inputs.size() * 6 + 8 + ps.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      TS_CHECK(x.defined(), "compiled function: input ", i, " is an undefined tensor");
      k.words.push_back(static_cast<int64_t>(x.dtype()));
      k.words.push_back(x.dim());
      for (int64_t d = 0; d < x.dim(); ++d) {
        bool dynamic = false;
        for (const DynamicDim& dd : opts.dynamic)
          dynamic = dynamic || (dd.input == static_cast<int>(i) && (dd.dim == d || dd.dim + x.dim() == d));
        int64_t s = x.shape()[d];
        k.words.push_back(dynamic && s >= 2 ? -2 : s);  // a dynamic size as "2 or more"
      }
    }
    auto ac = autocast::state();
    k.words.push_back(GradMode::is_enabled());
    k.words.push_back(ac.enabled ? 1 + static_cast<int64_t>(ac.dtype) : 0);
    k.words.push_back(module ? module->is_training() : -1);
    k.words.push_back(joint);
    // Inference graphs fold parameter values (batch norm into weights): an
    // update in place (a version bump) retraces them.
    bool inference = !GradMode::is_enabled() && !joint;
    for (const Tensor& t : ps) {
      k.params.push_back(t.impl());
      if (inference) k.words.push_back(t.version());
    }
    return k;
  }

  // Tracing runs the function several times; what those runs change in place
  // (batch norm's running statistics, the random generator) is put back, so
  // that only the graph's own runs have effects.
  Graph traced_without_side_effects(const TensorList& inputs, const NamedTensors& ps, const CaptureOptions& co) {
    Generator& gen = default_generator();
    uint64_t seed = gen.seed(), offset = gen.offset();
    struct Saved {
      Tensor buffer, copy;
      uint32_t version;
    };
    std::vector<Saved> saved;
    if (module) {
      NoGradGuard no_grad;
      for (auto& [name, b] : module->named_buffers())
        if (b.defined()) saved.push_back({b, b.clone(), b.version()});
    }
    auto restore = [&] {
      NoGradGuard no_grad;
      gen.set_state(seed, offset);
      for (Saved& b : saved)
        if (b.buffer.version() != b.version) b.buffer.copy_(b.copy);
    };
    try {
      Graph g = capture(fn, inputs, ps, co);
      restore();
      return g;
    } catch (...) {
      restore();
      throw;
    }
  }

  std::shared_ptr<const Executable> build(const TensorList& inputs, const NamedTensors& ps) {
    CaptureOptions co;
    for (const DynamicDim& d : opts.dynamic) {
      // A dynamic size of 0 or 1 is traced as that static size.
      TS_CHECK(d.input >= 0 && d.input < static_cast<int>(inputs.size()), "compile: dynamic dimension '", d.name,
               "' refers to input ", d.input, ", but the call has ", inputs.size(), " inputs");
      int64_t rank = inputs[d.input].dim();
      int dim = d.dim < 0 ? d.dim + static_cast<int>(rank) : d.dim;
      TS_CHECK(dim >= 0 && dim < rank, "compile: dynamic dimension '", d.name, "' is dim ", d.dim, " of input ",
               d.input, ", which has shape ", shape_str(inputs[d.input].shape()));
      if (inputs[d.input].shape()[dim] >= 2) co.dynamic.push_back(d);
    }
    co.check_constants = opts.check_constants;
    co.grad = joint || GradMode::is_enabled();
    Graph g = traced_without_side_effects(inputs, ps, co);
    ++traces;
    PassOptions po = opts.passes;
    po.inference = !co.grad;
    po.no_autograd = !co.grad || joint;
    optimize(g, po);
    // The trace ran the function eagerly and freed its values into the
    // allocator's cache; runs of the executable place theirs in its arena, so
    // those blocks would stay as dead weight (a GPT training step: 1 GiB of
    // RSS). Hand them back to the OS (a one-off cost per trace).
    empty_cache();
    return std::make_shared<const Executable>(std::move(g));
  }
};

TensorList CompiledFunction::operator()(const TensorList& inputs) {
  TS_CHECK(state_ != nullptr, "compiled function: not initialized; create it with compile()");
  State& s = *state_;
  State::Key key = s.key(inputs, s.current_param_tensors());
  std::shared_ptr<const Executable> exe;
  {
    // Tracing holds the lock: two threads calling with a new signature trace once.
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = std::find_if(s.cache.begin(), s.cache.end(), [&](const auto& e) { return e.first == key; });
    if (it != s.cache.end()) {
      s.cache.splice(s.cache.begin(), s.cache, it);
    } else {
      if (s.joint) {
        EnableGradGuard grad;
        s.cache.emplace_front(std::move(key), s.build(inputs, s.current_params()));
      } else {
        s.cache.emplace_front(std::move(key), s.build(inputs, s.current_params()));
      }
      if (s.cache.size() > std::max<size_t>(1, s.opts.cache_size)) s.cache.pop_back();
    }
    exe = s.cache.front().second;
    s.last = exe;
  }
  if (s.joint) {
    NoGradGuard no_grad;
    return exe->run(inputs);
  }
  return exe->run(inputs);
}

Tensor CompiledFunction::operator()(const Tensor& x) {
  TensorList out = (*this)(TensorList{x});
  TS_CHECK(out.size() == 1, "compiled function: returns ", out.size(), " tensors; call it with a TensorList");
  return out[0];
}

int CompiledFunction::traces() const { return state_ ? state_->traces : 0; }
int CompiledFunction::cache_entries() const { return state_ ? static_cast<int>(state_->cache.size()) : 0; }
std::shared_ptr<const Executable> CompiledFunction::last() const { return state_ ? state_->last : nullptr; }

CompiledFunction compile(Function fn, CompileOptions opts, NamedTensors params) {
  TS_CHECK(static_cast<bool>(fn), "compile: no function given");
  CompiledFunction f;
  f.state_ = std::make_shared<CompiledFunction::State>();
  f.state_->fn = std::move(fn);
  f.state_->params = std::move(params);
  f.state_->opts = std::move(opts);
  return f;
}

CompiledFunction compile(std::shared_ptr<nn::Module> module, CompileOptions opts) {
  TS_CHECK(module != nullptr, "compile: the module is null");
  nn::Module* m = module.get();
  CompiledFunction f = compile([m](const TensorList& in) -> TensorList {
    TS_CHECK(in.size() == 1, "compile(module): the module's forward takes one tensor, got ", in.size());
    return {(*m)(in[0])};
  }, std::move(opts));
  f.state_->module = std::move(module);
  return f;
}

// ---- compile_train_step ------------------------------------------------------------

// Which trainable parameters (by position among those requiring grad) the
// graph returns gradients for, found by the first trace.
struct TrainStep::Grads {
  std::mutex mu;
  std::optional<std::vector<size_t>> which;
};

namespace {
TensorList trainable(nn::Module& m) {
  TensorList ps;
  for (const Tensor& p : m.parameters())
    if (p.requires_grad()) ps.push_back(p);
  return ps;
}
}  // namespace

Tensor TrainStep::operator()(const TensorList& inputs) {
  TS_CHECK(module_ != nullptr, "train step: not initialized; create it with compile_train_step()");
  TensorList outs = graph_(inputs);
  TensorList ps = trainable(*module_);
  std::vector<size_t> which;
  {
    std::lock_guard<std::mutex> lock(grads_->mu);
    which = *grads_->which;
  }
  TS_CHECK(outs.size() == which.size() + 1, "train step: the graph returned ", outs.size(), " tensors for ",
           which.size(), " gradients and the loss");
  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < which.size(); ++i) {
      TS_CHECK(which[i] < ps.size(), "train step: the module has fewer trainable parameters than when traced");
      Tensor& p = ps[which[i]];
      const Tensor& g = outs[i + 1];
      if (Tensor cur = p.grad(); cur.defined()) cur.add_(g);
      else p.set_grad(g);
    }
  }
  if (optimizer_) {
    optimizer_->step();
    optimizer_->zero_grad();
  }
  return outs[0];
}

int TrainStep::traces() const { return graph_.traces(); }
std::shared_ptr<const Executable> TrainStep::last() const { return graph_.last(); }

TrainStep compile_train_step(std::shared_ptr<nn::Module> module, std::function<Tensor(const TensorList&)> loss,
                             optim::Optimizer* optimizer, CompileOptions opts) {
  TS_CHECK(module != nullptr, "compile_train_step: the module is null");
  TS_CHECK(static_cast<bool>(loss), "compile_train_step: no loss function given");
  auto grads = std::make_shared<TrainStep::Grads>();
  nn::Module* m = module.get();
  Function joint = [m, loss, grads](const TensorList& in) -> TensorList {
    Tensor l = loss(in);
    TS_CHECK(l.defined() && l.numel() == 1 && is_floating(l.dtype()),
             "compile_train_step: the loss function must return a floating-point tensor with one element, got ",
             l.defined() ? dtype_name(l.dtype()) + std::string(" ") + shape_str(l.shape()) : std::string("none"));
    TS_CHECK(l.requires_grad(), "compile_train_step: the loss does not depend on any parameter that requires "
             "grad (is the module frozen, or was the loss computed under NoGradGuard?)");
    TensorList ps = trainable(*m);
    TensorList gs = autograd::grad({l}, ps, {}, false, false, /*allow_unused=*/true);
    TensorList outs{l};
    std::vector<size_t> which;
    for (size_t i = 0; i < gs.size(); ++i)
      if (gs[i].defined()) {
        which.push_back(i);
        outs.push_back(gs[i]);
      }
    std::lock_guard<std::mutex> lock(grads->mu);
    if (!grads->which) grads->which = which;
    TS_CHECK(*grads->which == which, "compile_train_step: the parameters that receive gradients differ between "
             "traces (", grads->which->size(), " then ", which.size(), "); the loss must reach the same parameters "
             "for every input signature");
    return outs;
  };
  TrainStep t;
  t.graph_ = compile(std::move(joint), std::move(opts));
  t.graph_.state_->module = module;
  t.graph_.state_->joint = true;
  t.module_ = std::move(module);
  t.optimizer_ = optimizer;
  t.grads_ = std::move(grads);
  return t;
}

Graph capture_module(nn::Module& module, const Tensor& example, const CaptureOptions& opts) {
  NamedTensors params = module.named_parameters();
  for (auto& b : module.named_buffers()) params.push_back(b);
  return capture([&](const TensorList& in) { return TensorList{module(in[0])}; }, {example}, params, opts);
}

}  // namespace tessera::compile
