#pragma once
// The small models the distributed tests train, on every rank alike.
#include "tessera/autograd/checkpoint.h"
#include "tessera/nn/nn.h"
#include "tessera/ops/ops.h"
#include "tessera/optim/optimizer.h"

namespace tessera::testing {

// Odd shapes, a frozen parameter, one used only on request, and an optional
// checkpointed middle layer.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> a, b, c;
  Tensor frozen, sometimes;
  bool checkpointed = false, use_sometimes = true;
  Net() : nn::Module("Net") {
    a = register_module("a", std::make_shared<nn::Linear>(5, 7));
    b = register_module("b", std::make_shared<nn::Linear>(7, 3));
    c = register_module("c", std::make_shared<nn::Linear>(3, 2, false));
    frozen = register_parameter("frozen", ops::rand({7}), false);
    sometimes = register_parameter("sometimes", ops::randn({3}));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = ops::mul(ops::tanh((*a)(x)), ops::add(frozen, 0.5));
    h = checkpointed ? autograd::checkpoint([&](const Tensor& t) { return (*b)(t); }, h) : (*b)(h);
    h = ops::tanh(h);
    if (use_sometimes) h = ops::add(h, sometimes);
    return (*c)(h);
  }
};

// Units for ZeRO-3: blocks in a ModuleList (42 parameters each, not a
// multiple of 4), an input layer and a head, and the input layer's weight
// used again at the end (tied, as a GPT's embedding and head).
struct Block : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  explicit Block(int64_t w) : nn::Module("Block") { fc = register_module("fc", std::make_shared<nn::Linear>(w, w)); }
  Tensor forward(const Tensor& x) override { return ops::add(x, ops::tanh((*fc)(x))); }
};

struct DeepNet : nn::Module {
  std::shared_ptr<nn::Linear> inp, head;
  std::shared_ptr<nn::ModuleList> blocks;
  bool checkpointed = false;  // the middle block
  DeepNet() : nn::Module("DeepNet") {
    inp = register_module("inp", std::make_shared<nn::Linear>(5, 6));
    blocks = register_module("blocks", std::make_shared<nn::ModuleList>());
    for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<Block>(6));
    head = register_module("head", std::make_shared<nn::Linear>(6, 2));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*inp)(x);
    for (size_t i = 0; i < blocks->size(); ++i) {
      auto b = (*blocks)[i];
      h = checkpointed && i == 1 ? autograd::checkpoint([b](const Tensor& t) { return (*b)(t); }, h) : (*b)(h);
    }
    Tensor tied = ops::linear(h, inp->weight.t()).narrow(1, 0, 2);
    return ops::add((*head)(h), ops::mul(tied, 0.1));
  }
};

inline std::shared_ptr<DeepNet> make_deep_net(DType dt) {
  manual_seed(9);
  auto n = std::make_shared<DeepNet>();
  n->to(dt);
  return n;
}

inline std::shared_ptr<Net> make_net(DType dt) {
  manual_seed(7);  // the same initial weights everywhere
  auto n = std::make_shared<Net>();
  n->to(dt);
  return n;
}

// Two groups (the last layer at a tenth of the learning rate), named.
inline optim::OptimizerPtr make_opt(const std::string& name, nn::Module& m, optim::Options extra = {}) {
  optim::ParamGroup body, head;
  for (auto& [n, p] : m.named_parameters()) {
    if (!p.requires_grad()) continue;
    optim::ParamGroup& g = n.rfind("c.", 0) == 0 ? head : body;
    g.params.push_back(p);
    g.names.push_back(n);
  }
  head.options["lr"] = 0.005;
  extra.emplace("lr", 0.05);
  std::vector<optim::ParamGroup> groups{body};
  if (!head.params.empty()) groups.push_back(head);
  return optim::make_optimizer(name, groups, extra);
}

}  // namespace tessera::testing
