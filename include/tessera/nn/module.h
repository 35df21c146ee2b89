#pragma once
// Module: the base of every layer and model. A module owns named parameters
// (leaves that require grad), buffers (state that is saved but not trained,
// like BatchNorm's running statistics) and child modules. Names are dotted
// paths ("layer1.0.conv1.weight"), the same ones PyTorch uses, so state dicts
// move between the two.
//
// A layer registers its tensors in its constructor and keeps the handles as
// members:
//
//   struct Affine : Module {
//     Tensor w, b;
//     Affine(int64_t n) : Module("Affine") {
//       w = register_parameter("weight", ones({n}));
//       b = register_parameter("bias", zeros({n}));
//     }
//     Tensor forward(const Tensor& x) override { return x * w + b; }
//   };
//
// The registry and the member share one TensorImpl, so to(dtype) and
// load_state_dict() (which change data in place) are seen through both.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/core/trace.h"

namespace tessera::nn {

class Module;
using ModulePtr = std::shared_ptr<Module>;

// Ordered name -> tensor pairs: the order is registration order, depth first.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// state_dict(): parameters and persistent buffers, in registration order.
struct StateDict {
  NamedTensors entries;
  const Tensor* find(const std::string& name) const;
  size_t size() const { return entries.size(); }
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- forward --------------------------------------------------------------
  // The single-tensor forward. Modules with other signatures (Bilinear,
  // MultiheadAttention, losses) add their own and may leave this one throwing.
  virtual Tensor forward(const Tensor& x);
  // Runs the forward pre-hooks, forward() and the forward hooks, inside a
  // trace scope named after the module (its attribute name in its parent), so
  // the profiler can group ops by module path.
  Tensor operator()(const Tensor& x);
  // That scope, for forward overloads with other signatures.
  [[nodiscard]] trace::ScopeGuard trace_scope() const;

  // Pre-hook: may replace the input. Hook: sees input and output, may replace the output.
  using PreHook = std::function<void(Module&, Tensor& input)>;
  using Hook = std::function<void(Module&, const Tensor& input, Tensor& output)>;
  size_t register_forward_pre_hook(PreHook h);
  size_t register_forward_hook(Hook h);
  void remove_hook(size_t handle);

  // ---- registration ---------------------------------------------------------
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  // fixed_dtype: to(dtype) leaves the buffer alone (quantization scales, whose
  // dtype is part of their format).
  Tensor register_buffer(const std::string& name, Tensor t, bool persistent = true, bool fixed_dtype = false);
  // Removes this module's own parameter or buffer `name` and returns it (e.g.
  // when quantization replaces a weight); error when there is none.
  Tensor unregister(const std::string& name);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  // Replaces a registered child (same name) or parameter, e.g. to tie weights.
  void replace_module(const std::string& name, ModulePtr m);

  // ---- traversal ------------------------------------------------------------
  // Shared tensors (tied weights) appear once, under their first name.
  NamedTensors named_parameters(bool recurse = true) const;
  TensorList parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, ModulePtr>> named_children() const;
  std::vector<ModulePtr> children() const;
  // This module (name "") and every descendant, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  std::vector<Module*> modules();
  // The child at a dotted path ("layer1.0"); error when there is none.
  Module& submodule(const std::string& path);
  // The pieces ZeRO-3 gathers one at a time (distributed/zero.h), in the
  // order forward runs them: by default the elements of every outermost
  // ModuleList (transformer blocks). A model adds its embeddings and head
  // where each is used only inside its own forward (not tied to another).
  // Each must be called through operator(), whose hooks gather it.
  virtual std::vector<Module*> shard_units();
  // Parameters of other modules this one uses in its forward (a head tied to
  // an embedding uses the embedding's weight): not its own, so not in
  // named_parameters, but a unit that lists them is gathered with their owner.
  virtual std::vector<Tensor> shared_parameters() const { return {}; }
  int64_t num_parameters(bool trainable_only = false) const;

  // ---- state ----------------------------------------------------------------
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Converts floating parameters and buffers (integer buffers keep their dtype).
  void to(DType dtype);
  // Moves every parameter and buffer to `device` (copying their data), keeping
  // their identity, as to(dtype) does.
  void to(Device device);
  // Gives every parameter and buffer not on `device` fresh, uninitialized
  // memory there (nothing is copied): how a model built on meta is
  // materialized, before its initializers (reset_parameters) or a checkpoint
  // fill it.
  void to_empty(Device device);
  // Draws this module's own parameters (and sets its buffers) as its
  // constructor does; children are not touched. A module with parameters that
  // has no initializer of its own keeps the default, which refuses.
  virtual void reset_parameters();
  // Recomputes the buffers this module derives from its configuration and
  // does not save (a Llama's RoPE tables): after materialize, and after a
  // checkpoint is loaded into a model built on meta.
  virtual void reset_buffers();
  // to_empty(device), then every module's reset_parameters and reset_buffers, children before
  // their parent (the order constructors run in): a model built on meta with
  // a seed, materialized with the same seed, equals the model built on the
  // device directly, bit for bit (the zoo's models are tested for it).
  void materialize(Device device);
  void zero_grad(bool set_to_none = true);
  void requires_grad_(bool r = true);
  void apply(const std::function<void(Module&)>& fn);  // children first, then this one

  // Parameters and persistent buffers by dotted name. Tied tensors appear under
  // every name (as in PyTorch).
  StateDict state_dict() const;
  // Copies values into the registered tensors (converting dtype, onto each
  // tensor's device). A tensor on meta takes the checkpoint's device instead,
  // so a model built on meta is materialized by loading its checkpoint. With
  // strict, any missing key, unexpected key or shape mismatch is an error that
  // lists them all by name; without strict, missing/unexpected keys are returned.
  struct LoadResult {
    std::vector<std::string> missing, unexpected;
  };
  LoadResult load_state_dict(const StateDict& sd, bool strict = true);

  // How tensors of these names and shapes (a checkpoint's) fit state_dict():
  // what they lack, names the module does not have, and shapes that differ.
  // load_state_dict checks with it, and so do the loaders that read a
  // checkpoint a piece at a time (ZeRO's).
  struct Fit {
    std::vector<std::string> missing, unexpected;
    std::vector<std::string> mismatched;  // "name (checkpoint [2, 3], model [3, 2])"
    // "" when it fits (without strict, missing and unexpected names are
    // allowed); else a line per kind of problem, naming up to 10 each.
    std::string problems(bool strict = true) const;
  };
  Fit fit(const std::vector<std::pair<std::string, Shape>>& given) const;

  // ---- printing -------------------------------------------------------------
  const std::string& type_name() const { return type_name_; }
  // One line of hyper-parameters, e.g. "in_features=784, out_features=256".
  virtual std::string extra_repr() const { return ""; }
  // The module tree, PyTorch-style, with parameter counts per module.
  std::string str() const;

 protected:
  void add_child(const std::string& name, ModulePtr m);
  bool training_ = true;

 private:
  struct Param {
    std::string name;
    Tensor t;
  };
  struct Buffer {
    std::string name;
    Tensor t;
    bool persistent;
    bool fixed_dtype;
  };
  void check_new_name(const std::string& name) const;
  void collect(const std::string& prefix, NamedTensors* named, TensorList* plain, bool params,
               std::vector<const TensorImpl*>& seen) const;
  void print(std::string& out, const std::string& name, int indent) const;
  // fn(dotted name, the registered tensor, saved) for every parameter and
  // buffer, depth first, parameters before buffers (PyTorch's state_dict
  // order); saved: a parameter or a persistent buffer. Defined in module.cpp.
  template <typename M, typename F>
  static void walk_tensors(M& m, const std::string& prefix, F&& fn);

  std::string type_name_;
  std::string scope_name_;  // name under its first parent ("" for a root)
  bool has_parent_ = false;
  std::string trace_path_;  // full dotted path, see Note [Module paths in traces]
  std::vector<Param> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, ModulePtr>> children_;
  std::vector<std::pair<size_t, PreHook>> pre_hooks_;
  std::vector<std::pair<size_t, Hook>> hooks_;
  size_t next_hook_ = 1;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace tessera::nn
