#include "tessera/compile/compile.h"

#include <list>
#include <sstream>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/nn/module.h"
#include "tessera/ops/autocast.h"

namespace tessera::compile {

struct CompiledFunction::State {
  Function fn;
  std::shared_ptr<nn::Module> module;
  NamedTensors params;
  CompileOptions opts;
  std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<const Executable>>> cache;  // most recent first
  std::shared_ptr<const Executable> last;
  int traces = 0;

  NamedTensors current_params() const {
    if (!module) return params;
    NamedTensors p = module->named_parameters();
    for (auto& b : module->named_buffers()) p.push_back(b);
    return p;
  }

  // The guard: what must be equal for a cached graph to be reused.
  std::string key(const TensorList& inputs, const NamedTensors& ps) const {
    std::ostringstream k;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor& x = inputs[i];
      TS_CHECK(x.defined(), "compiled function: input ", i, " is an undefined tensor");
      k << dtype_name(x.dtype()) << "[";
      for (int64_t d = 0; d < x.dim(); ++d) {
        bool dynamic = false;
        for (const DynamicDim& dd : opts.dynamic)
          dynamic = dynamic || (dd.input == static_cast<int>(i) && (dd.dim == d || dd.dim + x.dim() == d));
        int64_t s = x.shape()[d];
        if (dynamic && s >= 2) k << "*,";
        else k << s << ",";
      }
      k << "]";
    }
    auto ac = autocast::state();
    k << "|grad=" << GradMode::is_enabled() << "|autocast=" << ac.enabled << dtype_name(ac.dtype);
    if (module) k << "|train=" << module->is_training();
    // Inference graphs fold parameter values (batch norm into weights): an
    // update in place (a version bump) retraces them.
    bool inference = !GradMode::is_enabled();
    for (const auto& [name, t] : ps) {
      k << "|" << static_cast<const void*>(t.impl());
      if (inference) k << "@" << t.version();
    }
    return k.str();
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
    co.grad = GradMode::is_enabled();
    Graph g = capture(fn, inputs, ps, co);
    ++traces;
    PassOptions po = opts.passes;
    po.inference = !co.grad;
    optimize(g, po);
    return std::make_shared<const Executable>(std::move(g));
  }
};

TensorList CompiledFunction::operator()(const TensorList& inputs) {
  TS_CHECK(state_ != nullptr, "compiled function: not initialized; create it with compile()");
  State& s = *state_;
  NamedTensors ps = s.current_params();
  std::string key = s.key(inputs, ps);
  std::shared_ptr<const Executable> exe;
  {
    // Tracing holds the lock: two threads calling with a new signature trace once.
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = std::find_if(s.cache.begin(), s.cache.end(), [&](const auto& e) { return e.first == key; });
    if (it != s.cache.end()) {
      s.cache.splice(s.cache.begin(), s.cache, it);
    } else {
      s.cache.emplace_front(key, s.build(inputs, ps));
      if (s.cache.size() > std::max<size_t>(1, s.opts.cache_size)) s.cache.pop_back();
    }
    exe = s.cache.front().second;
    s.last = exe;
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

}  // namespace tessera::compile
