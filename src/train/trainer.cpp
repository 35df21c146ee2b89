#include "tessera/train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/parallel.h"
#include "tessera/io/checkpoint.h"
#include "tessera/ops/ops.h"

namespace tessera::train {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<bool> g_stop{false};

extern "C" void on_signal(int sig) {
  g_stop.store(true);
  std::signal(sig, SIG_DFL);  // a second Ctrl-C ends the process at once
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "--:--";
  long t = std::lround(s);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%ld:%02ld", t / 60, t % 60);
  return buf;
}

bool is_plateau(const optim::LRScheduler* s) { return s && s->name() == "ReduceLROnPlateau"; }
}  // namespace

json EvalMetrics::to_json() const {
  json j = {{"loss", loss}, {"samples", samples}};
  if (perplexity > 0)
    j["perplexity"] = perplexity;
  else
    j["accuracy"] = accuracy;
  return j;
}

void Trainer::request_stop() { g_stop.store(true); }

Trainer::Trainer(Recipe recipe, TrainerOptions options) : recipe_(std::move(recipe)), opt_(std::move(options)) {
  TS_CHECK(recipe_.model && recipe_.train_data, "Trainer: the recipe needs a model and training data");
  const TrainSettings& s = recipe_.train;
  if (s.threads > 0) set_num_threads(s.threads);
  optimizer_ = recipe_.make_optimizer(*recipe_.model);
  data::DataLoaderOptions lo;
  lo.batch_size = s.batch_size;
  lo.shuffle = true;
  lo.seed = s.seed;
  lo.num_workers = s.num_workers;
  loader_ = std::make_unique<data::DataLoader>(recipe_.train_data, lo);
  const int64_t per_epoch = loader_->batches_per_epoch() / s.grad_accum;
  total_steps_ = s.steps > 0 ? s.steps : std::max<int64_t>(1, per_epoch) * s.epochs;
  scheduler_ = recipe_.make_scheduler(*optimizer_, total_steps_);
  bar_ = opt_.progress == 1 || (opt_.progress == -1 && ::isatty(STDOUT_FILENO));
  if (!opt_.resume.empty()) load_checkpoint(io::resolve_checkpoint(opt_.resume, checkpoint_root()));
}

Trainer::~Trainer() = default;

Tensor Trainer::loss_of(const Tensor& out, const Tensor& target) const {
  if (recipe_.task == Task::LanguageModel)
    return ops::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}));
  return ops::cross_entropy(out, target);
}

EvalMetrics Trainer::evaluate(int64_t max_batches) {
  EvalMetrics m;
  if (!recipe_.eval_data) return m;
  NoGradGuard no_grad;
  nn::Module& model = *recipe_.model;
  const bool was_training = model.is_training();
  model.eval();
  data::DataLoaderOptions lo;
  lo.batch_size = recipe_.train.eval_batch_size;
  lo.num_workers = std::min(recipe_.train.num_workers, 2);
  data::DataLoader loader(recipe_.eval_data, lo);
  double loss_sum = 0;
  int64_t correct = 0, count = 0, batches = 0;
  while (auto batch = loader.next()) {
    Tensor out = model((*batch)[0]);
    const Tensor& y = (*batch)[1];
    const int64_t n = y.numel();
    loss_sum += loss_of(out, y).item<double>() * static_cast<double>(n);
    if (recipe_.task == Task::Classification)
      correct += ops::sum(ops::eq(ops::argmax(out, -1), y)).item<int64_t>();
    count += n;
    m.samples += y.size(0);
    if (max_batches > 0 && ++batches >= max_batches) break;
  }
  model.train(was_training);
  m.loss = count ? loss_sum / static_cast<double>(count) : 0;
  if (recipe_.task == Task::Classification)
    m.accuracy = count ? static_cast<double>(correct) / static_cast<double>(count) : 0;
  else
    m.perplexity = std::exp(m.loss);
  return m;
}

std::string Trainer::save_checkpoint() {
  io::Checkpoint c;
  c.model = recipe_.model->state_dict().entries;
  optim::OptimizerState os = optimizer_->state_dict();
  c.optimizer = os.tensors;
  c.optimizer_groups = os.groups;
  Generator& g = default_generator();
  c.state = {{"step", step_},
             {"epoch", loader_->epoch()},
             {"data", loader_->state()},
             {"rng", {{"seed", g.seed()}, {"offset", g.offset()}}},
             {"scheduler", scheduler_ ? scheduler_->state_dict() : json(nullptr)},
             {"config", recipe_.config},
             {"model", recipe_.model_name},
             {"parameters", recipe_.model->num_parameters()},
             {"elapsed_seconds", elapsed_},
             {"metrics", {{"train_loss", smooth_loss_}, {"eval", last_eval_}}}};
  if (!recipe_.vocab.empty()) c.state["vocab"] = recipe_.vocab;
  char name[32];
  std::snprintf(name, sizeof name, "step-%09lld", static_cast<long long>(step_));
  last_checkpoint_step_ = step_;
  last_checkpoint_ = io::save_checkpoint(checkpoint_root(), name, c, static_cast<int>(recipe_.train.keep_checkpoints));
  return last_checkpoint_;
}

void Trainer::load_checkpoint(const std::string& dir) {
  io::Checkpoint c = io::load_checkpoint(dir);
  nn::StateDict sd{c.model};
  try {
    recipe_.model->load_state_dict(sd, true);
  } catch (const Error& e) {
    TS_ERROR("checkpoint ", dir, " does not fit this model: ", e.what());
  }
  optimizer_->load_state_dict({c.optimizer, c.optimizer_groups});
  const json& s = c.state;
  try {
    step_ = s.at("step").get<int64_t>();
    loader_->load_state(s.at("data"));
    default_generator().set_state(s.at("rng").at("seed").get<uint64_t>(), s.at("rng").at("offset").get<uint64_t>());
    if (scheduler_ && !s.at("scheduler").is_null()) scheduler_->load_state_dict(s.at("scheduler"));
    elapsed_ = s.value("elapsed_seconds", 0.0);
    if (s.contains("metrics")) {
      smooth_loss_ = s["metrics"].value("train_loss", 0.0);
      last_eval_ = s["metrics"].value("eval", json());
    }
  } catch (const json::exception& e) {
    TS_ERROR(dir, "/state.json is missing a field or has a wrong type: ", e.what());
  }
  last_checkpoint_ = dir;
  last_checkpoint_step_ = step_;
}

void Trainer::finish_line() {
  if (bar_ && !opt_.quiet) std::printf("\n");
}

void Trainer::log_step(double loss, double seconds, int64_t samples) {
  smooth_loss_ = step_ == 1 || smooth_loss_ == 0 ? loss : 0.95 * smooth_loss_ + 0.05 * loss;
  const double lr = optimizer_->param_groups()[0].lr();
  const double sps = seconds > 0 ? static_cast<double>(samples) / seconds : 0;
  if (metrics_.is_open())
    metrics_ << json{{"step", step_}, {"epoch", loader_->epoch()}, {"loss", loss}, {"lr", lr}, {"samples_per_s", sps}}
                    .dump()
             << "\n";
  if (opt_.quiet) return;
  const double eta = sps > 0 ? static_cast<double>(total_steps_ - step_) * seconds /
                                   static_cast<double>(std::max<int64_t>(1, samples / recipe_.train.batch_size /
                                                                               recipe_.train.grad_accum))
                             : NAN;
  const int64_t per_epoch = std::max<int64_t>(1, loader_->batches_per_epoch() / recipe_.train.grad_accum);
  const int64_t epochs = recipe_.train.steps > 0 ? (total_steps_ + per_epoch - 1) / per_epoch : recipe_.train.epochs;
  if (bar_) {
    const int width = 24;
    const double frac = static_cast<double>(step_) / static_cast<double>(total_steps_);
    std::string bar(static_cast<size_t>(frac * width), '#');
    bar.resize(width, '.');
    std::printf("\r\033[Kepoch %lld/%lld [%s] %lld/%lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s",
                static_cast<long long>(loader_->epoch() + 1), static_cast<long long>(epochs), bar.c_str(),
                static_cast<long long>(step_), static_cast<long long>(total_steps_), smooth_loss_, lr, sps,
                format_duration(eta).c_str());
    std::fflush(stdout);
  } else if (step_ % recipe_.train.log_every == 0 || step_ == total_steps_) {
    std::printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.2e  %.0f samples/s  ETA %s\n",
                static_cast<long long>(step_), static_cast<long long>(total_steps_),
                static_cast<long long>(loader_->epoch() + 1), smooth_loss_, lr, sps, format_duration(eta).c_str());
    std::fflush(stdout);
  }
}

json Trainer::fit() {
  const TrainSettings& s = recipe_.train;
  namespace fs = std::filesystem;
  fs::create_directories(recipe_.output_dir);
  {  // the config next to the results, for `tessera eval` and for people
    std::ofstream(recipe_.output_dir + "/config.json") << recipe_.config.dump(2) << "\n";
  }
  metrics_.open(recipe_.output_dir + "/metrics.jsonl", std::ios::app);
  g_stop.store(false);
  struct sigaction old_int {}, old_term {};
  if (opt_.handle_signals) {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
  }
  nn::Module& model = *recipe_.model;
  model.train();
  optimizer_->zero_grad();
  if (!opt_.quiet)
    std::printf("training %s (%.2fM parameters) on %lld samples, %lld steps, batch %lld x %lld, %d threads%s\n",
                recipe_.model_name.c_str(), model.num_parameters() / 1e6,
                static_cast<long long>(recipe_.train_data->size()), static_cast<long long>(total_steps_),
                static_cast<long long>(s.batch_size), static_cast<long long>(s.grad_accum), get_num_threads(),
                step_ > 0 ? (" (resumed at step " + std::to_string(step_) + ")").c_str() : "");

  int64_t micro = 0, window_samples = 0;
  auto window_start = Clock::now();
  bool checkpoint_due = false, eval_due = false;
  while (step_ < total_steps_) {
    if (micro == 0 && g_stop.load()) break;  // stop only between optimizer steps
    auto batch = loader_->next();
    if (!batch) {  // an epoch ended
      if (s.eval_every == 0) eval_due = true;
      if (s.checkpoint_every == 0) checkpoint_due = true;
      if (s.steps == 0 && loader_->epoch() >= s.epochs) break;
      if (micro == 0 && !eval_due && !checkpoint_due) continue;
    } else {
      Tensor out = model((*batch)[0]);
      Tensor loss = loss_of(out, (*batch)[1]);
      last_loss_ = loss.item<double>();
      TS_CHECK(std::isfinite(last_loss_), "training diverged: the loss is ", last_loss_, " at step ", step_ + 1,
               " (lower the learning rate or enable clip_grad_norm)");
      (s.grad_accum > 1 ? ops::div(loss, static_cast<double>(s.grad_accum)) : loss).backward();
      window_samples += (*batch)[0].size(0);
      if (++micro < s.grad_accum) continue;
      micro = 0;
      if (s.clip_grad_norm > 0) optim::clip_grad_norm_(model.parameters(), s.clip_grad_norm);
      if (s.clip_grad_value > 0) optim::clip_grad_value_(model.parameters(), s.clip_grad_value);
      optimizer_->step();
      optimizer_->zero_grad();
      if (scheduler_ && !is_plateau(scheduler_.get())) scheduler_->step();
      ++step_;
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      elapsed_ += secs;
      log_step(last_loss_, secs, window_samples);
      window_samples = 0;
      window_start = Clock::now();
      if (s.eval_every > 0 && step_ % s.eval_every == 0) eval_due = true;
      if (s.checkpoint_every > 0 && step_ % s.checkpoint_every == 0) checkpoint_due = true;
    }
    if (micro != 0) continue;  // evaluate and checkpoint only at step boundaries
    if (eval_due && recipe_.eval_data) {
      EvalMetrics m = evaluate(s.eval_batches);
      last_eval_ = m.to_json();
      last_eval_step_ = step_;
      if (is_plateau(scheduler_.get())) scheduler_->step(m.loss);
      if (metrics_.is_open()) metrics_ << json{{"step", step_}, {"eval", last_eval_}}.dump() << "\n";
      if (!opt_.quiet) {
        finish_line();
        if (recipe_.task == Task::Classification)
          std::printf("eval at step %lld: loss %.4f  accuracy %.2f%%\n", static_cast<long long>(step_), m.loss,
                      100 * m.accuracy);
        else
          std::printf("eval at step %lld: loss %.4f  perplexity %.2f\n", static_cast<long long>(step_), m.loss,
                      m.perplexity);
      }
    }
    eval_due = false;
    if (checkpoint_due) save_checkpoint();
    checkpoint_due = false;
  }
  stopped_ = g_stop.load();
  if (opt_.handle_signals) {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
  }
  finish_line();
  if (stopped_) {
    if (!opt_.quiet) std::printf("stop requested: saving a checkpoint at step %lld\n", static_cast<long long>(step_));
  } else if (recipe_.eval_data && last_eval_step_ != step_) {
    last_eval_ = evaluate(s.eval_batches).to_json();
    last_eval_step_ = step_;
  }
  if (last_checkpoint_step_ != step_) save_checkpoint();
  // Epochs done, from the batches consumed (the loader's counter advances only
  // when it is asked for the batch after an epoch's last).
  const double epochs_done = static_cast<double>(step_ * s.grad_accum) /
                             static_cast<double>(std::max<int64_t>(1, loader_->batches_per_epoch()));
  json summary = {{"steps", step_},
                  {"epochs", epochs_done},
                  {"train_seconds", elapsed_},
                  {"train_loss", smooth_loss_},
                  {"eval", last_eval_},
                  {"checkpoint", last_checkpoint_},
                  {"stopped_early", stopped_}};
  if (metrics_.is_open()) metrics_ << json{{"summary", summary}}.dump() << "\n";
  metrics_.close();
  if (!opt_.quiet) {
    std::printf("\n== summary ==\n");
    std::printf("  steps          %lld (%.2f epochs)%s\n", static_cast<long long>(step_), epochs_done,
                stopped_ ? ", stopped early" : "");
    std::printf("  training time  %s\n", format_duration(elapsed_).c_str());
    std::printf("  train loss     %.4f\n", smooth_loss_);
    if (!last_eval_.is_null() && !last_eval_.empty()) {
      std::printf("  eval loss      %.4f\n", last_eval_.value("loss", 0.0));
      if (last_eval_.contains("accuracy"))
        std::printf("  eval accuracy  %.2f%%\n", 100 * last_eval_["accuracy"].get<double>());
      if (last_eval_.contains("perplexity"))
        std::printf("  perplexity     %.2f\n", last_eval_["perplexity"].get<double>());
    }
    std::printf("  checkpoint     %s\n", last_checkpoint_.c_str());
    std::printf("  metrics        %s/metrics.jsonl\n", recipe_.output_dir.c_str());
  }
  return summary;
}

}  // namespace tessera::train
