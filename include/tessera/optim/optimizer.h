#pragma once
// Optimizers: SGD, Adam, AdamW, RMSprop, Adagrad, Lion, with PyTorch 1.13's
// update rules and option names. Each update is one fused loop per parameter
// over its raw data (threaded), never a chain of tensor ops.
//
// Options are numbers by name ("lr", "momentum", "beta1", ...; flags are 0/1),
// per parameter group, so schedulers and configs address them uniformly:
//
//   optim::Adam opt(model->parameters(), {{"lr", 1e-3}, {"weight_decay", 0.01}});
//   opt.add_param_group({head->parameters(), {{"lr", 1e-2}}});
#include <functional>
#include <optional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/tensor.h"

namespace tessera::optim {

using Options = std::map<std::string, double>;

struct ParamGroup {
  TensorList params;
  Options options;  // missing keys take the optimizer's defaults
  // The parameters' names (Module::named_parameters), one each, or none. With
  // names the saved state is keyed by them, so it loads into a model whose
  // parameter order or grouping differs (sharded and resized runs).
  std::vector<std::string> names = {};
  double lr() const { return options.at("lr"); }
};

// What state_dict() returns: the per-parameter state tensors, named
// "state.<param name>.<key>" ("state.<param index>.<key>" for unnamed
// parameters), and the groups (options, param indices and names) as JSON.
// load_state_dict reads both forms, so checkpoints saved by index still load.
struct OptimizerState {
  std::vector<std::pair<std::string, Tensor>> tensors;
  nlohmann::json groups;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  const std::string& name() const { return name_; }

  void step();  // skips parameters without a gradient
  void zero_grad(bool set_to_none = true);
  void add_param_group(ParamGroup group);
  // Replaces the parameters of every group, keeping the groups' options (the
  // scheduler's handles stay valid); the state is dropped. ZeRO hands the
  // optimizer this rank's shards of its parameters: one list per group, with
  // names, and a list may be empty on a rank that holds no shard of it.
  void set_params(std::vector<TensorList> params, std::vector<std::vector<std::string>> names);
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const Options& defaults() const { return defaults_; }

  OptimizerState state_dict() const;
  // Errors name what differs: group count, group sizes, state tensor shapes.
  void load_state_dict(const OptimizerState& s);

 protected:
  Optimizer(std::string name, Options defaults) : name_(std::move(name)), defaults_(std::move(defaults)) {}
  void init_groups(std::vector<ParamGroup> groups);
  // Updates one parameter; `state` holds its named state tensors (created on first use).
  virtual void update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& state, const Options& o) = 0;
  virtual void check_options(const Options& o) const {}

 private:
  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // per parameter, in group order
  std::map<std::string, size_t> name_index_;           // parameter name -> index into state_
};

using OptimizerPtr = std::unique_ptr<Optimizer>;

// lr, momentum 0, dampening 0, nesterov 0, weight_decay 0, maximize 0.
struct SGD : Optimizer {
  SGD(TensorList params, Options o = {});
  SGD(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();

 protected:
  void update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& s, const Options& o) override;
  void check_options(const Options& o) const override;
};

// lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0, amsgrad 0, maximize 0.
// Adam adds weight decay to the gradient; AdamW decays the weights directly.
struct Adam : Optimizer {
  Adam(TensorList params, Options o = {});
  Adam(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();

 protected:
  Adam(const char* name, Options defaults) : Optimizer(name, std::move(defaults)) {}
  void update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& s, const Options& o) override;
  void check_options(const Options& o) const override;
  bool decoupled_ = false;
};

// As Adam, with weight_decay 1e-2 applied as p *= 1 - lr * weight_decay.
struct AdamW : Adam {
  AdamW(TensorList params, Options o = {});
  AdamW(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();
};

// lr 1e-2, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, centered 0.
struct RMSprop : Optimizer {
  RMSprop(TensorList params, Options o = {});
  RMSprop(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();

 protected:
  void update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& s, const Options& o) override;
};

// lr 1e-2, lr_decay 0, weight_decay 0, initial_accumulator_value 0, eps 1e-10.
struct Adagrad : Optimizer {
  Adagrad(TensorList params, Options o = {});
  Adagrad(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();

 protected:
  void update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& s, const Options& o) override;
};

// Lion (Chen et al. 2023): p -= lr * (sign(b1 m + (1 - b1) g) + wd p); m = b2 m + (1 - b2) g.
// lr 1e-4, beta1 0.9, beta2 0.99, weight_decay 0.
struct Lion : Optimizer {
  Lion(TensorList params, Options o = {});
  Lion(std::vector<ParamGroup> groups, Options o = {});
  static Options default_options();

 protected:
  void update(Tensor& p, const Tensor& g, std::map<std::string, Tensor>& s, const Options& o) override;
};

// By name ("sgd", "adam", "adamw", "rmsprop", "adagrad", "lion"), for configs.
OptimizerPtr make_optimizer(const std::string& name, std::vector<ParamGroup> groups, const Options& options);
std::vector<std::string> optimizer_names();

// ---- gradient utilities ----------------------------------------------------------
// Scales all gradients so that their joint norm is at most max_norm; returns the
// norm before clipping. norm_type inf = the largest absolute value. A non-finite
// norm is an error when error_if_nonfinite. When the gradients are split across
// processes (ZeRO's shards), `combine` joins this process's partial total (the
// sum of |g|^norm_type, or the largest |g| for inf) with the others'.
// `scaled`, when given, are the parameters whose gradients the clipping
// scales instead of `params`': a model split across processes counts each
// element once in the norm (`params`) but scales every copy it holds.
double clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false, const std::function<double(double)>& combine = {},
                       const std::optional<TensorList>& scaled = std::nullopt);
void clip_grad_value_(const TensorList& params, double clip_value);

}  // namespace tessera::optim
