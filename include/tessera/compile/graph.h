#pragma once
// The graph IR: a function as a list of op calls in SSA form.
//
// A Value is defined once: a graph input, a parameter (a named tensor of the
// model, bound by reference so training updates are seen), a constant (a
// tensor frozen into the graph), or an output of a Node. A Node is one call of
// an op of ops.def with its attributes (ops/attrs.h), exactly as the op
// function received them, so running a node is `ops::invoke`. Nodes are kept in
// a valid execution order. Shapes may depend on dynamic dimensions (SymInt).
//
// Passes rewrite graphs through the few mutators below and leave the rest
// (use lists, order) to be recomputed: graphs are small, clarity wins.
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/ops/attrs.h"
#include "tessera/ops/capture.h"

namespace tessera::compile {

// A size that may depend on the graph's dynamic dimensions (symbols s0, s1,
// ...): a multilinear polynomial c + c0*s0 + c1*s1 + c01*s0*s1 + ... with
// integer coefficients. Static sizes are the constant polynomial.
class SymInt {
 public:
  SymInt(int64_t c = 0);
  static SymInt symbol(int index);

  bool is_static() const;
  int64_t static_value() const;  // only for a static size
  int64_t eval(std::span<const int64_t> symbols) const;
  bool depends_on(int symbol) const;
  // "B*T + 1", with `names` for the symbols.
  std::string str(const std::vector<std::string>& names) const;
  bool operator==(const SymInt& o) const { return terms_ == o.terms_; }

  // (symbol mask, coefficient), sorted by mask, no zero coefficients.
  using Term = std::pair<uint32_t, int64_t>;
  const std::vector<Term>& terms() const { return terms_; }
  static SymInt from_terms(std::vector<Term> terms);

 private:
  std::vector<Term> terms_;
};
using SymShape = std::vector<SymInt>;
SymShape static_shape(IntArrayRef s);
Shape eval_shape(const SymShape& s, std::span<const int64_t> symbols);

struct Node;

enum class ValueKind : uint8_t { kInput, kParameter, kConstant, kNode };
const char* kind_name(ValueKind k);

struct Value {
  int id = -1;
  ValueKind kind = ValueKind::kNode;
  DType dtype = DType::F32;
  SymShape shape;
  std::string name;           // inputs and parameters: their name; others: empty
  Tensor data;                // parameters and constants
  Node* producer = nullptr;   // kNode: the node, and which of its outputs
  int index = 0;
  // The shape depends on the data (masked_select, nonzero, unique, and what
  // is computed from them): `shape` is the traced one, not a promise.
  bool data_dependent_shape = false;
};

struct Node {
  int id = -1;
  ops::OpId op{};
  std::vector<Value*> inputs;   // null: an optional tensor argument left out
  std::vector<Value*> outputs;
  ops::Attrs attrs;
  // Integer attributes that depend on dynamic dimensions: for attribute
  // `name`, one SymInt per element (one for an int, n for an int list). The
  // value in `attrs` is the one at the traced sizes.
  struct SymAttr {
    std::string name;
    std::vector<SymInt> values;
    bool is_list = false;
  };
  std::vector<SymAttr> sym_attrs;
  std::string scope;  // module path when traced ("blocks.0.attn"), for messages
  std::string_view op_name() const { return ops::op_name(op); }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;
  // A deep copy (values and nodes; tensors shared).
  Graph clone() const;

  Value* add_input(std::string name, DType dtype, SymShape shape);
  Value* add_parameter(std::string name, const Tensor& t);
  Value* add_constant(const Tensor& t);
  // Appends a node (or inserts it before `before`); its outputs get the given
  // dtypes and shapes.
  Node* add_node(ops::OpId op, std::vector<Value*> inputs, ops::Attrs attrs,
                 const std::vector<std::pair<DType, SymShape>>& outputs, Node* before = nullptr);
  void set_outputs(std::vector<Value*> outs) { outputs_ = std::move(outs); }

  // Every use of `from` (node inputs and graph outputs) becomes `to`.
  void replace_uses(Value* from, Value* to);
  // Removes nodes whose outputs have no uses, and values nothing refers to.
  // Returns the number of nodes removed.
  int remove_unused();
  // Drops `n` (its outputs must be unused).
  void erase(Node* n);
  // Numbers values 0, 1, ... in definition order (inputs, parameters,
  // constants, node outputs), so dumps of equal graphs are equal.
  void renumber();

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Value*>& mutable_inputs() { return inputs_; }
  // Nodes in execution order.
  std::vector<Node*> nodes() const;
  std::vector<Value*> parameters() const;
  std::vector<Value*> constants() const;
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  // Node and graph-output uses of each value, by value id.
  std::vector<std::vector<Node*>> uses() const;
  std::vector<bool> is_output() const;
  int num_value_ids() const { return next_value_id_; }

  // Dynamic dimensions: symbol names ("B", "T").
  std::vector<std::string>& symbols() { return symbols_; }
  const std::vector<std::string>& symbols() const { return symbols_; }

 private:
  Value* new_value(ValueKind k);
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, outputs_;
  std::vector<std::string> symbols_;
  int next_value_id_ = 0, next_node_id_ = 0;
};

// The readable text form:
//   graph(%x: f32[B, 784]) {
//     %fc1.weight: f32[128, 784] = parameter
//     %3: f32[B, 128] = linear(%x, %fc1.weight, %fc1.bias)        # fc1
//     return (%7)
//   }
std::string dump(const Graph& g);
std::string value_str(const Value* v);  // "%3", "%x", "%fc1.weight"

// Checks the graph's invariants: every input of a node is defined before it
// (SSA, order), each value has one definition and belongs to this graph,
// outputs are defined, node ids are unique, symbolic attributes name real
// attributes, parameters and constants match their tensors' dtypes and
// shapes. Throws an Error naming the broken node and `after` (the pass that
// produced the graph).
void verify(const Graph& g, const std::string& after = "");

}  // namespace tessera::compile
