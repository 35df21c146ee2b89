#pragma once
// Every operator, as a free function. Each is defined once in
// src/ops/<family>.cpp (validation, shape/dtype rule, kernel call, VJP); the
// list of names is src/ops/ops.def. docs/ops.md lists dtypes and backward support.
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/attrs.h"

namespace tessera::ops {

enum class OpId : uint16_t;

// ---- unary (floating results for integer inputs where PyTorch gives them) ---
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor exp2(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log2(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor square(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tan(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor elu(const Tensor& x, double alpha = 1.0);
// approximate: "none" (exact, erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);
Tensor mish(const Tensor& x);
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0);
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor sign(const Tensor& x);
Tensor floor(const Tensor& x);
Tensor ceil(const Tensor& x);
Tensor round(const Tensor& x);
Tensor trunc(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);
Tensor reciprocal(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
Tensor nan_to_num(const Tensor& x, std::optional<double> nan = {}, std::optional<double> posinf = {},
                  std::optional<double> neginf = {});
Tensor logical_not(const Tensor& x);

// ---- binary (broadcasting; Scalar forms follow PyTorch's promotion) ---------
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor add(const Scalar& a, const Tensor& b);
Tensor sub(const Scalar& a, const Tensor& b);
Tensor mul(const Scalar& a, const Tensor& b);
Tensor div(const Scalar& a, const Tensor& b);
// rounding_mode: "" (true division), "floor" or "trunc".
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode = "");
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, const Scalar& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_xor(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, const Scalar& weight);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, const Scalar& value = 1);

// The common dtype of a binary op's operands (torch.result_type).
DType result_type(const Tensor& a, const Tensor& b);

// ---- reductions: empty `dims` means all dims ---------------------------------
Tensor sum(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false, std::optional<DType> dtype = {});
Tensor mean(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
// Values and indices along one dim.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = {}, bool keepdim = false);
Tensor var(const Tensor& x, IntArrayRef dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, IntArrayRef dims = {}, double correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, IntArrayRef dims, bool keepdim = false);
// p: 1, 2 or infinity.
Tensor norm(const Tensor& x, double p = 2, IntArrayRef dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor any(const Tensor& x, IntArrayRef dims = {}, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);
// Sums `x` down to `shape` (the reverse of broadcasting).
Tensor sum_to(const Tensor& x, IntArrayRef shape);

// ---- linear algebra ------------------------------------------------------------
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor addmm(const Tensor& self, const Tensor& a, const Tensor& b, const Scalar& beta = 1, const Scalar& alpha = 1);
Tensor outer(const Tensor& a, const Tensor& b);
Tensor einsum(const std::string& equation, const TensorList& operands);

// ---- shape and indexing -----------------------------------------------------
Tensor cat(const TensorList& ts, int64_t dim = 0);
Tensor stack(const TensorList& ts, int64_t dim = 0);
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& x, IntArrayRef sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);
TensorList unbind(const Tensor& x, int64_t dim = 0);
// pad: pairs (before, after) starting from the last dim, as torch.nn.functional.pad.
// mode: "constant", "reflect" or "replicate".
Tensor pad(const Tensor& x, IntArrayRef pad, const std::string& mode = "constant", double value = 0);
Tensor flip(const Tensor& x, IntArrayRef dims);
Tensor roll(const Tensor& x, IntArrayRef shifts, IntArrayRef dims = {});
Tensor repeat(const Tensor& x, IntArrayRef repeats);
Tensor tile(const Tensor& x, IntArrayRef reps);
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Scalar& value);
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const Scalar& alpha = 1);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);
Tensor masked_select(const Tensor& x, const Tensor& mask);
Tensor nonzero(const Tensor& x);
Tensor one_hot(const Tensor& x, int64_t num_classes = -1);
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// Sorted unique values; with return_inverse/return_counts the extra tensors too.
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted = true, bool return_inverse = false,
                                          bool return_counts = false);

// ---- views with autograd (also available as Tensor methods) ---------------------
Tensor view(const Tensor& x, IntArrayRef shape);
Tensor reshape(const Tensor& x, IntArrayRef shape);
Tensor permute(const Tensor& x, IntArrayRef dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, IntArrayRef shape);
Tensor squeeze(const Tensor& x, std::optional<int64_t> dim = {});
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1);
Tensor contiguous(const Tensor& x);
// The same data, cut off from autograd (no gradient flows through).
Tensor detach(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dtype);

// ---- random ------------------------------------------------------------------------
Tensor rand(IntArrayRef shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(IntArrayRef shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, IntArrayRef shape, TensorOptions opts = DType::I64, Generator* gen = nullptr);
Tensor uniform(IntArrayRef shape, double low, double high, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor normal(IntArrayRef shape, double mean, double std, TensorOptions opts = {}, Generator* gen = nullptr);
// Each element is 1 with probability p (a tensor of probabilities or a scalar).
Tensor bernoulli(const Tensor& p, Generator* gen = nullptr);
Tensor bernoulli(IntArrayRef shape, double p, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);

// ---- neural-network functions ---------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor layer_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
Tensor rms_norm(const Tensor& x, IntArrayRef normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = {});
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// In training mode, running_mean/var (if given) are updated in place with momentum.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(), bool training = false,
                  double momentum = 0.1, double eps = 1e-5);
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
Tensor embedding(const Tensor& weight, const Tensor& indices, std::optional<int64_t> padding_idx = {});

struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0};  // ignored when padding_mode_same
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
  bool padding_same = false;  // padding='same' (stride must be 1)
};
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool padding_same = false);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dOptions& opts = {});
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                        IntArrayRef stride = {1, 1}, IntArrayRef padding = {0, 0},
                        IntArrayRef output_padding = {0, 0}, int64_t groups = 1, IntArrayRef dilation = {1, 1});
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, IntArrayRef kernel, IntArrayRef stride = {},
                                                   IntArrayRef padding = {0, 0}, IntArrayRef dilation = {1, 1},
                                                   bool ceil_mode = false);
// channel_block (0, 8 or 16): x and the result are channel-blocked
// [N, C/b, H, W, b] (see channel_blocks) instead of NCHW: the layout pass pools
// convolutions' blocked activations in place of converting them.
Tensor max_pool2d(const Tensor& x, IntArrayRef kernel, IntArrayRef stride = {}, IntArrayRef padding = {0, 0},
                  IntArrayRef dilation = {1, 1}, bool ceil_mode = false, int64_t channel_block = 0);
Tensor avg_pool2d(const Tensor& x, IntArrayRef kernel, IntArrayRef stride = {}, IntArrayRef padding = {0, 0},
                  bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, IntArrayRef output_size);
// mode: "nearest" or "bilinear"; give either size or scale_factor.
Tensor interpolate(const Tensor& x, IntArrayRef size, std::vector<double> scale_factor = {},
                   const std::string& mode = "nearest", bool align_corners = false);

// reduction: "mean", "sum" or "none".
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     int64_t ignore_index = -100, const std::string& reduction = "mean",
                     double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                int64_t ignore_index = -100, const std::string& reduction = "mean");
Tensor mse_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean");
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
                      double beta = 1.0);
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            const std::string& reduction = "mean");
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                                        const std::string& reduction = "mean", const Tensor& pos_weight = Tensor());
Tensor kl_div(const Tensor& input, const Tensor& target, const std::string& reduction = "mean",
              bool log_target = false);
// q [..., L, E], k [..., S, E], v [..., S, Ev]. attn_mask: additive float mask or
// boolean (true = attend), broadcastable to [..., L, S].
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = Tensor(), double dropout_p = 0.0,
                                    bool is_causal = false, std::optional<double> scale = {},
                                    Generator* gen = nullptr);
// {y, lse}: scaled_dot_product_attention without dropout, and the log-sum-exp
// of each query row's scaled, masked scores, [..., L] in f32 (f64 for f64
// inputs), which attention_backward then takes instead of running the forward
// again. Gradient-recording calls of scaled_dot_product_attention go through
// it, so a captured training graph keeps lse as a value.
TensorList attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = Tensor(),
                              bool is_causal = false, std::optional<double> scale = {});

// ---- communication (Note [Collectives as ops] in tessera/ops/communicator.h) -----------
// `group` names a process group ("world", or a sub-group's name()); every rank
// of it must make the same calls in the same order. distributed/functional.h
// takes a ProcessGroupPtr instead.
// The sum over the group's ranks; gradient all_reduce(dy): every rank's loss counts.
Tensor all_reduce(const Tensor& x, const std::string& group = "world");
// The ranks' x joined along dim in rank order; gradient reduce_scatter(dy).
Tensor all_gather(const Tensor& x, const std::string& group = "world", int64_t dim = 0);
// Block `rank` (along dim, which must divide by the group's size) of the sum;
// gradient all_gather(dy).
Tensor reduce_scatter(const Tensor& x, const std::string& group = "world", int64_t dim = 0);
// x itself forward; gradient all_reduce(dy) (a replicated input of a split computation).
Tensor copy_to_group(const Tensor& x, const std::string& group = "world");
// The sum over the ranks; gradient dy itself (a result every rank then uses alike).
Tensor reduce_from_group(const Tensor& x, const std::string& group = "world");
// The ranks' x joined along dim forward; gradient block `rank` of dy (a
// split result every rank then uses whole: Megatron's gather_from).
Tensor gather_from_group(const Tensor& x, const std::string& group = "world", int64_t dim = 0);
// Block `rank` along dim forward; gradient the ranks' dy joined along dim (a
// replicated input each rank uses a block of: Megatron's scatter_to).
Tensor scatter_to_group(const Tensor& x, const std::string& group = "world", int64_t dim = 0);

// ---- backward kernels -------------------------------------------------------------------
// The gradients of the fused ops above, as ops of their own, so that a backward
// pass can be recorded into a graph (compile_train_step) and replayed. Each
// recomputes what its forward kept internally (normalization statistics;
// attention's log-sum-exp, unless given) from its inputs. Not differentiable
// again.
// An activation's gradient in one pass: function relu (saved = its output),
// tanh (its output), gelu, gelu_tanh, silu (their input).
Tensor unary_backward(const Tensor& grad, const Tensor& saved, const std::string& function);
// output: the forward's result.
Tensor softmax_backward(const Tensor& grad, const Tensor& output, int64_t dim, bool log = false);
// {grad_input, grad_weight, grad_bias}; the parameter gradients have
// normalized_shape and are computed even when the forward had no weight/bias.
TensorList layer_norm_backward(const Tensor& grad, const Tensor& x, IntArrayRef normalized_shape,
                               const Tensor& weight, double eps, bool rms = false);
// {grad_input, grad_weight, grad_bias}, the last two of shape [C]; f32/f64 only.
TensorList batch_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& running_mean,
                               const Tensor& running_var, const Tensor& weight, bool training, double eps);
// {grad_input, grad_weight, grad_bias} of conv2d (transposed = false; padding
// top/left and bottom/right) or conv_transpose2d (transposed = true; padding_br
// ignored, the output size comes from grad).
TensorList convolution_backward(const Tensor& grad, const Tensor& x, const Tensor& weight, IntArrayRef stride,
                                IntArrayRef padding, IntArrayRef padding_br, IntArrayRef dilation, int64_t groups,
                                bool transposed);
// The gradient of max_pool2d from the indices it returned.
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, IntArrayRef input_size);
Tensor avg_pool2d_backward(const Tensor& grad, IntArrayRef input_size, IntArrayRef kernel, IntArrayRef stride,
                           IntArrayRef padding, bool ceil_mode, bool count_include_pad);
// {dq, dk, dv} of scaled_dot_product_attention without dropout. With the
// forward's output and log-sum-exp (attention_with_lse) the forward is not run
// again; without them it is.
TensorList attention_backward(const Tensor& grad, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& attn_mask, bool is_causal, std::optional<double> scale,
                              const Tensor& out = Tensor(), const Tensor& lse = Tensor());

// ---- quantized weights (quant/, docs/quantization.md) -----------------------------
// y = x @ W^T + bias with W stored quantized: qweight is a u8 tensor of packed
// rows [out_features, bytes per row] in `format` (q8_0, q4_0, int8, int4; see
// Note [Quantized weight formats] in backend/cpu/quant.h); scales is f32
// [out] for int8 and f16 [out, in/group] for int4 (undefined for the block
// formats, which carry their scales); mins is f16 [out, in/group] for int4 only.
// activations: "float" multiplies by the weights decoded in registers (batches
// above 16 rows: dequantized tiles and the f32 GEMM); "int8" quantizes x per 32
// values and runs int8 dot products (faster; one more rounding). Differentiable
// in x and bias (dx = dy @ dequantized W); the weight is not trained.
Tensor quantized_linear(const Tensor& x, const Tensor& qweight, const Tensor& scales, const Tensor& mins,
                        const Tensor& bias, const std::string& format, int64_t group = 0,
                        const std::string& activations = "float");
// The f32 weight [out_features, in_features] a quantized one stands for.
Tensor dequantize_weight(const Tensor& qweight, const Tensor& scales, const Tensor& mins, const std::string& format,
                         int64_t group = 0);

// ---- static int8 (post-training quantization: quant/ptq.h, docs/quantization.md) ----
// Activations are u8 codes of one affine scale per tensor, x = (q - zero_point)
// * scale; weights are s8 codes with one symmetric scale per output channel.
// q = saturate(round_half_even(x / scale) + zero_point) into u8 [0, 255] or
// s8 [-128, 127], as ONNX QuantizeLinear. x must be floating; scale > 0.
Tensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, DType dtype = DType::U8);
// (q - zero_point) * scale as f32, as ONNX DequantizeLinear (q: u8 or s8).
Tensor dequantize_per_tensor(const Tensor& q, double scale, int64_t zero_point);
// The int8 convolution: x u8 [N, C, H, W] (x_scale, x_zero_point), weight s8
// [OC, C/groups, KH, KW] with w_scales f32 [OC], bias f32 [OC] (optional);
// y = act(conv(x, w) + bias) (activation "none" or "relu") as u8 codes of
// (y_scale, y_zero_point), or as f32 when out_dtype is F32. The u8 result is
// channels-last in memory (strides of [N, H, W, C]), the layout the int8
// kernels read; a channels-last input is read without a copy. Inference only.
Tensor int8_conv2d(const Tensor& x, const Tensor& weight, const Tensor& w_scales, const Tensor& bias,
                   const Conv2dOptions& opts, double x_scale, int64_t x_zero_point, double y_scale,
                   int64_t y_zero_point, const std::string& activation = "none", DType out_dtype = DType::U8);
// The int8 linear layer: x u8 [..., K], weight s8 [N, K] with w_scales f32
// [N]; otherwise as int8_conv2d. Inference only.
Tensor int8_linear(const Tensor& x, const Tensor& weight, const Tensor& w_scales, const Tensor& bias, double x_scale,
                   int64_t x_zero_point, double y_scale, int64_t y_zero_point, const std::string& activation = "none",
                   DType out_dtype = DType::U8);

// Quantization-aware training: x rounded to the int8 grid and back,
// (clamp(round(x / scale) + zero_point, quant_min, quant_max) - zero_point) *
// scale, rounding half to even as quantize_per_tensor does. scale and
// zero_point (f32, integer values) hold one value (per tensor) or one per
// index of dimension `axis` (per channel). Gradients: straight-through for x
// (dy where the code is inside [quant_min, quant_max], 0 where it was
// clamped); for a scale that requires grad, LSQ's (Esser et al., 2020):
// round(x/s) - x/s inside, quant_min/max - zero_point where clamped, scaled by
// 1 / sqrt(elements per scale * quant_max).
Tensor fake_quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, int64_t axis, int64_t quant_min,
                     int64_t quant_max);

// ---- sparse weights (pruned layers) ---------------------------------------------------
// y = x @ W^T + bias with W [out_features, in_features] in compressed sparse
// rows: row_ptr i64 [out_features + 1], col_idx i32 [nnz] (ascending within a
// row), values f32 [nnz]. Every index is checked. Made by the compiler's
// sparse-weights pass for very sparse constant weights; inference only.
Tensor sparse_linear(const Tensor& x, const Tensor& values, const Tensor& col_idx, const Tensor& row_ptr,
                     const Tensor& bias, int64_t in_features);

// ---- made by the graph compiler (compile/) ----------------------------------------
// A chain of pointwise ops as one kernel: `program` is a register program over
// the inputs (broadcast together; float or bool), with f32 outputs of the
// broadcast shape (docs/compiler.md, "Elementwise fusion"). No backward.
TensorList fused_elementwise(const TensorList& inputs, const std::string& program);
// act(linear(x, weight, bias)) + residual as one GEMM with an epilogue
// (compile/'s fuse-epilogue pass makes it). activation: none, relu, gelu,
// gelu_tanh, silu or tanh; residual optional, of the output's shape. f32 runs
// the fused oneDNN product, other cases the ops one after another. No backward.
// constant_weights: as fused_conv2d's below; the weight is then read from a
// copy in the GEMM primitive's own layout, made once (the layout pass sets it
// in inference graphs; a few rows read the weight as it is).
Tensor fused_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const std::string& activation, bool constant_weights = false);
// act(conv2d(x, weight, bias) + residual), with activation as fused_linear's
// and residual optional (of the output's shape): a ResNet block's tail. f32
// (and native bf16) runs one oneDNN convolution with post-ops, other cases
// the ops one after another. No backward. Made by the fuse-epilogue pass.
// input_block / output_block (0, 8 or 16): x, resp. the output and residual,
// are channel-blocked (see channel_blocks) instead of NCHW (the layout pass).
// constant_weights: the caller promises never to change `weight` other than
// through Tessera ops (which bump its version); its copy in the convolution's
// own layout is then made once and kept with it (inference graphs' constants).
Tensor fused_conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                    const Conv2dOptions& opts, const std::string& activation, int64_t input_block = 0,
                    int64_t output_block = 0, bool constant_weights = false);
// NCHW [N, C, H, W] to channel-blocked [N, C/block, H, W, block] (channel c
// at [n, c / block, h, w, c % block]: oneDNN's nChw8c / nChw16c), and a 5-D
// blocked tensor back to NCHW.
Tensor channel_blocks(const Tensor& x, int64_t block);
// The kernel a pointwise op runs on f32 operands, as a fused_elementwise
// instruction ("Add", "LeakyRelu[0.2]", "where"), or nullopt if the op (with
// these attributes) cannot join a fused kernel.
std::optional<std::string> elementwise_kernel(OpId op, const Attrs& attrs, int num_inputs);

}  // namespace tessera::ops
