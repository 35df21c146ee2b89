// The Optimizer base (groups, state, state_dict) and the update rules.
#include "tessera/optim/optimizer.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "backend/backend.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/parallel.h"

namespace tessera::optim {

// ---- groups and state ---------------------------------------------------------------
void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  TS_CHECK(!groups.empty(), name_, ": got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  for (auto& [k, v] : group.options) {
    if (defaults_.count(k) || k == "initial_lr" || k == "max_lr" || k == "min_lr") continue;
    std::string valid;
    for (auto& [d, dv] : defaults_) valid += (valid.empty() ? "" : ", ") + d;
    TS_ERROR(name_, ": unknown option '", k, "' (valid options: ", valid, ")");
  }
  for (auto& [k, v] : defaults_) group.options.emplace(k, v);
  TS_CHECK(group.options.at("lr") >= 0, name_, ": lr must be non-negative, got ", group.options.at("lr"));
  check_options(group.options);
  TS_CHECK(!group.params.empty(), name_, ": a parameter group must hold at least one parameter");
  for (auto& p : group.params) {
    TS_CHECK(p.defined() && p.is_leaf(), name_, ": parameters must be defined leaf tensors");
    TS_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, name_, ": parameters must be f32 or f64, got ",
             dtype_name(p.dtype()), " (keep f32 master weights for mixed precision)");
    TS_CHECK(p.is_contiguous(), name_, ": parameters must be contiguous");
    for (auto& g : groups_)
      for (auto& q : g.params)
        TS_CHECK(q.impl() != p.impl(), name_, ": a parameter appears in more than one group");
  }
  TS_CHECK(group.names.empty() || group.names.size() == group.params.size(), name_, ": a parameter group has ",
           group.params.size(), " parameters but ", group.names.size(), " names (give one name each, or none)");
  for (auto& n : group.names) {
    TS_CHECK(!n.empty(), name_, ": a parameter name is empty");
    TS_CHECK(name_index_.emplace(n, state_.size() + (&n - group.names.data())).second, name_,
             ": two parameters are named '", n, "'");
  }
  state_.resize(state_.size() + group.params.size());
  groups_.push_back(std::move(group));
}

void Optimizer::set_params(std::vector<TensorList> params, std::vector<std::vector<std::string>> names) {
  TS_CHECK(params.size() == groups_.size() && names.size() == groups_.size(), name_, ".set_params: got ",
           params.size(), " parameter lists and ", names.size(), " name lists for ", groups_.size(), " groups");
  std::vector<ParamGroup> groups = std::move(groups_);
  groups_.clear();
  state_.clear();
  name_index_.clear();
  for (size_t i = 0; i < groups.size(); ++i) {
    TS_CHECK(names[i].size() == params[i].size(), name_, ".set_params: group ", i, " has ", params[i].size(),
             " parameters but ", names[i].size(), " names");
    for (size_t j = 0; j < params[i].size(); ++j) {
      const Tensor& p = params[i][j];
      TS_CHECK(p.defined() && p.is_leaf() && p.is_contiguous() && (p.dtype() == DType::F32 || p.dtype() == DType::F64),
               name_, ".set_params: parameter '", names[i][j], "' must be a contiguous f32 or f64 leaf");
      TS_CHECK(name_index_.emplace(names[i][j], state_.size() + j).second, name_, ": two parameters are named '",
               names[i][j], "'");
    }
    state_.resize(state_.size() + params[i].size());
    groups_.push_back(ParamGroup{std::move(params[i]), std::move(groups[i].options), std::move(names[i])});
  }
}

void Optimizer::step() {
  NoGradGuard no_grad;
  size_t idx = 0;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      auto& st = state_[idx++];
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      TS_CHECK(grad.dtype() == p.dtype(), name_, ": gradient dtype ", dtype_name(grad.dtype()),
               " differs from the parameter's ", dtype_name(p.dtype()));
      update(p, grad.contiguous(), st, g.options);
      p.impl()->storage->bump_version();
    }
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor gr = p.grad();
      if (!gr.defined()) continue;
      if (set_to_none)
        p.set_grad(Tensor());
      else
        gr.zero_();
    }
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  s.groups = nlohmann::json::array();
  size_t idx = 0;
  for (auto& g : groups_) {
    nlohmann::json jg;
    jg["options"] = g.options;
    std::vector<size_t> ids;
    for (size_t i = 0; i < g.params.size(); ++i, ++idx) {
      ids.push_back(idx);
      const std::string id = g.names.empty() ? std::to_string(idx) : g.names[i];
      for (auto& [k, t] : state_[idx]) s.tensors.emplace_back("state." + id + "." + k, t);
    }
    jg["params"] = ids;
    if (!g.names.empty()) jg["param_names"] = g.names;
    s.groups.push_back(std::move(jg));
  }
  return s;
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  TS_CHECK(s.groups.is_array() && s.groups.size() == groups_.size(), name_, ": the saved state has ",
           s.groups.is_array() ? s.groups.size() : 0, " parameter groups, this optimizer has ", groups_.size());
  std::vector<Options> opts;
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& jg = s.groups[i];
    TS_CHECK(jg.is_object() && jg.contains("params") && jg["params"].is_array() && jg.contains("options") &&
                 jg["options"].is_object(),
             name_, ": saved group ", i, " needs 'params' (a list) and 'options' (an object)");
    TS_CHECK(jg["params"].size() == groups_[i].params.size(), name_, ": saved group ", i, " has ",
             jg["params"].size(), " parameters, this optimizer's has ", groups_[i].params.size());
    Options o;
    for (auto& [k, v] : jg["options"].items()) {
      TS_CHECK(v.is_number(), name_, ": saved option '", k, "' of group ", i, " is not a number");
      o[k] = v.get<double>();
    }
    opts.push_back(std::move(o));
  }
  std::vector<Tensor> flat;
  for (auto& g : groups_)
    for (auto& p : g.params) flat.push_back(p);
  std::vector<std::map<std::string, Tensor>> state(flat.size());
  for (auto& [key, t] : s.tensors) {
    // "state.<param name or index>.<key>"; names hold dots, keys do not.
    TS_CHECK(key.rfind("state.", 0) == 0, name_, ": unexpected tensor '", key, "' in the saved state");
    size_t dot = key.rfind('.');
    TS_CHECK(dot > 6 && dot + 1 < key.size(), name_, ": malformed state key '", key,
             "' (expected state.<parameter>.<key>)");
    const std::string id = key.substr(6, dot - 6);
    size_t idx = 0;
    if (auto it = name_index_.find(id); it != name_index_.end()) {
      idx = it->second;
    } else {
      const bool numeric = id.find_first_not_of("0123456789") == std::string::npos && id.size() < 10;
      TS_CHECK(numeric, name_, ": the saved state is for parameter '", id, "', which this optimizer does not have",
               name_index_.empty() ? " (its parameters are unnamed)" : "");
      idx = std::stoul(id);
    }
    TS_CHECK(idx < flat.size(), name_, ": state for parameter ", idx, " but there are only ", flat.size());
    std::string k = key.substr(dot + 1);
    const bool scalar = k == "step";
    TS_CHECK(scalar ? t.numel() == 1 : IntArrayRef(t.shape()).equals(flat[idx].shape()), name_, ": state '", key,
             "' has shape ", shape_str(t.shape()), ", the parameter has ", shape_str(flat[idx].shape()));
    state[idx][k] = scalar ? t.to(DType::F64).reshape({}).clone() : t.to(flat[idx].dtype()).contiguous().clone();
  }
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i].options = opts[i];
  state_ = std::move(state);
}

// ---- update loops -------------------------------------------------------------------
namespace {

Tensor& state_tensor(std::map<std::string, Tensor>& s, const std::string& k, const Tensor& like, double init = 0) {
  auto it = s.find(k);
  if (it == s.end()) it = s.emplace(k, full(like.shape(), init, TensorOptions(like.dtype(), like.device()))).first;
  return it->second;
}

// The step counter, kept as a 0-d f64 tensor so it saves with the rest.
double next_step(std::map<std::string, Tensor>& s) {
  auto it = s.find("step");
  // A host-side count, on the CPU whatever the parameters' device (as PyTorch's).
  if (it == s.end()) it = s.emplace("step", zeros({}, TensorOptions(DType::F64, Device::cpu()))).first;
  double step = it->second.item<double>() + 1;
  it->second.fill_(step);
  return step;
}

bool flag(const Options& o, const char* k) { return o.at(k) != 0; }

}  // namespace

// ---- SGD ------------------------------------------------------------------------------
Options SGD::default_options() {
  return {{"lr", 1e-3}, {"momentum", 0}, {"dampening", 0}, {"nesterov", 0}, {"weight_decay", 0}, {"maximize", 0}};
}
SGD::SGD(TensorList params, Options o) : SGD(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
SGD::SGD(std::vector<ParamGroup> groups, Options o) : Optimizer("SGD", default_options()) {
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}
void SGD::check_options(const Options& o) const {
  TS_CHECK(!flag(o, "nesterov") || (o.at("momentum") > 0 && o.at("dampening") == 0),
           "SGD: nesterov needs momentum > 0 and dampening 0");
}
void SGD::update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& s, const Options& o) {
  backend::SgdArgs a{o.at("lr"), o.at("momentum"), o.at("dampening"), o.at("weight_decay"), flag(o, "nesterov"),
                 flag(o, "maximize"), !s.count("momentum_buffer")};
  Tensor buf = a.momentum != 0 ? state_tensor(s, "momentum_buffer", param) : Tensor();
  backend::kernels(param).sgd_step(param, grad, buf, a);
}

// ---- Adam / AdamW -----------------------------------------------------------------------
Options Adam::default_options() {
  return {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0}, {"amsgrad", 0},
          {"maximize", 0}};
}
Adam::Adam(TensorList params, Options o) : Adam(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
Adam::Adam(std::vector<ParamGroup> groups, Options o) : Optimizer("Adam", default_options()) {
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}
void Adam::check_options(const Options& o) const {
  for (const char* b : {"beta1", "beta2"})
    TS_CHECK(o.at(b) >= 0 && o.at(b) < 1, name(), ": ", b, " must be in [0, 1), got ", o.at(b));
  TS_CHECK(o.at("eps") >= 0, name(), ": eps must be non-negative");
}
void Adam::update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& s, const Options& o) {
  const double lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2");
  const bool amsgrad = flag(o, "amsgrad");
  Tensor m = state_tensor(s, "exp_avg", param), v = state_tensor(s, "exp_avg_sq", param);
  Tensor vmax = amsgrad ? state_tensor(s, "max_exp_avg_sq", param) : Tensor();
  const double step = next_step(s);
  backend::AdamArgs a{lr, b1, b2, o.at("eps"), o.at("weight_decay"), lr / (1 - std::pow(b1, step)),
                  std::sqrt(1 - std::pow(b2, step)), amsgrad, flag(o, "maximize"), decoupled_};
  backend::kernels(param).adam_step(param, grad, m, v, vmax, a);
}

Options AdamW::default_options() {
  Options o = Adam::default_options();
  o["weight_decay"] = 1e-2;
  return o;
}
AdamW::AdamW(TensorList params, Options o) : AdamW(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
AdamW::AdamW(std::vector<ParamGroup> groups, Options o) : Adam("AdamW", default_options()) {
  decoupled_ = true;
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}

// ---- RMSprop ----------------------------------------------------------------------------
Options RMSprop::default_options() {
  return {{"lr", 1e-2}, {"alpha", 0.99}, {"eps", 1e-8}, {"weight_decay", 0}, {"momentum", 0}, {"centered", 0},
          {"maximize", 0}};
}
RMSprop::RMSprop(TensorList params, Options o)
    : RMSprop(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
RMSprop::RMSprop(std::vector<ParamGroup> groups, Options o) : Optimizer("RMSprop", default_options()) {
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}
void RMSprop::update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& s, const Options& o) {
  const double lr = o.at("lr"), alpha = o.at("alpha"), eps = o.at("eps"), wd = o.at("weight_decay"),
               mom = o.at("momentum");
  const bool centered = flag(o, "centered"), maximize = flag(o, "maximize");
  next_step(s);
  Tensor sq = state_tensor(s, "square_avg", param);
  Tensor ga = centered ? state_tensor(s, "grad_avg", param) : Tensor();
  Tensor buf = mom > 0 ? state_tensor(s, "momentum_buffer", param) : Tensor();
  backend::kernels(param).rmsprop_step(param, grad, sq, ga, buf,
                                       backend::RmspropArgs{lr, alpha, eps, wd, mom, centered, maximize});
}

// ---- Adagrad ----------------------------------------------------------------------------
Options Adagrad::default_options() {
  return {{"lr", 1e-2}, {"lr_decay", 0}, {"weight_decay", 0}, {"initial_accumulator_value", 0}, {"eps", 1e-10},
          {"maximize", 0}};
}
Adagrad::Adagrad(TensorList params, Options o)
    : Adagrad(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
Adagrad::Adagrad(std::vector<ParamGroup> groups, Options o) : Optimizer("Adagrad", default_options()) {
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}
void Adagrad::update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& s, const Options& o) {
  const double lr = o.at("lr"), wd = o.at("weight_decay"), eps = o.at("eps");
  const bool maximize = flag(o, "maximize");
  Tensor sum = state_tensor(s, "sum", param, o.at("initial_accumulator_value"));
  const double step = next_step(s);
  const double clr = lr / (1 + (step - 1) * o.at("lr_decay"));
  backend::kernels(param).adagrad_step(param, grad, sum, backend::AdagradArgs{clr, wd, eps, maximize});
}

// ---- Lion -------------------------------------------------------------------------------
Options Lion::default_options() { return {{"lr", 1e-4}, {"beta1", 0.9}, {"beta2", 0.99}, {"weight_decay", 0}}; }
Lion::Lion(TensorList params, Options o) : Lion(std::vector<ParamGroup>{{std::move(params), {}}}, std::move(o)) {}
Lion::Lion(std::vector<ParamGroup> groups, Options o) : Optimizer("Lion", default_options()) {
  for (auto& g : groups)
    for (auto& [k, v] : o) g.options.emplace(k, v);
  init_groups(std::move(groups));
}
void Lion::update(Tensor& param, const Tensor& grad, std::map<std::string, Tensor>& s, const Options& o) {
  const double lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2"), wd = o.at("weight_decay");
  Tensor m = state_tensor(s, "exp_avg", param);
  backend::kernels(param).lion_step(param, grad, m, backend::LionArgs{lr, b1, b2, wd});
}

// ---- by name ----------------------------------------------------------------------------
std::vector<std::string> optimizer_names() { return {"sgd", "adam", "adamw", "rmsprop", "adagrad", "lion"}; }

OptimizerPtr make_optimizer(const std::string& name, std::vector<ParamGroup> groups, const Options& o) {
  if (name == "sgd") return std::make_unique<SGD>(std::move(groups), o);
  if (name == "adam") return std::make_unique<Adam>(std::move(groups), o);
  if (name == "adamw") return std::make_unique<AdamW>(std::move(groups), o);
  if (name == "rmsprop") return std::make_unique<RMSprop>(std::move(groups), o);
  if (name == "adagrad") return std::make_unique<Adagrad>(std::move(groups), o);
  if (name == "lion") return std::make_unique<Lion>(std::move(groups), o);
  TS_ERROR("unknown optimizer '", name, "' (expected sgd, adam, adamw, rmsprop, adagrad or lion)");
}

}  // namespace tessera::optim
