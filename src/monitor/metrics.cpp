#include "tessera/monitor/metrics.h"

#include <cmath>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/core/numbers.h"

namespace tessera::monitor {
namespace {

bool valid_name(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return format_double(v);  // "%.17g" in any locale
}

const char* type_name(MetricType t) {
  switch (t) {
    case MetricType::kGauge: return "gauge";
    case MetricType::kCounter: return "counter";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string render_labels(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    TS_CHECK(valid_name(labels[i].first) && labels[i].first.find(':') == std::string::npos,
             "metrics: invalid label name '", labels[i].first, "' (letters, digits and _, not starting with a digit)");
    if (i) out += ',';
    out += labels[i].first + "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') out += "\\\\";
      else if (c == '"') out += "\\\"";
      else if (c == '\n') out += "\\n";
      else out += c;
    }
    out += '"';
  }
  return out + "}";
}

Registry::Family& Registry::family(const std::string& name, const std::string& help, MetricType type) {
  TS_CHECK(valid_name(name), "metrics: invalid metric name '", name,
           "' (letters, digits, _ and :, not starting with a digit)");
  auto it = families_.find(name);
  if (it == families_.end()) return families_[name] = Family{help, type, {}, {}};
  TS_CHECK(it->second.type == type, "metrics: '", name, "' was declared as a ", type_name(it->second.type),
           ", not a ", type_name(type));
  return it->second;
}

void Registry::set(const std::string& name, const std::string& help, double value, const Labels& labels,
                   MetricType type) {
  TS_CHECK(type != MetricType::kHistogram, "metrics: use observe() for histogram '", name, "'");
  std::lock_guard<std::mutex> lock(mu_);
  family(name, help, type).series[render_labels(labels)].value = value;
}

void Registry::add(const std::string& name, const std::string& help, double delta, const Labels& labels) {
  TS_CHECK(delta >= 0, "metrics: counter '", name, "' can only increase, got ", delta);
  std::lock_guard<std::mutex> lock(mu_);
  family(name, help, MetricType::kCounter).series[render_labels(labels)].value += delta;
}

void Registry::observe(const std::string& name, const std::string& help, const std::vector<double>& buckets,
                       double value, const Labels& labels) {
  std::lock_guard<std::mutex> lock(mu_);
  Family& f = family(name, help, MetricType::kHistogram);
  if (f.buckets.empty()) {
    for (size_t i = 1; i < buckets.size(); ++i)
      TS_CHECK(buckets[i] > buckets[i - 1], "metrics: histogram '", name, "' buckets must be ascending");
    f.buckets = buckets;
  }
  Series& s = f.series[render_labels(labels)];
  s.bucket_counts.resize(f.buckets.size());
  for (size_t i = 0; i < f.buckets.size(); ++i)
    if (value <= f.buckets[i]) s.bucket_counts[i] += 1;
  s.sum += value;
  s.count += 1;
}

void Registry::clear(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  families_.erase(name);
}

std::string Registry::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type_name(f.type) + "\n";
    for (const auto& [labels, s] : f.series) {
      if (f.type != MetricType::kHistogram) {
        out += name + labels + " " + number(s.value) + "\n";
        continue;
      }
      // Bucket lines carry an extra "le" label next to the series' own.
      // (captured by name: clang 14 cannot capture structured bindings)
      auto with_le = [&labels = labels](const std::string& le) {
        std::string l = labels.empty() ? "{" : labels.substr(0, labels.size() - 1) + ",";
        return l + "le=\"" + le + "\"}";
      };
      for (size_t i = 0; i < f.buckets.size(); ++i)
        out += name + "_bucket" + with_le(number(f.buckets[i])) + " " + number(s.bucket_counts[i]) + "\n";
      out += name + "_bucket" + with_le("+Inf") + " " + number(s.count) + "\n";
      out += name + "_sum" + labels + " " + number(s.sum) + "\n";
      out += name + "_count" + labels + " " + number(s.count) + "\n";
    }
  }
  return out;
}

}  // namespace tessera::monitor
