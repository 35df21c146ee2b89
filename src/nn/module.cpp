#include "tessera/nn/module.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "tessera/core/numbers.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/nn/container.h"

namespace tessera::nn {

const Tensor* StateDict::find(const std::string& name) const {
  for (const auto& [k, t] : entries)
    if (k == name) return &t;
  return nullptr;
}

// ---- forward --------------------------------------------------------------------
Tensor Module::forward(const Tensor&) {
  TS_ERROR(type_name_, " has no single-tensor forward(); call its own forward(...) overload");
}

// Note [Module paths in traces]
// A module's scope carries its full dotted path, as in state_dict keys
// ("transformer.h.0.mlp"), so paths stay right when a model calls a block
// directly or a checkpoint recomputes it in backward. Paths are assigned when a
// root module (one that is nobody's child) is called while something traces;
// until then a module's scope is its name in its parent.
trace::ScopeGuard Module::trace_scope() const {
  if (!trace::active()) return trace::ScopeGuard();
  if (!has_parent_) {
    for (auto& [name, m] : const_cast<Module*>(this)->named_modules()) m->trace_path_ = name;
  }
  const std::string& path = trace_path_.empty() && has_parent_ ? scope_name_ : trace_path_;
  // A forward overload that calls another of the same module opens one scope.
  const trace::Scope* open = trace::innermost(trace::ScopeKind::kModule);
  if (open && open->name == path.c_str()) return trace::ScopeGuard();
  return trace::ScopeGuard(path.c_str(), trace::ScopeKind::kModule);
}

Tensor Module::operator()(const Tensor& x) {
  trace::ScopeGuard scope = trace_scope();
  if (pre_hooks_.empty() && hooks_.empty()) return forward(x);
  Tensor in = x;
  for (auto& [id, h] : pre_hooks_) h(*this, in);
  Tensor out = forward(in);
  for (auto& [id, h] : hooks_) h(*this, in, out);
  return out;
}

size_t Module::register_forward_pre_hook(PreHook h) {
  pre_hooks_.emplace_back(next_hook_, std::move(h));
  return next_hook_++;
}

size_t Module::register_forward_hook(Hook h) {
  hooks_.emplace_back(next_hook_, std::move(h));
  return next_hook_++;
}

void Module::remove_hook(size_t handle) {
  std::erase_if(pre_hooks_, [&](const auto& p) { return p.first == handle; });
  std::erase_if(hooks_, [&](const auto& p) { return p.first == handle; });
}

// ---- registration ---------------------------------------------------------------
void Module::check_new_name(const std::string& name) const {
  TS_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name_, ": invalid member name '", name,
           "' (must be non-empty and contain no '.')");
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& e) { return e.name == name; });
  };
  bool child = std::any_of(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  TS_CHECK(!taken(params_) && !taken(buffers_) && !child, type_name_, ": '", name, "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_new_name(name);
  TS_CHECK(t.defined(), type_name_, ": parameter '", name, "' is undefined");
  TS_CHECK(t.is_leaf(), type_name_, ": parameter '", name, "' must be a leaf tensor (detach it first)");
  if (requires_grad) t.requires_grad_(true);
  params_.push_back({name, t});
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t, bool persistent, bool fixed_dtype) {
  check_new_name(name);
  TS_CHECK(t.defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.push_back({name, t, persistent, fixed_dtype});
  return t;
}

Tensor Module::unregister(const std::string& name) {
  for (auto it = params_.begin(); it != params_.end(); ++it)
    if (it->name == name) {
      Tensor t = it->t;
      params_.erase(it);
      return t;
    }
  for (auto it = buffers_.begin(); it != buffers_.end(); ++it)
    if (it->name == name) {
      Tensor t = it->t;
      buffers_.erase(it);
      return t;
    }
  TS_ERROR(type_name_, ": no parameter or buffer named '", name, "' to unregister");
}

void Module::add_child(const std::string& name, ModulePtr m) {
  check_new_name(name);
  TS_CHECK(m, type_name_, ": child module '", name, "' is null");
  if (m->scope_name_.empty()) m->scope_name_ = name;
  m->has_parent_ = true;
  children_.emplace_back(name, std::move(m));
}

void Module::replace_module(const std::string& name, ModulePtr m) {
  TS_CHECK(m, type_name_, ": replacement for '", name, "' is null");
  for (auto& [n, c] : children_)
    if (n == name) {
      c = std::move(m);
      if (c->scope_name_.empty()) c->scope_name_ = name;
      c->has_parent_ = true;
      return;
    }
  TS_ERROR(type_name_, ": no child module named '", name, "'");
}

// ---- traversal ------------------------------------------------------------------
// Each tensor once (a shared one under its first name). Without names
// (named == nullptr) no strings are built: a compiled function's guard walks
// the parameters on every call.
void Module::collect(const std::string& prefix, NamedTensors* named, TensorList* plain, bool params,
                     std::vector<const TensorImpl*>& seen) const {
  auto add = [&](const std::string& name, const Tensor& t) {
    if (std::find(seen.begin(), seen.end(), t.impl()) != seen.end()) return;
    seen.push_back(t.impl());
    if (named) named->emplace_back(prefix + name, t);
    else plain->push_back(t);
  };
  if (params)
    for (const auto& p : params_) add(p.name, p.t);
  else
    for (const auto& b : buffers_) add(b.name, b.t);
  for (const auto& [n, c] : children_) c->collect(named ? prefix + n + "." : prefix, named, plain, params, seen);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  if (!recurse) {
    for (const auto& p : params_) out.emplace_back(p.name, p.t);
    return out;
  }
  collect("", &out, nullptr, true, seen);
  return out;
}

TensorList Module::parameters(bool recurse) const {
  TensorList out;
  std::vector<const TensorImpl*> seen;
  if (!recurse) {
    for (const auto& p : params_) out.push_back(p.t);
    return out;
  }
  collect("", nullptr, &out, true, seen);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  std::vector<const TensorImpl*> seen;
  if (!recurse) {
    for (const auto& b : buffers_) out.emplace_back(b.name, b.t);
    return out;
  }
  collect("", &out, nullptr, false, seen);
  return out;
}

TensorList Module::buffers(bool recurse) const {
  TensorList out;
  std::vector<const TensorImpl*> seen;
  if (!recurse) {
    for (const auto& b : buffers_) out.push_back(b.t);
    return out;
  }
  collect("", nullptr, &out, false, seen);
  return out;
}

std::vector<std::pair<std::string, ModulePtr>> Module::named_children() const { return children_; }

std::vector<ModulePtr> Module::children() const {
  std::vector<ModulePtr> out;
  for (auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (auto& [n, c] : children_)
    for (auto& [sub, m] : c->named_modules()) out.emplace_back(sub.empty() ? n : n + "." + sub, m);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

Module& Module::submodule(const std::string& path) {
  Module* m = this;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Module* next = nullptr;
    for (auto& [n, c] : m->children_)
      if (n == part) next = c.get();
    TS_CHECK(next, type_name_, ": no submodule '", path, "' (", m->type_name_, " has no child '", part, "')");
    m = next;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *m;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (auto& [name, t] : named_parameters())
    if (!trainable_only || t.requires_grad()) n += t.numel();
  return n;
}

// ---- state ----------------------------------------------------------------------
void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::to(DType dtype) {
  TS_CHECK(is_floating(dtype), "Module::to: target dtype must be floating point, got ", dtype_name(dtype));
  NoGradGuard no_grad;
  auto convert = [&](Tensor& t) {
    if (t.is_floating_point() && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  };
  for (auto& m : modules()) {
    for (auto& p : m->params_) convert(p.t);
    for (auto& b : m->buffers_)
      if (!b.fixed_dtype) convert(b.t);
  }
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  for (auto& m : modules()) {
    for (auto& p : m->params_)
      if (p.t.device() != device) p.t.set_data(p.t.detach().to(device));
    for (auto& b : m->buffers_)
      if (b.t.device() != device) b.t.set_data(b.t.detach().to(device));
  }
}

void Module::to_empty(Device device) {
  NoGradGuard no_grad;
  for (auto& m : modules()) {
    for (auto& p : m->params_)
      if (p.t.device() != device) p.t.set_data(empty(p.t.shape(), TensorOptions(p.t.dtype(), device)));
    for (auto& b : m->buffers_)
      if (b.t.device() != device) b.t.set_data(empty(b.t.shape(), TensorOptions(b.t.dtype(), device)));
  }
}

void Module::reset_parameters() {
  TS_CHECK(params_.empty() && buffers_.empty(), type_name(), " has parameters or buffers but no reset_parameters: ",
           "it cannot be initialized after to_empty; load a checkpoint into it instead");
}

void Module::reset_buffers() {
  for (const auto& b : buffers_)
    TS_CHECK(b.persistent, type_name(), " has a buffer it does not save ('", b.name, "') but no reset_buffers: ",
             "it cannot be recomputed after to_empty or a checkpoint load");
}

std::vector<Module*> Module::shard_units() {
  std::vector<Module*> units;
  std::vector<Module*> inside;  // modules within a list already taken
  for (auto& [name, m] : named_modules()) {
    auto* list = dynamic_cast<ModuleList*>(m);
    if (!list || std::find(inside.begin(), inside.end(), m) != inside.end()) continue;
    for (auto& child : *list) {
      units.push_back(child.get());
      for (Module* d : child->modules()) inside.push_back(d);
    }
  }
  return units;
}

void Module::materialize(Device device) {
  to_empty(device);
  NoGradGuard no_grad;
  apply([](Module& m) {
    m.reset_parameters();
    m.reset_buffers();
  });
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none)
      p.set_grad(Tensor());
    else
      g.zero_();
  }
}

void Module::requires_grad_(bool r) {
  for (auto& p : parameters()) p.requires_grad_(r);
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
}

template <typename M, typename F>
void Module::walk_tensors(M& m, const std::string& prefix, F&& fn) {
  for (auto& p : m.params_) fn(prefix + p.name, p.t, true);
  for (auto& b : m.buffers_) fn(prefix + b.name, b.t, b.persistent);
  for (auto& [n, c] : m.children_) walk_tensors(*c, prefix + n + ".", fn);
}

StateDict Module::state_dict() const {
  StateDict sd;
  walk_tensors(*this, "", [&](const std::string& name, const Tensor& t, bool saved) {
    if (saved) sd.entries.emplace_back(name, t.detach());
  });
  return sd;
}

Module::Fit Module::fit(const std::vector<std::pair<std::string, Shape>>& given) const {
  StateDict mine = state_dict();
  std::map<std::string, const Shape*> by_name;
  for (const auto& [k, shape] : given) by_name[k] = &shape;
  Fit f;
  for (const auto& [k, t] : mine.entries) {
    auto it = by_name.find(k);
    if (it == by_name.end())
      f.missing.push_back(k);
    else if (!IntArrayRef(*it->second).equals(t.shape()))
      f.mismatched.push_back(k + " (checkpoint " + shape_str(*it->second) + ", model " + shape_str(t.shape()) + ")");
  }
  for (const auto& [k, shape] : given)
    if (!mine.find(k)) f.unexpected.push_back(k);
  return f;
}

std::string Module::Fit::problems(bool strict) const {
  auto list = [](const std::vector<std::string>& v) {
    constexpr size_t kShown = 10;
    std::string s;
    for (size_t i = 0; i < v.size() && i < kShown; ++i) s += (i ? ", " : "") + v[i];
    return v.size() > kShown ? s + " and " + std::to_string(v.size() - kShown) + " more" : s;
  };
  std::string p;
  if (!mismatched.empty()) p += "\n  shape mismatch: " + list(mismatched);
  if (strict && !missing.empty()) p += "\n  missing keys: " + list(missing);
  if (strict && !unexpected.empty()) p += "\n  unexpected keys: " + list(unexpected);
  return p;
}

Module::LoadResult Module::load_state_dict(const StateDict& sd, bool strict) {
  std::vector<std::pair<std::string, Shape>> shapes;
  std::map<std::string, const Tensor*> given;
  for (const auto& [k, t] : sd.entries) {
    shapes.emplace_back(k, t.shape());
    given[k] = &t;
  }
  const Fit f = fit(shapes);
  const std::string problems = f.problems(strict);
  TS_CHECK(problems.empty(), "load_state_dict for ", type_name_, " failed:", problems);
  LoadResult r{f.missing, f.unexpected};
  StateDict mine = state_dict();

  // The registered tensors themselves (state_dict's are detached handles), so
  // that a meta one can be given the checkpoint's memory.
  std::map<std::string, Tensor*> registered;
  walk_tensors(*this, "", [&](const std::string& name, Tensor& t, bool saved) {
    if (saved) registered[name] = &t;
  });
  NoGradGuard no_grad;
  // Buffers a checkpoint does not carry, still on meta: recomputed on the
  // device the checkpoint brings (after the loop below).
  Device loaded_on = sd.entries.empty() ? Device::cpu() : sd.entries.front().second.device();
  for (auto& [k, t] : mine.entries) {
    auto it = given.find(k);
    if (it == given.end()) continue;
    const Tensor& src = *it->second;
    TS_CHECK(is_floating(t.dtype()) == is_floating(src.dtype()) || t.dtype() == src.dtype(), "load_state_dict: '", k,
             "' has dtype ", dtype_name(src.dtype()), " but the model expects ", dtype_name(t.dtype()));
    Tensor dst = t;  // shares the registered tensor's storage
    if (dst.is_meta()) {
      // A model built on meta takes the checkpoint's memory and device (its
      // own copy, in its own dtype): loading materializes it.
      registered.at(k)->set_data(src.detach().to(dst.dtype()).clone());
    } else {
      dst.copy_(src.device() == dst.device() ? src : src.detach().to(dst.device()));
    }
  }
  apply([&](Module& m) {
    bool derived = false;
    for (auto& b : m.buffers_)
      if (!b.persistent && b.t.is_meta()) {
        b.t.set_data(empty(b.t.shape(), TensorOptions(b.t.dtype(), loaded_on)));
        derived = true;
      }
    if (derived) m.reset_buffers();
  });
  return r;
}

// ---- printing -------------------------------------------------------------------
static std::string count_str(int64_t n) {
  ClassicLocale c_locale;  // printf below writes "0.5" whatever the process locale
  char buf[32];
  if (n >= 1000000)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1000)
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

void Module::print(std::string& out, const std::string& name, int indent) const {
  std::string pad(indent, ' ');
  out += pad;
  if (!name.empty()) out += "(" + name + "): ";
  out += type_name_ + "(" + extra_repr();
  if (!children_.empty()) {
    out += "\n";
    for (const auto& [n, c] : children_) c->print(out, n, indent + 2);
    out += pad;
  }
  out += ")";
  int64_t n = num_parameters();
  if (n > 0) out += "  # " + count_str(n) + " params";
  out += "\n";
}

std::string Module::str() const {
  std::string out;
  print(out, "", 0);
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.str(); }

}  // namespace tessera::nn
