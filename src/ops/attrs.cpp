#include "tessera/ops/attrs.h"

#include <cmath>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::ops {
namespace {

const char* kind_name(const AttrValue& v) {
  static const char* names[] = {"none", "bool", "int", "float", "string", "int list", "float list", "scalar", "dtype"};
  return names[v.index()];
}

template <typename T>
const T& as(const AttrValue& v, std::string_view name, const char* want) {
  const T* p = std::get_if<T>(&v);
  TS_CHECK(p != nullptr, "attribute '", name, "' should be ", want, ", got ", kind_name(v), " ", attr_str(v));
  return *p;
}

std::string num_str(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::ostringstream os;
  os.precision(17);
  os << d;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";  // keep floats distinguishable from ints
  return s;
}

}  // namespace

const AttrValue* Attrs::find(std::string_view name) const {
  for (const Attr& a : items_)
    if (a.name == name) return &a.value;
  return nullptr;
}
AttrValue* Attrs::find(std::string_view name) {
  for (Attr& a : items_)
    if (a.name == name) return &a.value;
  return nullptr;
}
void Attrs::set(std::string_view name, AttrValue v) {
  if (AttrValue* p = find(name)) *p = std::move(v);
  else items_.emplace_back(std::string(name), std::move(v));
}
bool Attrs::has(std::string_view name) const {
  const AttrValue* v = find(name);
  return v != nullptr && !std::holds_alternative<std::monostate>(*v);
}
const AttrValue& Attrs::get(std::string_view name) const {
  const AttrValue* v = find(name);
  if (v == nullptr) {
    std::string known;
    for (const Attr& a : items_) known += (known.empty() ? "" : ", ") + a.name;
    TS_ERROR("attribute '", name, "' is missing (the node has: ", known.empty() ? "no attributes" : known, ")");
  }
  return *v;
}

bool Attrs::b(std::string_view n) const { return as<bool>(get(n), n, "a bool"); }
int64_t Attrs::i(std::string_view n) const { return as<int64_t>(get(n), n, "an int"); }
double Attrs::f(std::string_view n) const {
  const AttrValue& v = get(n);
  if (const int64_t* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return as<double>(v, n, "a float");
}
const std::string& Attrs::s(std::string_view n) const { return as<std::string>(get(n), n, "a string"); }
const std::vector<int64_t>& Attrs::ints(std::string_view n) const {
  return as<std::vector<int64_t>>(get(n), n, "an int list");
}
const std::vector<double>& Attrs::floats(std::string_view n) const {
  return as<std::vector<double>>(get(n), n, "a float list");
}
Scalar Attrs::scalar(std::string_view n) const {
  const AttrValue& v = get(n);
  if (const auto* s = std::get_if<Scalar>(&v)) return *s;
  if (const auto* i = std::get_if<int64_t>(&v)) return Scalar(*i);
  if (const auto* d = std::get_if<double>(&v)) return Scalar(*d);
  if (const auto* b = std::get_if<bool>(&v)) return Scalar(*b);
  TS_ERROR("attribute '", n, "' should be a number, got ", kind_name(v), " ", attr_str(v));
}
DType Attrs::dtype(std::string_view n) const { return as<DType>(get(n), n, "a dtype"); }
std::optional<int64_t> Attrs::opt_i(std::string_view n) const {
  if (!has(n)) return std::nullopt;
  return i(n);
}
std::optional<double> Attrs::opt_f(std::string_view n) const {
  if (!has(n)) return std::nullopt;
  return f(n);
}
std::optional<Scalar> Attrs::opt_scalar(std::string_view n) const {
  if (!has(n)) return std::nullopt;
  return scalar(n);
}
std::optional<DType> Attrs::opt_dtype(std::string_view n) const {
  if (!has(n)) return std::nullopt;
  return dtype(n);
}

bool attr_equal(const AttrValue& a, const AttrValue& b) {
  if (a.index() != b.index()) return false;
  if (const auto* s = std::get_if<Scalar>(&a)) {
    const auto& t = std::get<Scalar>(b);
    if (s->kind() != t.kind()) return false;
    return s->is_floating() ? (s->to_double() == t.to_double() ||
                               (std::isnan(s->to_double()) && std::isnan(t.to_double())))
                            : s->to_int() == t.to_int();
  }
  if (const auto* d = std::get_if<double>(&a)) {
    double e = std::get<double>(b);
    return *d == e || (std::isnan(*d) && std::isnan(e));
  }
  return std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, Scalar> || std::is_same_v<T, double>) return false;  // handled above
        else return x == std::get<T>(b);
      },
      a);
}

bool Attrs::operator==(const Attrs& o) const {
  if (items_.size() != o.items_.size()) return false;
  for (size_t k = 0; k < items_.size(); ++k)
    if (items_[k].name != o.items_[k].name || !attr_equal(items_[k].value, o.items_[k].value)) return false;
  return true;
}

std::string attr_str(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) return "none";
        else if constexpr (std::is_same_v<T, bool>) return x ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(x);
        else if constexpr (std::is_same_v<T, double>) return num_str(x);
        else if constexpr (std::is_same_v<T, std::string>) return "'" + x + "'";
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string s = "[";
          for (size_t k = 0; k < x.size(); ++k) s += (k ? ", " : "") + std::to_string(x[k]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, std::vector<double>>) {
          std::string s = "[";
          for (size_t k = 0; k < x.size(); ++k) s += (k ? ", " : "") + num_str(x[k]);
          return s + "]";
        } else if constexpr (std::is_same_v<T, Scalar>) {
          if (x.is_bool()) return x.to_int() ? "true" : "false";
          if (x.is_integral()) return std::to_string(x.to_int());
          return num_str(x.to_double());
        } else {
          return dtype_name(x);
        }
      },
      v);
}

}  // namespace tessera::ops
