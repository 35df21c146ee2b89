// The metrics registry's text format, the /metrics server, and a real
// Prometheus server scraping a training run (Debian's `prometheus`, installed by
// scripts/setup.sh --test; the test is skipped where it is missing).
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tessera/monitor/metrics.h"
#include "tessera/monitor/metrics_server.h"
#include "tessera/train/trainer.h"
#include "prometheus_util.h"

using namespace tessera;
using nlohmann::json;
namespace fs = std::filesystem;

TEST(Metrics, TextFormat) {
  monitor::Registry r;
  r.set("tessera_loss", "Training loss.", 0.5);
  r.set("tessera_layer_mean", "Per layer.", -1.25, {{"layer", "h.0"}});
  r.set("tessera_layer_mean", "Per layer.", 2, {{"layer", "a \"quoted\\\" name\nx"}});
  r.add("tessera_requests_total", "Requests.", 2, {{"code", "200"}});
  r.add("tessera_requests_total", "Requests.", 1, {{"code", "200"}});
  r.observe("tessera_step_seconds", "Step time.", {0.1, 1}, 0.05);
  r.observe("tessera_step_seconds", "Step time.", {0.1, 1}, 0.5);
  r.observe("tessera_step_seconds", "Step time.", {0.1, 1}, 5);
  r.set("tessera_nan", "Not a number.", NAN);
  std::string t = r.render();
  EXPECT_NE(t.find("# HELP tessera_loss Training loss.\n# TYPE tessera_loss gauge\ntessera_loss 0.5\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("tessera_layer_mean{layer=\"h.0\"} -1.25\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_layer_mean{layer=\"a \\\"quoted\\\\\\\" name\\nx\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE tessera_requests_total counter\ntessera_requests_total{code=\"200\"} 3\n"),
            std::string::npos) << t;
  EXPECT_NE(t.find("tessera_step_seconds_bucket{le=\"0.10000000000000001\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_step_seconds_bucket{le=\"1\"} 2\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_step_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_step_seconds_count 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("tessera_nan NaN\n"), std::string::npos) << t;
  EXPECT_THROW(r.set("bad name", "x", 1), Error);
  EXPECT_THROW(r.set("tessera_loss", "x", 1, {}, monitor::MetricType::kCounter), Error);
  EXPECT_THROW(r.add("tessera_requests_total", "x", -1), Error);
  EXPECT_THROW(r.set("ok", "x", 1, {{"bad-label", "v"}}), Error);
}

TEST(Metrics, ServerServesAndReportsBindErrors) {
  monitor::Registry r;
  r.set("tessera_up", "Up.", 1);
  monitor::MetricsServer server(r, "127.0.0.1", 0);
  ASSERT_GT(server.port(), 0);
  httplib::Client c("127.0.0.1", server.port());
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("tessera_up 1"), std::string::npos);
  EXPECT_NE(res->get_header_value("Content-Type").find("version=0.0.4"), std::string::npos);
  EXPECT_EQ(c.Get("/nothing")->status, 404);
  try {
    monitor::MetricsServer clash(r, "127.0.0.1", server.port());
    FAIL() << "expected a bind error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(server.port())),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(monitor::MetricsServer(r, "127.0.0.1", 70000), Error);
}

TEST(Monitoring, PrometheusScrapesATrainingRun) {
  if (!fs::exists(tessera::testing::kPrometheus))
    GTEST_SKIP() << "prometheus is not installed (scripts/setup.sh --test installs it)";
  fs::path dir = fs::temp_directory_path() / ("tessera_prom_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  // A run long enough to be scraped; stopped below once Prometheus has data.
  json cfg = json::parse(R"({
    "model": {"name": "mlp", "in_features": 48, "hidden": [32], "num_classes": 4},
    "data": {"dataset": "synthetic_images", "channels": 3, "height": 4, "width": 4, "num_classes": 4,
             "train_size": 512, "eval_size": 64},
    "optimizer": {"name": "sgd", "lr": 0.05},
    "train": {"steps": 100000000, "batch_size": 16, "num_workers": 1, "log_every": 5, "checkpoint_every": 100000000,
              "eval_every": 100000000},
    "monitor": {"port": 0, "layer_stats": true, "layer_stats_every": 5}
  })");
  cfg["output"] = (dir / "run").string();
  train::TrainerOptions o;
  o.quiet = true;
  o.handle_signals = false;
  train::Trainer trainer(train::build_recipe(cfg), o);
  std::thread fit([&] {
    // Slow steps down a little so the run does not spin a core at full speed.
    trainer.model().register_forward_hook(
        [](nn::Module&, const Tensor&, Tensor&) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); });
    trainer.fit();
  });
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (trainer.monitor_port() < 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_GT(trainer.monitor_port(), 0);

  tessera::testing::Prometheus prometheus((dir / "prometheus").string(), trainer.monitor_port());
  ASSERT_TRUE(prometheus.started());
  auto query = [&](const std::string& q) { return prometheus.query(q); };
  double steps = prometheus.wait_for("tessera_train_step");
  // Let one more scrape see the layer statistics too.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  double loss = query("tessera_train_loss");
  double lr = query("tessera_train_learning_rate");
  double grad_norm = query("tessera_train_grad_norm");
  double sps = query("tessera_train_samples_per_second");
  double mem = query("tessera_memory_allocated_bytes");
  double peak = query("tessera_memory_peak_bytes");
  double skipped = query("tessera_amp_skipped_steps_total");
  double act = query("tessera_layer_activation_zero_fraction{layer=\"net.1\"}");  // after ReLU
  double gstd = query("tessera_layer_grad_std{param=\"net.0.weight\"}");
  double step_hist = query("tessera_train_step_duration_seconds_count");
  train::Trainer::request_stop();
  fit.join();
  fs::remove_all(dir);

  EXPECT_GT(steps, 0) << "Prometheus never reported tessera_train_step";
  EXPECT_TRUE(loss > 0 && loss < 10) << loss;
  EXPECT_DOUBLE_EQ(lr, 0.05);
  EXPECT_TRUE(grad_norm > 0) << grad_norm;
  EXPECT_TRUE(sps > 0) << sps;
  EXPECT_TRUE(mem > 0 && peak >= mem) << mem << " " << peak;
  EXPECT_EQ(skipped, 0);
  EXPECT_TRUE(act > 0 && act < 1) << act;  // ReLU zeroes part of its output
  EXPECT_TRUE(gstd > 0) << gstd;
  EXPECT_GT(step_hist, 0);
}
