// The C++ layers by their constructors, with torch.nn's parameter names and
// defaults, under tessera._C._layers; tessera/nn/cpp.py wraps each in a
// CppModule class (tessera.nn.cpp.Linear(4, 8)), so a C++ layer sits in a
// Python model tree and trains under a Python optimizer.
#include "bindings.h"
#include "tessera/core/error.h"
#include "tessera/nn/nn.h"

namespace tessera::python {

namespace {

// A size per spatial dim: an int or a pair (kernel_size=3, kernel_size=(3, 1)).
nn::Int2 int2(py::handle h, const char* what) {
  if (auto v = index_value(h)) return nn::Int2(*v);
  if (py::isinstance<py::tuple>(h) || py::isinstance<py::list>(h)) {
    py::sequence s = py::reinterpret_borrow<py::sequence>(h);
    if (s.size() == 2) {
      auto a = index_value(s[0]), b = index_value(s[1]);
      if (a && b) return nn::Int2(*a, *b);
    }
  }
  type_error(std::string(what) + " must be an int or a pair of ints, got " + type_name(h));
}

nn::Padding padding(py::handle h) {
  if (py::isinstance<py::str>(h)) return nn::Padding(h.cast<std::string>());
  nn::Int2 p = int2(h, "padding");
  return nn::Padding(p.h, p.w);
}

// torch's stride=None: the kernel's size (the C++ layers read 0 so).
nn::Int2 stride_or_kernel(py::handle h) { return h.is_none() ? nn::Int2(0) : int2(h, "stride"); }

Tensor or_none(const std::optional<Tensor>& t) { return t ? *t : Tensor(); }

template <typename L>
py::class_<L, nn::Module, std::shared_ptr<L>> layer(py::module_& m, const char* name, const char* doc) {
  return py::class_<L, nn::Module, std::shared_ptr<L>>(m, name, doc);
}

// Layers whose forward takes two tensors (a loss's input and target, Bilinear's x1 and x2).
template <typename L, typename C>
void call2(C& c, const char* a, const char* b) {
  c.def("__call__", [](L& l, const Tensor& x, const Tensor& y) {
    py::gil_scoped_release nogil;
    return l.forward(x, y);
  }, py::arg(a), py::arg(b));
}

void bind_activations(py::module_& l) {
  layer<nn::ReLU>(l, "ReLU", "max(x, 0)").def(py::init<>());
  layer<nn::SiLU>(l, "SiLU", "x * sigmoid(x)").def(py::init<>());
  layer<nn::Tanh>(l, "Tanh", "tanh(x)").def(py::init<>());
  layer<nn::Sigmoid>(l, "Sigmoid", "1 / (1 + exp(-x))").def(py::init<>());
  layer<nn::Mish>(l, "Mish", "x * tanh(softplus(x))").def(py::init<>());
  layer<nn::Identity>(l, "Identity", "x").def(py::init<>());
  layer<nn::GELU>(l, "GELU", "GELU, exact or approximate='tanh'").def(py::init<std::string>(), py::arg("approximate") = "none");
  layer<nn::LeakyReLU>(l, "LeakyReLU", "x, or negative_slope * x below 0").def(py::init<double>(), py::arg("negative_slope") = 0.01);
  layer<nn::ELU>(l, "ELU", "x, or alpha * (exp(x) - 1) below 0").def(py::init<double>(), py::arg("alpha") = 1.0);
  layer<nn::Softplus>(l, "Softplus", "log(1 + exp(beta * x)) / beta (x above threshold)").def(py::init<double, double>(), py::arg("beta") = 1.0, py::arg("threshold") = 20.0);
  layer<nn::Hardtanh>(l, "Hardtanh", "x clamped to [min_val, max_val]").def(py::init<double, double>(), py::arg("min_val") = -1.0, py::arg("max_val") = 1.0);
  layer<nn::Softmax>(l, "Softmax", "exp(x) normalized to sum 1 along dim").def(py::init<int64_t>(), py::arg("dim") = -1);
  layer<nn::LogSoftmax>(l, "LogSoftmax", "log of softmax along dim").def(py::init<int64_t>(), py::arg("dim") = -1);
  layer<nn::Dropout>(l, "Dropout", "zeroes elements with probability p while training").def(py::init<double>(), py::arg("p") = 0.5);
}

void bind_linear_and_conv(py::module_& l) {
  layer<nn::Linear>(l, "Linear", "y = x W^T + b; weight [out_features, in_features]")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"), py::arg("bias") = true);
  auto bilinear = layer<nn::Bilinear>(l, "Bilinear", "y_k = x1^T W_k x2 + b_k; weight [out, in1, in2]");
  bilinear.def(py::init<int64_t, int64_t, int64_t, bool>(), py::arg("in1_features"), py::arg("in2_features"),
               py::arg("out_features"), py::arg("bias") = true);
  call2<nn::Bilinear>(bilinear, "input1", "input2");
  layer<nn::Embedding>(l, "Embedding", "rows of weight [num_embeddings, embedding_dim] by integer ids")
      .def(py::init<int64_t, int64_t, std::optional<int64_t>>(), py::arg("num_embeddings"), py::arg("embedding_dim"),
           py::arg("padding_idx") = py::none());
  layer<nn::Flatten>(l, "Flatten", "x with dims start_dim..end_dim joined").def(py::init<int64_t, int64_t>(), py::arg("start_dim") = 1, py::arg("end_dim") = -1);
  layer<nn::Unflatten>(l, "Unflatten", "dim of x split into unflattened_size").def(py::init<int64_t, std::vector<int64_t>>(), py::arg("dim"),
                                               py::arg("unflattened_size"));
  layer<nn::Conv1d>(l, "Conv1d", "x [N, C, L]; weight [out, in / groups, k]")
      .def(py::init([](int64_t in, int64_t out, int64_t k, int64_t stride, py::object pad, int64_t dilation, int64_t groups,
                       bool bias) {
             nn::Padding p = padding(pad);
             TS_CHECK(p.same || p.size.h == p.size.w, "Conv1d: padding must be an int or 'same'/'valid'");
             return std::make_shared<nn::Conv1d>(in, out, k, stride, p, dilation, groups, bias);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true);
  layer<nn::Conv2d>(l, "Conv2d", "x [N, C, H, W]; weight [out, in / groups, kh, kw]")
      .def(py::init([](int64_t in, int64_t out, py::object k, py::object stride, py::object pad, py::object dilation,
                       int64_t groups, bool bias) {
             return std::make_shared<nn::Conv2d>(in, out, int2(k, "kernel_size"), int2(stride, "stride"), padding(pad),
                                                 int2(dilation, "dilation"), groups, bias);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("dilation") = 1, py::arg("groups") = 1, py::arg("bias") = true);
  layer<nn::ConvTranspose2d>(l, "ConvTranspose2d", "the gradient of Conv2d as a layer; weight [in, out / groups, kh, kw]")
      .def(py::init([](int64_t in, int64_t out, py::object k, py::object stride, py::object pad, py::object out_pad,
                       int64_t groups, bool bias, py::object dilation) {
             return std::make_shared<nn::ConvTranspose2d>(in, out, int2(k, "kernel_size"), int2(stride, "stride"),
                                                          int2(pad, "padding"), int2(out_pad, "output_padding"), groups,
                                                          bias, int2(dilation, "dilation"));
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"), py::arg("stride") = 1,
           py::arg("padding") = 0, py::arg("output_padding") = 0, py::arg("groups") = 1, py::arg("bias") = true,
           py::arg("dilation") = 1);
  layer<nn::MaxPool2d>(l, "MaxPool2d", "window maxima of x [N, C, H, W]; stride defaults to kernel_size")
      .def(py::init([](py::object k, py::object stride, py::object pad, py::object dilation, bool ceil_mode) {
             return std::make_shared<nn::MaxPool2d>(int2(k, "kernel_size"), stride_or_kernel(stride), int2(pad, "padding"),
                                                    int2(dilation, "dilation"), ceil_mode);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("ceil_mode") = false);
  layer<nn::AvgPool2d>(l, "AvgPool2d", "window means of x [N, C, H, W]; stride defaults to kernel_size")
      .def(py::init([](py::object k, py::object stride, py::object pad, bool ceil_mode, bool count_include_pad) {
             return std::make_shared<nn::AvgPool2d>(int2(k, "kernel_size"), stride_or_kernel(stride), int2(pad, "padding"),
                                                    ceil_mode, count_include_pad);
           }),
           py::arg("kernel_size"), py::arg("stride") = py::none(), py::arg("padding") = 0, py::arg("ceil_mode") = false,
           py::arg("count_include_pad") = true);
  layer<nn::AdaptiveAvgPool2d>(l, "AdaptiveAvgPool2d", "x [N, C, H, W] -> [N, C, *output_size] by window means")
      .def(py::init([](py::object size) { return std::make_shared<nn::AdaptiveAvgPool2d>(int2(size, "output_size")); }),
           py::arg("output_size"));
}

void bind_norms(py::module_& l) {
  layer<nn::BatchNorm1d>(l, "BatchNorm1d", "x [N, C] or [N, C, L]")
      .def(py::init<int64_t, double, std::optional<double>, bool, bool>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.1, py::arg("affine") = true, py::arg("track_running_stats") = true);
  layer<nn::BatchNorm2d>(l, "BatchNorm2d", "x [N, C, H, W]")
      .def(py::init<int64_t, double, std::optional<double>, bool, bool>(), py::arg("num_features"), py::arg("eps") = 1e-5,
           py::arg("momentum") = 0.1, py::arg("affine") = true, py::arg("track_running_stats") = true);
  auto shape = [](py::handle h) {
    if (auto v = index_value(h)) return std::vector<int64_t>{*v};
    return h.cast<std::vector<int64_t>>();
  };
  layer<nn::LayerNorm>(l, "LayerNorm", "over the last dims, normalized_shape")
      .def(py::init([shape](py::object s, double eps, bool affine, bool bias) {
             return std::make_shared<nn::LayerNorm>(shape(s), eps, affine, bias);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5, py::arg("elementwise_affine") = true, py::arg("bias") = true);
  layer<nn::RMSNorm>(l, "RMSNorm", "x / rms(x) * weight over the last dims")
      .def(py::init([shape](py::object s, std::optional<double> eps, bool affine) {
             return std::make_shared<nn::RMSNorm>(shape(s), eps, affine);
           }),
           py::arg("normalized_shape"), py::arg("eps") = py::none(), py::arg("elementwise_affine") = true);
  layer<nn::GroupNorm>(l, "GroupNorm", "x [N, C, ...] normalized per group of channels")
      .def(py::init<int64_t, int64_t, double, bool>(), py::arg("num_groups"), py::arg("num_channels"), py::arg("eps") = 1e-5,
           py::arg("affine") = true);
}

void bind_attention(py::module_& l) {
  layer<nn::MultiheadAttention>(l, "MultiheadAttention",
                                "PyTorch's parameters and masks on the flash-style attention op. Returns "
                                "(output, None): the [L, S] weights are never formed, so none are returned.")
      .def(py::init<int64_t, int64_t, double, bool, bool>(), py::arg("embed_dim"), py::arg("num_heads"),
           py::arg("dropout") = 0.0, py::arg("bias") = true, py::arg("batch_first") = false)
      .def("__call__", [](nn::MultiheadAttention& a, const Tensor& q, const Tensor& k, const Tensor& v,
                          std::optional<Tensor> key_padding_mask, bool need_weights, std::optional<Tensor> attn_mask,
                          bool average_attn_weights, bool is_causal) {
        Tensor out;
        {
          py::gil_scoped_release nogil;
          out = a.forward(q, k, v, or_none(key_padding_mask), or_none(attn_mask), is_causal);
        }
        return py::make_tuple(tensor_object(out), py::none());
      }, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("key_padding_mask") = py::none(),
         py::arg("need_weights") = true, py::arg("attn_mask") = py::none(), py::arg("average_attn_weights") = true,
         py::arg("is_causal") = false);
  layer<nn::TransformerEncoderLayer>(l, "TransformerEncoderLayer", "post-LN (norm_first=False) or pre-LN encoder layer")
      .def(py::init<int64_t, int64_t, int64_t, double, const std::string&, double, bool, bool>(), py::arg("d_model"),
           py::arg("nhead"), py::arg("dim_feedforward") = 2048, py::arg("dropout") = 0.1, py::arg("activation") = "relu",
           py::arg("layer_norm_eps") = 1e-5, py::arg("batch_first") = false, py::arg("norm_first") = false)
      .def("__call__", [](nn::TransformerEncoderLayer& e, const Tensor& src, std::optional<Tensor> src_mask,
                          std::optional<Tensor> src_key_padding_mask, bool is_causal) {
        py::gil_scoped_release nogil;
        return e.forward(src, or_none(src_mask), or_none(src_key_padding_mask), is_causal);
      }, py::arg("src"), py::arg("src_mask") = py::none(), py::arg("src_key_padding_mask") = py::none(),
         py::arg("is_causal") = false);
  layer<nn::CausalSelfAttention>(l, "CausalSelfAttention", "GPT's causal self-attention over [B, T, C] (nanoGPT's names)")
      .def(py::init<int64_t, int64_t, bool, double>(), py::arg("n_embd"), py::arg("n_head"), py::arg("bias") = true,
           py::arg("dropout") = 0.0);
  layer<nn::GPTMLP>(l, "GPTMLP", "c_fc -> GELU -> c_proj -> dropout")
      .def(py::init<int64_t, bool, double>(), py::arg("n_embd"), py::arg("bias") = true, py::arg("dropout") = 0.0);
  layer<nn::DecoderBlock>(l, "DecoderBlock", "pre-LN GPT block: x + attn(ln_1(x)), then x + mlp(ln_2(x))")
      .def(py::init<int64_t, int64_t, bool, double>(), py::arg("n_embd"), py::arg("n_head"), py::arg("bias") = true,
           py::arg("dropout") = 0.0);
}

void bind_losses(py::module_& l) {
  py::class_<nn::Loss, nn::Module, std::shared_ptr<nn::Loss>> loss(l, "Loss", "input and target to a loss");
  call2<nn::Loss>(loss, "input", "target");
  auto sub = [&]<typename L>(const char* name, const char* doc) {
    return py::class_<L, nn::Loss, std::shared_ptr<L>>(l, name, doc);
  };
  sub.operator()<nn::CrossEntropyLoss>("CrossEntropyLoss", "logits [N, C] (or [N, C, d...]) and class indices [N] (or probabilities)")
      .def(py::init([](std::optional<Tensor> w, int64_t ignore, std::string reduction, double smoothing) {
             return std::make_shared<nn::CrossEntropyLoss>(or_none(w), ignore, reduction, smoothing);
           }),
           py::arg("weight") = py::none(), py::arg("ignore_index") = -100, py::arg("reduction") = "mean",
           py::arg("label_smoothing") = 0.0);
  sub.operator()<nn::NLLLoss>("NLLLoss", "log-probabilities [N, C] and class indices [N]")
      .def(py::init([](std::optional<Tensor> w, int64_t ignore, std::string reduction) {
             return std::make_shared<nn::NLLLoss>(or_none(w), ignore, reduction);
           }),
           py::arg("weight") = py::none(), py::arg("ignore_index") = -100, py::arg("reduction") = "mean");
  sub.operator()<nn::MSELoss>("MSELoss", "(input - target)^2, reduced").def(py::init<std::string>(), py::arg("reduction") = "mean");
  sub.operator()<nn::L1Loss>("L1Loss", "|input - target|, reduced").def(py::init<std::string>(), py::arg("reduction") = "mean");
  sub.operator()<nn::SmoothL1Loss>("SmoothL1Loss", "Huber-like with threshold beta, reduced")
      .def(py::init<std::string, double>(), py::arg("reduction") = "mean", py::arg("beta") = 1.0);
  sub.operator()<nn::BCELoss>("BCELoss", "binary cross entropy of probabilities")
      .def(py::init([](std::optional<Tensor> w, std::string reduction) {
             return std::make_shared<nn::BCELoss>(or_none(w), reduction);
           }),
           py::arg("weight") = py::none(), py::arg("reduction") = "mean");
  sub.operator()<nn::BCEWithLogitsLoss>("BCEWithLogitsLoss", "binary cross entropy of logits (stable)")
      .def(py::init([](std::optional<Tensor> w, std::string reduction, std::optional<Tensor> pos_weight) {
             return std::make_shared<nn::BCEWithLogitsLoss>(or_none(w), reduction, or_none(pos_weight));
           }),
           py::arg("weight") = py::none(), py::arg("reduction") = "mean", py::arg("pos_weight") = py::none());
  sub.operator()<nn::KLDivLoss>("KLDivLoss", "KL divergence of log-probabilities against target")
      .def(py::init<std::string, bool>(), py::arg("reduction") = "mean", py::arg("log_target") = false);
}

}  // namespace

void bind_layers(py::module_& m) {
  py::module_ l = m.def_submodule("_layers", "The C++ layers by their constructors (torch.nn's arguments)");
  bind_activations(l);
  bind_linear_and_conv(l);
  bind_norms(l);
  bind_attention(l);
  bind_losses(l);
}

}  // namespace tessera::python
