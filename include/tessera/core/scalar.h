#pragma once
// Scalar: a number passed where a tensor could be (x + 1, clamp(x, 0, 6)).
// It remembers whether it was written as a bool, an integer or a float, which
// decides type promotion exactly as a Python number does in PyTorch.
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "tessera/core/dtype.h"

namespace tessera {

// double -> int64 without undefined behaviour: NaN is 0 and values out of
// range saturate (a fill of -inf into an integer tensor, a file's odd value).
constexpr int64_t saturating_int64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775807.0) return INT64_MAX;  // the literal rounds to 2^63
  if (v <= -9223372036854775808.0) return INT64_MIN;
  return static_cast<int64_t>(v);
}

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };
  Scalar() : Scalar(int64_t(0)) {}
  Scalar(bool b) : kind_(Kind::Bool), i_(b), d_(b) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), i_(saturating_int64(static_cast<double>(v))), d_(static_cast<double>(v)) {}
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  // The dtype a bare number of this kind gets: bool, i64, or the default float.
  DType dtype() const;
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(to_int());
    else return static_cast<T>(static_cast<acc_t<T>>(d_));
  }
  friend std::ostream& operator<<(std::ostream& os, const Scalar& s);

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

}  // namespace tessera
