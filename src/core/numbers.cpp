#include "tessera/core/numbers.h"

#include <locale.h>

#include <charconv>
#include <cmath>
#include <system_error>

namespace tessera {

std::string format_double(double v, char style, int precision) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::chars_format f = style == 'f' ? std::chars_format::fixed
                        : style == 'e' ? std::chars_format::scientific
                                       : std::chars_format::general;
  char buf[400];  // fixed notation of 1e308 with 17 digits fits
  auto r = std::to_chars(buf, buf + sizeof buf, v, f, precision);
  if (r.ec != std::errc()) r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific, 17);
  return std::string(buf, r.ptr);
}

std::optional<double> parse_double(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);  // from_chars takes no '+'
  if (s.empty() || s[0] == '+') return std::nullopt;
  // Digits, a point and an exponent only: from_chars alone would also take "inf", "nan" and hex forms.
  for (char c : s)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+')) return std::nullopt;
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v, std::chars_format::general);
  if (r.ptr != s.data() + s.size() || (r.ec != std::errc() && r.ec != std::errc::result_out_of_range))
    return std::nullopt;
  if (r.ec == std::errc::result_out_of_range) {  // huge magnitudes are infinite, tiny ones zero (as strtod)
    bool negative = s[0] == '-';
    size_t e = s.find_first_of("eE");
    bool tiny = e != std::string_view::npos && e + 1 < s.size() && s[e + 1] == '-';
    return tiny ? (negative ? -0.0 : 0.0) : (negative ? -HUGE_VAL : HUGE_VAL);
  }
  return v;
}

std::optional<int64_t> parse_int64(std::string_view s) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  if (s.empty() || s[0] == '+') return std::nullopt;
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

namespace {
locale_t classic_locale() {
  static locale_t c = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
  return c;
}
}  // namespace

ClassicLocale::ClassicLocale() : previous_(classic_locale() ? uselocale(classic_locale()) : nullptr) {}
ClassicLocale::~ClassicLocale() {
  if (previous_) uselocale(static_cast<locale_t>(previous_));
}

}  // namespace tessera
