#pragma once
// An op's attributes: the non-tensor arguments of one call (dims, eps,
// strides, ...), by name. Ops publish them while a graph is being captured
// (TS_OP_ATTRS) and their invoker reads them back to run the op from a graph
// (docs/architecture.md), so the compiler and the exporters read every op the same
// way, without special cases.
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tessera/core/scalar.h"
#include "tessera/core/shape.h"

namespace tessera::ops {

// std::monostate is "none" (an optional argument left out).
using AttrValue = std::variant<std::monostate, bool, int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, Scalar, DType>;

namespace detail {
inline AttrValue to_attr(bool v) { return v; }
inline AttrValue to_attr(int v) { return static_cast<int64_t>(v); }
inline AttrValue to_attr(int64_t v) { return v; }
inline AttrValue to_attr(double v) { return v; }
inline AttrValue to_attr(const char* v) { return std::string(v); }
inline AttrValue to_attr(const std::string& v) { return v; }
inline AttrValue to_attr(IntArrayRef v) { return std::vector<int64_t>(v.begin(), v.end()); }
inline AttrValue to_attr(const std::vector<int64_t>& v) { return v; }
inline AttrValue to_attr(const std::vector<double>& v) { return v; }
inline AttrValue to_attr(const Scalar& v) { return v; }
inline AttrValue to_attr(DType v) { return v; }
template <typename T>
AttrValue to_attr(const std::optional<T>& v) {
  return v ? to_attr(*v) : AttrValue{};
}
}  // namespace detail

struct Attr {
  std::string name;
  AttrValue value;
  Attr(std::string n, AttrValue v) : name(std::move(n)), value(std::move(v)) {}
  template <typename T>
  Attr(const char* n, const T& v) : name(n), value(detail::to_attr(v)) {}
};

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<Attr> items) : items_(items) {}

  // Typed reads; a missing attribute or one of another type is an error that
  // names the op (`op`, set by the graph that owns these attributes).
  bool b(std::string_view name) const;
  int64_t i(std::string_view name) const;
  double f(std::string_view name) const;
  const std::string& s(std::string_view name) const;
  const std::vector<int64_t>& ints(std::string_view name) const;
  const std::vector<double>& floats(std::string_view name) const;
  Scalar scalar(std::string_view name) const;  // also accepts int, float and bool attributes
  DType dtype(std::string_view name) const;
  std::optional<int64_t> opt_i(std::string_view name) const;
  std::optional<double> opt_f(std::string_view name) const;
  std::optional<Scalar> opt_scalar(std::string_view name) const;
  std::optional<DType> opt_dtype(std::string_view name) const;
  bool has(std::string_view name) const;  // present and not none

  const AttrValue* find(std::string_view name) const;
  AttrValue* find(std::string_view name);
  void set(std::string_view name, AttrValue v);
  const std::vector<Attr>& items() const { return items_; }
  std::vector<Attr>& items() { return items_; }
  bool operator==(const Attrs& o) const;

 private:
  const AttrValue& get(std::string_view name) const;
  std::vector<Attr> items_;
};

// "[1, 2]", "0.5", "'tanh'", "f32", "none": the form graph dumps print.
std::string attr_str(const AttrValue& v);
bool attr_equal(const AttrValue& a, const AttrValue& b);

}  // namespace tessera::ops
