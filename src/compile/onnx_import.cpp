// ONNX import: an interpreter that runs an ONNX graph with Tessera ops, under
// graph capture. Integer tensors that describe shapes (Shape, and what is
// computed from it) are evaluated on the host while tracing, so sizes become
// attributes that capture fits to the dynamic dimensions.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <unordered_map>

#include "tessera/compile/capture.h"
#include "tessera/compile/onnx.h"
#include "tessera/core/error.h"
#include "tessera/io/file.h"
#include "tessera/ops/ops.h"

namespace tessera::compile {
namespace {

using P = onnx::TensorProto;
constexpr int kMinOpset = 13;
constexpr size_t kMaxHostValues = 4096;  // values of one shape computation (sizes, axes)  // the input-based forms of Split, Squeeze, Unsqueeze, ReduceSum

DType tessera_type(int t, const std::string& where) {
  switch (t) {
    case P::FLOAT: return DType::F32;
    case P::DOUBLE: return DType::F64;
    case P::FLOAT16: return DType::F16;
    case P::BFLOAT16: return DType::BF16;
    case P::INT64: return DType::I64;
    case P::INT32: return DType::I32;
    case P::INT8: return DType::I8;
    case P::UINT8: return DType::U8;
    case P::BOOL: return DType::Bool;
    default: TS_ERROR(where, ": ONNX element type ", t, " is not supported (float, double, float16, bfloat16, int64, int32, int8, uint8, bool are)");
  }
}

Tensor from_proto(const P& t, const std::string& where) {
  TS_CHECK(t.data_location() != P::EXTERNAL, where, ": tensor '", t.name(), "' keeps its data in an external file, which is not supported");
  DType dt = tessera_type(t.data_type(), where + " tensor '" + t.name() + "'");
  Shape shape;
  int64_t n = 1;
  TS_CHECK(t.dims_size() <= kMaxDims, where, ": tensor '", t.name(), "' has ", t.dims_size(), " dims");
  for (int64_t d : t.dims()) {
    TS_CHECK(d >= 0 && (d == 0 || n <= (int64_t{1} << 40) / d), where, ": tensor '", t.name(), "' has a bad size ", d);
    shape.push_back(d);
    n *= d;
  }
  size_t item = dtype_size(dt);
  if (t.has_raw_data()) {
    TS_CHECK(t.raw_data().size() == static_cast<size_t>(n) * item, where, ": tensor '", t.name(), "' has ",
             t.raw_data().size(), " bytes of data for shape ", shape_str(shape), " (", n * static_cast<int64_t>(item), " expected)");
    return from_buffer(t.raw_data().data(), shape, dt);
  }
  auto check = [&](int have) {
    TS_CHECK(have == n, where, ": tensor '", t.name(), "' has ", have, " values for shape ", shape_str(shape));
  };
  switch (t.data_type()) {
    case P::FLOAT: check(t.float_data_size()); return from_buffer(t.float_data().data(), shape, dt);
    case P::DOUBLE: check(t.double_data_size()); return from_buffer(t.double_data().data(), shape, dt);
    case P::INT64: check(t.int64_data_size()); return from_buffer(t.int64_data().data(), shape, dt);
    case P::INT32:
    case P::INT8:
    case P::UINT8:
    case P::BOOL:
    case P::FLOAT16:
    case P::BFLOAT16: {
      check(t.int32_data_size());
      Tensor wide = from_buffer(t.int32_data().data(), shape, DType::I32);
      if (dt == DType::F16 || dt == DType::BF16) {  // stored as raw 16-bit patterns
        std::vector<uint16_t> bits(t.int32_data().begin(), t.int32_data().end());
        return from_buffer(bits.data(), shape, dt);
      }
      return wide.to(dt);
    }
    default: TS_ERROR(where, ": tensor '", t.name(), "' has no data");
  }
}

// A value while interpreting: a tensor, and for small integer tensors their
// values on the host (sizes, axes, shape arithmetic).
struct Val {
  Tensor t;
  std::optional<std::vector<int64_t>> host;
  Shape host_shape;  // shape of `host` (0-D or 1-D)
};

class Interpreter {
 public:
  Interpreter(const onnx::GraphProto& g, const std::map<std::string, Tensor>& weights, std::string what)
      : g_(g), weights_(weights), what_(std::move(what)) {
    // Host values of small integer initializers, read here, before tracing.
    for (const auto& [name, t] : weights_) initial_[name] = constant_val(t);
  }

  TensorList operator()(const TensorList& inputs, const std::vector<std::string>& input_names) {
    env_ = initial_;
    for (size_t i = 0; i < inputs.size(); ++i) env_[input_names[i]] = Val{inputs[i], std::nullopt, {}};
    for (const onnx::NodeProto& n : g_.node()) run(n);
    TensorList outs;
    TS_CHECK(g_.output_size() > 0, what_, ": the graph has no outputs");
    for (const auto& o : g_.output()) {
      auto it = env_.find(o.name());
      TS_CHECK(it != env_.end(), what_, ": graph output '", o.name(), "' is not computed by any node");
      outs.push_back(tensor_of(it->second));
    }
    return outs;
  }

 private:
  static Val constant_val(const Tensor& t) {
    Val v{t, std::nullopt, {}};
    if (t.dtype() == DType::I64 && t.dim() <= 1 && t.numel() <= 64) {
      ops::RecorderGuard not_traced(nullptr);  // reading a constant is not part of the graph
      v.host = t.contiguous().to_vector<int64_t>();
      v.host_shape = t.shape();
    }
    return v;
  }
  static Val host_val(std::vector<int64_t> v, bool scalar = false) {
    Val r;
    r.host_shape = scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())};
    r.host = std::move(v);
    return r;
  }

  // A node's problems, and the errors of the ops it runs, name the node (run()).
  [[noreturn]] static void fail(const std::string& msg) { throw Error(msg); }
  std::string node_context() const {
    return detail::str(what_, ": node '", node_->name(), "' (", node_->op_type(), ", opset ", kOnnxOpset, "): ");
  }
  const std::string& input_name(int i) const {
    if (i >= node_->input_size() || node_->input(i).empty()) fail("input " + std::to_string(i) + " is missing");
    return node_->input(i);
  }
  const std::string& output_name(int i) const {
    if (i >= node_->output_size() || node_->output(i).empty()) fail("output " + std::to_string(i) + " is missing");
    return node_->output(i);
  }
  const Val& get(const std::string& name, const std::string& use) {
    auto it = env_.find(name);
    if (it == env_.end()) fail("input '" + name + "' (" + use + ") is not defined before it is used");
    return it->second;
  }
  // Tensor form (materializing host values as constants).
  Tensor tensor_of(const Val& v) {
    if (v.t.defined()) return v.t;
    return tessera::tensor(*v.host, v.host_shape);
  }
  Tensor in(size_t i) { return tensor_of(get(input_name(static_cast<int>(i)), "input " + std::to_string(i))); }
  bool has_in(size_t i) const { return static_cast<int>(i) < node_->input_size() && !node_->input(i).empty(); }
  std::vector<int64_t> host(size_t i) {
    const Val& v = get(input_name(static_cast<int>(i)), "input " + std::to_string(i));
    if (v.host) return *v.host;
    fail("input " + std::to_string(i) + " must be a constant or computed from shapes (it holds sizes or axes)");
  }
  // A host input that holds one value (a start, a limit, a diagonal).
  int64_t host_scalar(size_t i) {
    auto v = host(i);
    if (v.size() != 1) fail("input " + std::to_string(i) + " must hold one value, got " + std::to_string(v.size()));
    return v[0];
  }
  const onnx::AttributeProto* attr(const char* k) const {
    for (const auto& a : node_->attribute())
      if (a.name() == k) return &a;
    return nullptr;
  }
  int64_t attr_i(const char* k, std::optional<int64_t> dflt = {}) const {
    const auto* a = attr(k);
    if (!a) {
      if (!dflt) fail(std::string("attribute '") + k + "' is missing");
      return *dflt;
    }
    if (a->type() != onnx::AttributeProto::INT) fail(std::string("attribute '") + k + "' must be an int");
    return a->i();
  }
  double attr_f(const char* k, double dflt) const {
    const auto* a = attr(k);
    if (!a) return dflt;
    if (a->type() != onnx::AttributeProto::FLOAT) fail(std::string("attribute '") + k + "' must be a float");
    return a->f();
  }
  std::vector<int64_t> attr_ints(const char* k, std::vector<int64_t> dflt = {}) const {
    const auto* a = attr(k);
    if (!a) return dflt;
    if (a->type() != onnx::AttributeProto::INTS) fail(std::string("attribute '") + k + "' must be a list of ints");
    return {a->ints().begin(), a->ints().end()};
  }
  std::string attr_s(const char* k, const std::string& dflt) const {
    const auto* a = attr(k);
    if (!a) return dflt;
    if (a->type() != onnx::AttributeProto::STRING) fail(std::string("attribute '") + k + "' must be a string");
    return a->s();
  }
  void unsupported_attr(const char* k) const {
    if (attr(k)) fail(std::string("attribute '") + k + "' is not supported");
  }
  int64_t axis(int64_t a, int64_t rank) const {
    if (a < -rank || a >= rank) fail("axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    return a < 0 ? a + rank : a;
  }
  void set(size_t i, Tensor t) {
    if (static_cast<int>(i) < node_->output_size() && !node_->output(i).empty()) env_[node_->output(i)] = Val{std::move(t), std::nullopt, {}};
  }
  void set_host(size_t i, std::vector<int64_t> v, bool scalar = false) {
    // Host values are sizes and axes: a few per tensor dimension.
    if (v.size() > kMaxHostValues)
      fail("a shape computation produced " + std::to_string(v.size()) + " values; at most " +
           std::to_string(kMaxHostValues) + " are supported");
    if (static_cast<int>(i) < node_->output_size()) env_[node_->output(i)] = host_val(std::move(v), scalar);
  }
  bool all_host() {
    for (int i = 0; i < node_->input_size(); ++i)
      if (!node_->input(i).empty() && !get(node_->input(i), "input").host) return false;
    return node_->input_size() > 0;
  }

  // Elementwise arithmetic on host integers (shape computations).
  bool host_binary(const std::string& type) {
    if (!all_host() || node_->input_size() != 2) return false;
    auto a = host(0), b = host(1);
    const Val& va = get(node_->input(0), "a");
    const Val& vb = get(node_->input(1), "b");
    size_t n = std::max(a.size(), b.size());
    if ((a.size() != n && a.size() != 1) || (b.size() != n && b.size() != 1)) return false;
    std::vector<int64_t> r(n);
    for (size_t i = 0; i < n; ++i) {
      int64_t x = a[a.size() == 1 ? 0 : i], y = b[b.size() == 1 ? 0 : i];
      bool overflow = false;
      if (type == "Add") overflow = __builtin_add_overflow(x, y, &r[i]);
      else if (type == "Sub") overflow = __builtin_sub_overflow(x, y, &r[i]);
      else if (type == "Mul") overflow = __builtin_mul_overflow(x, y, &r[i]);
      else if (type == "Div") {
        if (y == 0) fail("integer division by zero in a shape computation");
        overflow = x == INT64_MIN && y == -1;
        if (!overflow) r[i] = x / y;
      } else return false;
      if (overflow)
        fail("the shape computation " + std::to_string(x) + " " + type + " " + std::to_string(y) +
             " does not fit in a 64-bit integer");
    }
    set_host(0, r, va.host_shape.empty() && vb.host_shape.empty());
    return true;
  }

  void run(const onnx::NodeProto& n) {
    node_ = &n;
    try {
      run_node(n);
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(node_context() + e.what());
    } catch (const Error& e) {
      throw Error(node_context() + e.what());
    } catch (const std::exception& e) {  // protobuf or the standard library on a malformed node
      throw Error(node_context() + e.what());
    }
  }

  void run_node(const onnx::NodeProto& n) {
    const std::string& op = n.op_type();
    if (!n.domain().empty() && n.domain() != "ai.onnx") fail("operators of domain '" + n.domain() + "' are not supported");
    using namespace ops;
    auto un = [&](Tensor (*f)(const Tensor&)) { set(0, f(in(0))); };
    if (op == "Identity" || op == "Dropout") {
      if (op == "Dropout" && has_in(2) && get(n.input(2), "training_mode").host) {
        auto tm = host(2);
        if (!tm.empty() && tm[0]) fail("training_mode=true is not supported");
      }
      const Val& v = get(input_name(0), "input");
      env_[output_name(0)] = v;
      return;
    }
    if (op == "Constant") {
      const auto* a = attr("value");
      if (!a || a->type() != onnx::AttributeProto::TENSOR) fail("only the 'value' tensor form is supported");
      env_[output_name(0)] = constant_val(from_proto(a->t(), what_));
      return;
    }
    if (op == "Shape") {
      Tensor x = in(0);
      std::vector<int64_t> s(x.shape().begin(), x.shape().end());
      int64_t r = x.dim();
      int64_t start = attr_i("start", 0), end = attr_i("end", r);
      start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
      end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
      set_host(0, std::vector<int64_t>(s.begin() + start, s.begin() + std::max(start, end)));
      return;
    }
    if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && host_binary(op)) return;
    if (op == "Cast" && all_host()) {
      int to = static_cast<int>(attr_i("to"));
      if (to == P::INT64 || to == P::INT32) {
        env_[output_name(0)] = get(input_name(0), "input");
        return;
      }
    }
    if (op == "Gather" && all_host()) {
      auto data = host(0), idx = host(1);
      const Val& vi = get(input_name(1), "indices");
      std::vector<int64_t> r;
      for (int64_t i : idx) {
        int64_t k = i < 0 ? i + static_cast<int64_t>(data.size()) : i;
        if (k < 0 || k >= static_cast<int64_t>(data.size())) fail("index " + std::to_string(i) + " is out of range");
        r.push_back(data[k]);
      }
      set_host(0, r, vi.host_shape.empty());
      return;
    }
    if ((op == "Unsqueeze" || op == "Squeeze") && all_host() && get(input_name(0), "input").host_shape.size() <= 1) {
      auto v = host(0);
      set_host(0, v, op == "Squeeze");
      return;
    }
    if (op == "Concat" && all_host()) {
      std::vector<int64_t> r;
      for (int i = 0; i < n.input_size(); ++i) {
        auto v = host(i);
        r.insert(r.end(), v.begin(), v.end());
      }
      set_host(0, r);
      return;
    }
    if (op == "Slice" && all_host()) {
      auto v = host(0);
      int64_t s = host_scalar(1), e = host_scalar(2), step = has_in(4) ? host_scalar(4) : 1;
      int64_t len = static_cast<int64_t>(v.size());
      if (step != 1) fail("a host slice needs step 1");
      s = std::clamp<int64_t>(s < 0 ? s + len : s, 0, len);
      e = std::clamp<int64_t>(e < 0 ? e + len : e, 0, len);
      set_host(0, std::vector<int64_t>(v.begin() + s, v.begin() + std::max(s, e)));
      return;
    }

    // ---- tensor ops -----------------------------------------------------------------
    if (op == "Relu") return un(relu);
    if (op == "Sigmoid") return un(sigmoid);
    if (op == "Tanh") return un(tanh);
    if (op == "Exp") return un(exp);
    if (op == "Log") return un(log);
    if (op == "Sqrt") return un(sqrt);
    if (op == "Erf") return un(erf);
    if (op == "Neg") return un(neg);
    if (op == "Abs") return un(abs);
    if (op == "Reciprocal") return un(reciprocal);
    if (op == "Floor") return un(floor);
    if (op == "Ceil") return un(ceil);
    if (op == "Not") return un(logical_not);
    if (op == "Sin") return un(sin);
    if (op == "Cos") return un(cos);
    if (op == "Tan") return un(tan);
    if (op == "Round") return un(round);  // half to even, as ONNX
    if (op == "Sign") return un(sign);
    if (op == "Add") return set(0, add(in(0), in(1)));
    if (op == "Sub") return set(0, sub(in(0), in(1)));
    if (op == "Mul") return set(0, mul(in(0), in(1)));
    if (op == "Div") return set(0, div(in(0), in(1)));
    if (op == "Pow") return set(0, pow(in(0), in(1)));
    if (op == "Max" && n.input_size() == 2) return set(0, maximum(in(0), in(1)));
    if (op == "Min" && n.input_size() == 2) return set(0, minimum(in(0), in(1)));
    if (op == "Equal") return set(0, eq(in(0), in(1)));
    if (op == "Less") return set(0, lt(in(0), in(1)));
    if (op == "Greater") return set(0, gt(in(0), in(1)));
    if (op == "LessOrEqual") return set(0, le(in(0), in(1)));
    if (op == "GreaterOrEqual") return set(0, ge(in(0), in(1)));
    if (op == "Xor") return set(0, logical_xor(in(0), in(1)));
    if (op == "And") return set(0, logical_and(in(0), in(1)));
    if (op == "Or") return set(0, logical_or(in(0), in(1)));
    if (op == "Where") return set(0, where(in(0), in(1), in(2)));
    if (op == "MatMul") return set(0, matmul(in(0), in(1)));
    if (op == "LeakyRelu") return set(0, leaky_relu(in(0), attr_f("alpha", 0.01)));
    if (op == "Elu") return set(0, elu(in(0), attr_f("alpha", 1.0)));
    if (op == "Softplus") return set(0, softplus(in(0)));
    if (op == "Cast") return set(0, to_dtype(in(0), tessera_type(static_cast<int>(attr_i("to")), what_)));
    if (op == "Clip") {
      Tensor x = in(0);
      std::optional<Scalar> lo, hi;
      if (has_in(1)) lo = in(1).item();
      if (has_in(2)) hi = in(2).item();
      if (!lo && !hi) return set(0, x);
      return set(0, clamp(x, lo, hi));
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      Tensor x = in(0);
      int64_t ax = axis(attr_i("axis", -1), x.dim());
      return set(0, op == "Softmax" ? softmax(x, ax) : log_softmax(x, ax));
    }
    if (op == "Gemm") {
      Tensor a = in(0), b = in(1);
      bool ta = attr_i("transA", 0), tb = attr_i("transB", 0);
      double alpha = attr_f("alpha", 1.0), beta = attr_f("beta", 1.0);
      if (a.dim() != 2 || b.dim() != 2) fail("A and B must be matrices");
      if (ta) a = a.transpose(0, 1);
      Tensor c = has_in(2) ? in(2) : Tensor();
      if (tb && alpha == 1.0 && (beta == 1.0 || !c.defined()) && (!c.defined() || c.dim() == 1))
        return set(0, linear(a, b, c));  // the common case: x @ W^T + b
      if (tb) b = b.transpose(0, 1);
      Tensor y = mul(matmul(a, b), alpha);
      if (c.defined()) y = add(y, mul(c, beta));
      return set(0, y);
    }
    if (op == "Flatten") {
      Tensor x = in(0);
      int64_t ax = attr_i("axis", 1);
      ax = ax < 0 ? ax + x.dim() : ax;
      if (ax < 0 || ax > x.dim()) fail("axis out of range");
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < x.dim(); ++d) (d < ax ? outer : inner) *= x.shape()[d];
      return set(0, reshape(x, {outer, inner}));
    }
    if (op == "Reshape") {
      Tensor x = in(0);
      auto shape = host(1);
      bool allowzero = attr_i("allowzero", 0);
      for (size_t d = 0; d < shape.size(); ++d)
        if (shape[d] == 0 && !allowzero) {
          if (static_cast<int64_t>(d) >= x.dim()) fail("shape entry 0 copies a dim the input does not have");
          shape[d] = x.shape()[d];
        }
      return set(0, reshape(x, shape));
    }
    if (op == "Expand") {
      Tensor x = in(0);
      Shape s = broadcast_shapes(x.shape(), host(1), "Expand");
      return set(0, expand(x, s));
    }
    if (op == "Transpose") {
      Tensor x = in(0);
      auto perm = attr_ints("perm");
      if (perm.empty())
        for (int64_t d = x.dim() - 1; d >= 0; --d) perm.push_back(d);
      return set(0, permute(x, perm));
    }
    if (op == "Unsqueeze" || op == "Squeeze") {
      Tensor x = in(0);
      std::vector<int64_t> axes = has_in(1) ? host(1) : std::vector<int64_t>{};
      if (op == "Unsqueeze") {
        int64_t r = x.dim() + static_cast<int64_t>(axes.size());
        for (auto& a : axes) a = axis(a, r);
        std::sort(axes.begin(), axes.end());
        for (int64_t a : axes) x = unsqueeze(x, a);
        return set(0, x);
      }
      if (axes.empty()) return set(0, squeeze(x));
      for (auto& a : axes) a = axis(a, x.dim());
      std::sort(axes.rbegin(), axes.rend());
      for (int64_t a : axes) x = squeeze(x, a);
      return set(0, x);
    }
    if (op == "Concat") {
      TensorList ts;
      for (int i = 0; i < n.input_size(); ++i) ts.push_back(in(i));
      if (ts.empty()) fail("Concat needs at least one input");
      return set(0, cat(ts, axis(attr_i("axis"), ts.at(0).dim())));
    }
    if (op == "Split") {
      Tensor x = in(0);
      int64_t ax = axis(attr_i("axis", 0), x.dim());
      TensorList parts;
      if (has_in(1)) {
        parts = split(x, host(1), ax);
      } else {
        int64_t k = n.output_size();
        if (k == 0) fail("Split needs at least one output");
        if (x.shape()[ax] % k) fail("the dim does not split evenly into " + std::to_string(k) + " outputs");
        parts = split(x, x.shape()[ax] / k, ax);
      }
      if (static_cast<int>(parts.size()) != n.output_size()) fail("split into a different number of outputs than declared");
      for (size_t i = 0; i < parts.size(); ++i) set(i, parts[i]);
      return;
    }
    if (op == "Slice") {
      Tensor x = in(0);
      auto starts = host(1), ends = host(2);
      std::vector<int64_t> axes = has_in(3) ? host(3) : std::vector<int64_t>{};
      std::vector<int64_t> steps = has_in(4) ? host(4) : std::vector<int64_t>{};
      if (axes.empty())
        for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
      if (steps.empty()) steps.assign(starts.size(), 1);
      if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
        fail("starts, ends, axes and steps differ in length");
      for (size_t i = 0; i < starts.size(); ++i) {
        int64_t a = axis(axes[i], x.dim()), len = x.shape()[a];
        if (steps[i] <= 0) fail("only positive steps are supported");
        int64_t s = std::clamp<int64_t>(starts[i] < 0 ? starts[i] + len : starts[i], 0, len);
        int64_t e = std::clamp<int64_t>(ends[i] < 0 ? ends[i] + len : ends[i], 0, len);
        x = slice(x, a, s, std::max(s, e), steps[i]);
      }
      return set(0, x);
    }
    if (op == "Gather") {
      Tensor data = in(0), idx = in(1);
      int64_t ax = axis(attr_i("axis", 0), data.dim());
      if (ax == 0 && data.dim() == 2 && idx.dtype() == DType::I64 && !get(input_name(1), "indices").host)
        return set(0, embedding(data, idx));
      if (idx.dim() == 0) return set(0, select(data, ax, idx.item().to_int()));
      Tensor flat = index_select(data, ax, idx.reshape({-1}));
      std::vector<int64_t> s(data.shape().begin(), data.shape().begin() + ax);
      s.insert(s.end(), idx.shape().begin(), idx.shape().end());
      s.insert(s.end(), data.shape().begin() + ax + 1, data.shape().end());
      return set(0, reshape(flat, s));
    }
    if (op == "ConstantOfShape") {
      auto shape = host(0);
      if (const auto* a = attr("value")) {
        if (a->type() != onnx::AttributeProto::TENSOR) fail("attribute 'value' must be a tensor");
        Tensor value = from_proto(a->t(), what_);  // the file's constant: read on the host, not traced
        if (value.numel() != 1) fail("'value' must hold one element");
        return set(0, full(shape, value.item(), value.dtype()));
      }
      return set(0, full(shape, 0.0, DType::F32));  // ONNX's default: a float 0
    }
    if (op == "Range") {
      if (all_host()) return set(0, arange(host_scalar(0), host_scalar(1), host_scalar(2), DType::I64));
      Tensor s = in(0), e = in(1), d = in(2);
      return set(0, arange(s.item(), e.item(), d.item(), s.dtype()));
    }
    if (op == "Trilu") {
      Tensor x = in(0);
      int64_t k = has_in(1) ? host_scalar(1) : 0;
      return set(0, attr_i("upper", 1) ? triu(x, k) : tril(x, k));
    }
    if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
      Tensor x = in(0);
      std::vector<int64_t> axes = op == "ReduceSum" ? (has_in(1) ? host(1) : std::vector<int64_t>{}) : attr_ints("axes");
      for (auto& a : axes) a = axis(a, x.dim());
      bool keep = attr_i("keepdims", 1);
      if (axes.empty() && attr_i("noop_with_empty_axes", 0)) return set(0, x);
      if (op == "ReduceMean") return set(0, mean(x, axes, keep));
      if (op == "ReduceSum") return set(0, sum(x, axes, keep));
      if (op == "ReduceProd") return set(0, prod(x, axes, keep));
      return set(0, op == "ReduceMax" ? amax(x, axes, keep) : amin(x, axes, keep));
    }
    if (op == "LayerNormalization") {
      Tensor x = in(0);
      int64_t ax = axis(attr_i("axis", -1), x.dim());
      if (n.output_size() > 1 && !n.output(1).empty()) fail("the Mean and InvStdDev outputs are not supported");
      std::vector<int64_t> shape(x.shape().begin() + ax, x.shape().end());
      return set(0, layer_norm(x, shape, in(1), has_in(2) ? in(2) : Tensor(), attr_f("epsilon", 1e-5)));
    }
    if (op == "BatchNormalization") {
      if (attr_i("training_mode", 0)) fail("training_mode=1 is not supported");
      return set(0, batch_norm(in(0), in(3), in(4), in(1), in(2), false, 0.1, attr_f("epsilon", 1e-5)));
    }
    if (op == "Conv" || op == "MaxPool" || op == "AveragePool") return conv_or_pool(op);
    if (op == "QuantizeLinear" || op == "DequantizeLinear") return qdq(op == "QuantizeLinear");
    if (op == "GlobalAveragePool") {
      Tensor x = in(0);
      if (x.dim() != 4) fail("only 4-D inputs are supported");
      return set(0, adaptive_avg_pool2d(x, {1, 1}));
    }
    fail("this operator is not supported by Tessera's importer");
  }

  // QDQ: per-tensor (de)quantization of u8/s8 activations as Tessera's ops;
  // per-axis or int32 dequantization (weights, biases: initializers, folded to
  // constants) as float arithmetic.
  void qdq(bool quantize) {
    Tensor x = in(0), scale = in(1);
    Tensor zp = has_in(2) ? in(2) : Tensor();
    if (scale.dtype() != DType::F32) fail("only f32 scales are supported");
    if (zp.defined() && zp.numel() != scale.numel()) fail("the zero point and the scale differ in size");
    if (!quantize && zp.defined() && zp.dtype() != x.dtype())
      fail(std::string("the zero point is ") + dtype_name(zp.dtype()) + " but the input is " + dtype_name(x.dtype()) +
           "; they must be of one type");
    if (scale.numel() == 1) {
      // Initializers: read here (they are not computed from the inputs).
      const double s = scale.to_vector<float>()[0];
      int64_t z = 0;
      if (zp.defined() && zp.dtype() == DType::U8) z = zp.to_vector<uint8_t>()[0];
      else if (zp.defined() && zp.dtype() == DType::I8) z = zp.to_vector<int8_t>()[0];
      else if (zp.defined()) fail("a per-tensor zero point must be u8 or s8");
      if (quantize) {
        DType t = zp.defined() ? zp.dtype() : DType::U8;
        if (t != DType::U8 && t != DType::I8) fail("only u8 and s8 quantization is supported");
        return set(0, ops::quantize_per_tensor(x, s, z, t));
      }
      if (x.dtype() == DType::U8 || x.dtype() == DType::I8) return set(0, ops::dequantize_per_tensor(x, s, z));
    }
    if (quantize) fail("per-axis QuantizeLinear is not supported (only per-tensor activations)");
    const int64_t ax = axis(attr_i("axis", 1), x.dim());
    if (scale.dim() != 1 || scale.size(0) != x.size(ax))
      fail("a per-axis scale must be 1-D with one value per index of the axis");
    Shape b(x.dim(), 1);
    b[ax] = scale.size(0);
    Tensor v = x.to(DType::F32);
    if (zp.defined()) v = ops::sub(v, zp.to(DType::F32).reshape(b));
    set(0, ops::mul(v, scale.reshape(b)));
  }

  void conv_or_pool(const std::string& op) {
    Tensor x = in(0);
    int64_t sp = x.dim() - 2;
    if (sp != 1 && sp != 2) fail("only 1-D and 2-D spatial inputs are supported");
    if (op == "Conv" && in(1).dim() != sp + 2) fail("the weight must have the input's rank");
    std::vector<int64_t> kernel = op == "Conv" ? std::vector<int64_t>(in(1).shape().begin() + 2, in(1).shape().end())
                                               : attr_ints("kernel_shape");
    if (static_cast<int64_t>(kernel.size()) != sp) fail("kernel_shape does not match the input's rank");
    auto strides = attr_ints("strides", std::vector<int64_t>(sp, 1));
    auto dil = attr_ints("dilations", std::vector<int64_t>(sp, 1));
    auto pads = attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
    if (strides.size() != static_cast<size_t>(sp) || dil.size() != static_cast<size_t>(sp) ||
        pads.size() != static_cast<size_t>(2 * sp))
      fail("strides, dilations or pads do not match the input's rank");
    for (int64_t i = 0; i < sp; ++i)
      if (strides[i] <= 0 || dil[i] <= 0 || kernel[i] <= 0)
        fail("kernel_shape, strides and dilations must be positive");
    std::string auto_pad = attr_s("auto_pad", "NOTSET");
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      for (int64_t i = 0; i < sp; ++i) {
        // The output covers ceil(in / stride) windows; pad what they reach past the input.
        int64_t in_sz = x.shape()[2 + i], out = in_sz / strides[i] + (in_sz % strides[i] != 0);
        int64_t reach = checked_add(checked_mul(std::max<int64_t>(out - 1, 0), strides[i], "auto_pad"),
                                    checked_add(checked_mul(dil[i], kernel[i] - 1, "auto_pad"), 1, "auto_pad"), "auto_pad");
        int64_t total = std::max<int64_t>(0, reach - in_sz);
        int64_t small = total / 2, big = total - small;
        pads[i] = auto_pad == "SAME_UPPER" ? small : big;
        pads[sp + i] = auto_pad == "SAME_UPPER" ? big : small;
      }
    } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
      fail("auto_pad '" + auto_pad + "' is not supported");
    }
    // Asymmetric padding: pad explicitly, then run with none.
    bool symmetric = true;
    for (int64_t i = 0; i < sp; ++i) symmetric = symmetric && pads[i] == pads[sp + i];
    std::vector<int64_t> sym(pads.begin(), pads.begin() + sp);
    if (!symmetric) {
      std::vector<int64_t> p;  // torch order: last dim first
      for (int64_t i = sp - 1; i >= 0; --i) {
        p.push_back(pads[i]);
        p.push_back(pads[sp + i]);
      }
      double fill = op == "MaxPool" ? -INFINITY : 0.0;
      if (op == "AveragePool" && attr_i("count_include_pad", 0) == 0) fail("asymmetric padding with count_include_pad=0 is not supported");
      x = ops::pad(x, p, "constant", fill);
      sym.assign(sp, 0);
    }
    if (op == "Conv") {
      Tensor w = in(1), b = has_in(2) ? in(2) : Tensor();
      int64_t groups = attr_i("group", 1);
      if (sp == 1) return set(0, ops::conv1d(x, w, b, strides[0], sym[0], dil[0], groups));
      ops::Conv2dOptions o;
      o.stride = strides;
      o.padding = sym;
      o.dilation = dil;
      o.groups = groups;
      return set(0, ops::conv2d(x, w, b, o));
    }
    if (sp != 2) fail("only 2-D pooling is supported");
    bool ceil_mode = attr_i("ceil_mode", 0);
    if (op == "MaxPool") {
      if (node_->output_size() > 1 && !node_->output(1).empty()) fail("the Indices output is not supported");
      return set(0, ops::max_pool2d(x, kernel, strides, sym, dil, ceil_mode));
    }
    return set(0, ops::avg_pool2d(x, kernel, strides, sym, ceil_mode, attr_i("count_include_pad", 0) != 0));
  }

  const onnx::GraphProto& g_;
  const std::map<std::string, Tensor>& weights_;
  std::string what_;
  std::unordered_map<std::string, Val> env_, initial_;
  const onnx::NodeProto* node_ = nullptr;
};

}  // namespace

Graph import_onnx_bytes(const std::string& bytes, const std::string& what) {
  onnx::ModelProto m;
  TS_CHECK(bytes.size() < (size_t{1} << 31), what, ": ", bytes.size(), " bytes; ONNX models over 2 GiB are not supported");
  TS_CHECK(m.ParseFromString(bytes), what, ": not a valid ONNX file (protobuf parsing failed; truncated or not ONNX?)");
  TS_CHECK(m.has_graph(), what, ": the model has no graph");
  int64_t opset = -1;
  for (const auto& o : m.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  TS_CHECK(opset >= kMinOpset && opset <= kOnnxOpset, what, ": opset ", opset, " is not supported (Tessera reads opsets ",
           kMinOpset, " to ", kOnnxOpset, "; re-export with opset_version=", kOnnxOpset, ")");
  const onnx::GraphProto& g = m.graph();
  std::map<std::string, Tensor> weights;
  NamedTensors params;
  for (const auto& t : g.initializer()) {
    TS_CHECK(!t.name().empty() && !weights.count(t.name()), what, ": initializer names must be unique and non-empty ('", t.name(), "')");
    Tensor w = from_proto(t, what);
    weights[t.name()] = w;
    params.push_back({t.name(), w});
  }
  // Inputs that are not initializers; dim_params become dynamic dimensions.
  TensorList examples;
  std::vector<std::string> names;
  CaptureOptions co;
  std::map<std::string, int64_t> sizes;
  for (const auto& vi : g.input()) {
    if (weights.count(vi.name())) continue;
    std::string where = what + ": input '" + vi.name() + "'";
    TS_CHECK(vi.type().has_tensor_type(), where, " is not a tensor");
    const auto& tt = vi.type().tensor_type();
    DType dt = tessera_type(tt.elem_type(), where);
    Shape shape;
    int input_index = static_cast<int>(examples.size());
    TS_CHECK(tt.has_shape(), where, " has no shape; Tessera needs the rank of every input");
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      if (dim.has_dim_value()) {
        TS_CHECK(dim.dim_value() >= 0 && dim.dim_value() < (int64_t{1} << 32), where, " has a bad size ", dim.dim_value());
        shape.push_back(dim.dim_value());
        continue;
      }
      std::string sym = dim.has_dim_param() && !dim.dim_param().empty() ? dim.dim_param()
                                                                          : vi.name() + "_dim" + std::to_string(d);
      if (!sizes.count(sym)) sizes[sym] = 3 + 2 * static_cast<int64_t>(sizes.size());
      shape.push_back(sizes[sym]);
      co.dynamic.push_back({input_index, d, sym});
    }
    try {  // declared sizes are checked like any tensor's (Note [Sizes from outside])
      examples.push_back(is_floating(dt) ? ops::randn(shape).to(dt) : zeros(shape, dt));
    } catch (const OutOfMemoryError& e) {
      throw OutOfMemoryError(where + " (declared shape " + shape_str(shape) + "): " + e.what());
    } catch (const Error& e) {
      TS_ERROR(where, " (declared shape ", shape_str(shape), "): ", e.what());
    }
    names.push_back(vi.name());
  }
  co.input_names = names;
  Interpreter interp(g, weights, what);
  return capture([&](const TensorList& in) { return interp(in, names); }, examples, params, co);
}

Graph import_onnx(const std::string& path) {
  std::vector<char> bytes = io::read_file(path, size_t{1} << 31);
  return import_onnx_bytes(std::string(bytes.begin(), bytes.end()), path);
}

}  // namespace tessera::compile
