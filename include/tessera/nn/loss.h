#pragma once
// Losses as modules, wrapping the functional losses in tessera::ops.
// Call them as loss(input, target).
#include <string>

#include "tessera/nn/module.h"

namespace tessera::nn {

struct Loss : Module {
  std::string reduction;  // "mean", "sum" or "none" (KLDivLoss also "batchmean")
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::string extra_repr() const override { return "reduction=" + reduction; }

 protected:
  Loss(const char* type, std::string reduction);
};

struct CrossEntropyLoss : Loss {
  Tensor weight;  // per-class weights (optional)
  int64_t ignore_index;
  double label_smoothing;
  explicit CrossEntropyLoss(Tensor weight = Tensor(), int64_t ignore_index = -100, std::string reduction = "mean",
                            double label_smoothing = 0.0);
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct NLLLoss : Loss {
  Tensor weight;
  int64_t ignore_index;
  explicit NLLLoss(Tensor weight = Tensor(), int64_t ignore_index = -100, std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct MSELoss : Loss {
  explicit MSELoss(std::string reduction = "mean") : Loss("MSELoss", std::move(reduction)) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct L1Loss : Loss {
  explicit L1Loss(std::string reduction = "mean") : Loss("L1Loss", std::move(reduction)) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct SmoothL1Loss : Loss {
  double beta;
  explicit SmoothL1Loss(std::string reduction = "mean", double beta = 1.0)
      : Loss("SmoothL1Loss", std::move(reduction)), beta(beta) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct BCELoss : Loss {
  Tensor weight;
  explicit BCELoss(Tensor weight = Tensor(), std::string reduction = "mean");
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct BCEWithLogitsLoss : Loss {
  Tensor weight, pos_weight;
  explicit BCEWithLogitsLoss(Tensor weight = Tensor(), std::string reduction = "mean", Tensor pos_weight = Tensor());
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

struct KLDivLoss : Loss {
  bool log_target;
  explicit KLDivLoss(std::string reduction = "mean", bool log_target = false)
      : Loss("KLDivLoss", std::move(reduction)), log_target(log_target) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

}  // namespace tessera::nn
