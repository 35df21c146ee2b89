#pragma once
// Numbers as text, the same whatever locale the process runs in: a program
// that embeds Tessera may call setlocale(LC_ALL, ""), and under a
// comma-decimal locale printf("%f") writes "0,5" and strtod stops at ".".
// Files, configs, metrics and printed tensors go through these instead
// (std::to_chars / std::from_chars never look at the locale).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

// printf-style: style 'f' (fixed), 'e' (scientific) or 'g' (general), with
// `precision` digits as printf counts them. nan, inf and -inf as words.
std::string format_double(double v, char style = 'g', int precision = 17);
// The whole of `s` as a number (an optional sign, digits, a '.', an
// exponent), or nullopt; "inf" and "nan" are not numbers here.
std::optional<double> parse_double(std::string_view s);
std::optional<int64_t> parse_int64(std::string_view s);

// While alive, C stdio on this thread formats numbers in the "C" locale
// (uselocale), for human-readable output written with printf.
class ClassicLocale {
 public:
  ClassicLocale();
  ~ClassicLocale();
  ClassicLocale(const ClassicLocale&) = delete;
  ClassicLocale& operator=(const ClassicLocale&) = delete;

 private:
  void* previous_;
};

}  // namespace tessera
