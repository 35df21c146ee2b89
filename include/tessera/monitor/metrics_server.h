#pragma once
// Serves a Registry on http://HOST:PORT/metrics from a background thread, for
// Prometheus to scrape (and /health for probes). Binds 127.0.0.1 unless told
// otherwise; port 0 picks a free port (see port()).
#include <memory>
#include <string>

#include "tessera/monitor/metrics.h"

namespace tessera::monitor {

class MetricsServer {
 public:
  // Throws an Error naming host:port if it cannot bind.
  MetricsServer(const Registry& registry, const std::string& host = "127.0.0.1", int port = 0);
  ~MetricsServer();  // stops serving
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;
  std::string url() const;  // http://host:port/metrics

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::monitor
