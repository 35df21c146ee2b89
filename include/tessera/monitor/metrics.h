#pragma once
// Metrics in the Prometheus text exposition format (version 0.0.4), for the
// training monitor and the server's /metrics.
//
//   monitor::Registry reg;
//   reg.set("tessera_train_loss", "Training loss (last step).", 0.41);
//   reg.set("tessera_layer_grad_std", "...", 1e-3, {{"layer", "net.0"}});
//   reg.observe("tessera_step_seconds", "...", {0.01, 0.1, 1}, 0.05);
//   std::string text = reg.render();
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tessera::monitor {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class MetricType { kGauge, kCounter, kHistogram };

class Registry {
 public:
  // Sets a gauge (or a counter, to a running total the caller keeps). The
  // first use of a name declares its help text and type; a later use with
  // another type is an error.
  void set(const std::string& name, const std::string& help, double value, const Labels& labels = {},
           MetricType type = MetricType::kGauge);
  // Adds to a counter.
  void add(const std::string& name, const std::string& help, double delta, const Labels& labels = {});
  // Records a value in a histogram with the given upper bounds (ascending).
  void observe(const std::string& name, const std::string& help, const std::vector<double>& buckets, double value,
               const Labels& labels = {});
  // Drops every series of a family (e.g. per-layer series when a model changes).
  void clear(const std::string& name);
  std::string render() const;

 private:
  struct Series {
    double value = 0;                 // gauge / counter
    std::vector<double> bucket_counts;  // histogram: cumulative per bucket
    double sum = 0;
    double count = 0;
  };
  struct Family {
    std::string help;
    MetricType type;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // by rendered label set
  };
  Family& family(const std::string& name, const std::string& help, MetricType type);
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Label values escaped for the text format: backslash, quote, newline.
std::string render_labels(const Labels& labels);

}  // namespace tessera::monitor
