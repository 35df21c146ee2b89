// `tessera launch` end to end: `tessera train` at N ranks with data
// parallelism equals one process (final weights and the loss curve), a rank
// killed mid-run is restarted from the newest checkpoint and ends where an
// uninterrupted run ends, a run resumes at another world size and ZeRO
// stage, ZeRO-1, -2 and -3 equal one process (the MLP, the GPT), and bad
// parallel configs are named.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tessera/distributed/status.h"
#include "tessera/io/checkpoint.h"
#include "tessera/io/safetensors.h"
#include "tessera/llm/llama_gguf.h"
#include "../llm/llm_fixture.h"
#include "test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kMlp = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_mlp.yaml";
const std::string kCnn = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/fashion_mnist_cnn.yaml";

// A short run: `steps` steps, checkpoints every 5, a small evaluation.
std::vector<std::string> train_args(const std::string& config, const std::string& out, int steps) {
  return {"train", config, "--output", out, "--plain", "--set", "train.steps=" + std::to_string(steps),
          "--set", "train.checkpoint_every=5", "--set", "train.eval_batches=2", "--set", "train.num_workers=0",
          "--set", "train.log_every=1", "--set", "train.keep_checkpoints=10"};
}

testing::CliRun launch(int n, std::vector<std::string> train, std::vector<std::string> flags = {},
                       std::vector<std::string> env = {}) {
  std::vector<std::string> args = {"launch", "-n", std::to_string(n)};
  args.insert(args.end(), flags.begin(), flags.end());
  args.push_back("--");
  args.push_back("tessera");
  args.insert(args.end(), train.begin(), train.end());
  env.push_back("OMPI_MCA_btl_vader_single_copy_mechanism=none");
  env.push_back("TESSERA_DIST_TIMEOUT=60");
  return testing::run_cli(args, env);
}

std::vector<double> losses(const std::string& run) {
  std::vector<double> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j.contains("loss") && j.contains("step")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

// How far two runs' weights at a step are apart, as the smallest tolerance t
// with |a - b| <= t (1 + |a|) element-wise (allclose with rtol = atol = t). A
// sharded checkpoint (ZeRO) is assembled from its shards; a consolidated
// model.safetensors is read as written.
double weight_difference(const std::string& a, const std::string& b, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "/checkpoints/step-%09d", step);
  auto model_of = [&](const std::string& run) {
    const std::string dir = run + name;
    io::NamedTensors t = fs::exists(dir + "/index.json") && fs::exists(dir + "/model.safetensors")
                             ? io::load_safetensors(dir + "/model.safetensors")
                             : io::load_checkpoint(dir).model;
    return std::map<std::string, Tensor>(t.begin(), t.end());
  };
  auto wa = model_of(a), wb = model_of(b);
  EXPECT_EQ(wa.size(), wb.size());
  double worst = 0;
  for (auto& [n, ta] : wa) {
    auto it = wb.find(n);
    EXPECT_TRUE(it != wb.end()) << n;
    if (it == wb.end() || !is_floating(ta.dtype())) continue;
    Tensor x = ta.to(DType::F64), y = it->second.to(DType::F64);
    const double d = ops::max(ops::div(ops::abs(ops::sub(x, y)), ops::add(ops::abs(x), 1.0))).item<double>();
    worst = std::max(worst, d);
  }
  return worst;
}

void expect_same_curve(const std::string& a, const std::string& b) {
  auto la = losses(a), lb = losses(b);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-4 * std::max(1.0, std::abs(la[i]))) << "step " << i + 1;
}

class Launch : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::scratch_dir("launch"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(Launch, DataParallelMlpEqualsOneProcess) {
  auto one = testing::run_cli(train_args(kMlp, dir_ + "/one", 20));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (int n : {2, 4}) {
    const std::string run = dir_ + "/n" + std::to_string(n);
    auto r = launch(n, train_args(kMlp, run, 20));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("[rank 0] training mlp"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("data parallel over " + std::to_string(n) + " ranks"), std::string::npos);
    EXPECT_EQ(r.output.find("[rank 1] training"), std::string::npos);  // rank 0 speaks for the job
    const double d = weight_difference(dir_ + "/one", run, 20);
    std::printf("[Launch] MLP, 20 steps, %d ranks vs one process: weights within %.2g\n", n, d);
    EXPECT_LT(d, 1e-5) << n << " ranks";
    expect_same_curve(dir_ + "/one", run);
  }
}

TEST_F(Launch, DataParallelCnnEqualsOneProcess) {
  auto args = [&](const std::string& out) {
    auto a = train_args(kCnn, out, 5);
    a.insert(a.end(), {"--set", "model.dropout=0"});  // dropout draws per rank: not one process's masks
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto r = launch(2, args(dir_ + "/two"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double d = weight_difference(dir_ + "/one", dir_ + "/two", 5);
  std::printf("[Launch] CNN, 5 steps, 2 ranks vs one process: weights within %.2g\n", d);
  EXPECT_LT(d, 1e-5);
  expect_same_curve(dir_ + "/one", dir_ + "/two");
}

// The CNN at 4 ranks under every ZeRO stage equals one process.
TEST_F(Launch, CnnWithEveryZeroStageAt4RanksEqualsOneProcess) {
  auto args = [&](const std::string& out, int zero) {
    auto a = train_args(kCnn, out, 5);
    a.insert(a.end(), {"--set", "model.dropout=0"});
    if (zero >= 0) a.insert(a.end(), {"--set", "parallel.zero=" + std::to_string(zero)});
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", -1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (int zero : {1, 2, 3}) {
    const std::string run = dir_ + "/z" + std::to_string(zero);
    auto r = launch(4, args(run, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const double d = weight_difference(dir_ + "/one", run, 5);
    std::printf("[Launch] CNN, 5 steps, ZeRO-%d at 4 ranks vs one process: weights within %.2g\n", zero, d);
    EXPECT_LT(d, 1e-5) << "ZeRO-" << zero;
    expect_same_curve(dir_ + "/one", run);
  }
}

TEST_F(Launch, KilledRankRestartsFromTheNewestCheckpointAndEndsTheSame) {
  auto one = testing::run_cli(train_args(kMlp, dir_ + "/one", 20));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // Rank 1 is killed from outside once its status record shows step 12.
  const std::string status = dir_ + "/status";
  std::atomic<bool> killed{false}, done{false};
  std::thread killer([&] {
    while (!done && !killed) {
      auto rec = distributed::StatusBoard::read_file(distributed::StatusBoard::path_of(status, 1));
      if (rec && rec->step >= 12 && rec->pid > 0) {
        kill(rec->pid, SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  auto r = launch(2, train_args(kMlp, dir_ + "/two", 20), {"--max-restarts", "1", "--kill-timeout", "10"},
                  {"TESSERA_DIST_STATUS_DIR=" + status});
  done = true;
  killer.join();
  ASSERT_TRUE(killed) << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("died"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restart 1 of 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("resumed at step 10"), std::string::npos) << r.output;
  EXPECT_LT(weight_difference(dir_ + "/one", dir_ + "/two", 20), 1e-5);
}

// ZeRO-2 at 4 ranks for 10 steps (sharded checkpoints: each rank writes its
// pieces), then plain data parallelism at 2: the same run as one process. A
// damaged shard of the newest checkpoint is named, and the resume falls back
// to the one before it; `tessera ckpt consolidate` assembles a model file.
TEST_F(Launch, ResumesAtAnotherWorldSizeAndZeroStage) {
  auto one = testing::run_cli(train_args(kMlp, dir_ + "/one", 20));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto a = train_args(kMlp, dir_ + "/run", 10);
  a.insert(a.end(), {"--set", "parallel.zero=2"});
  auto first = launch(4, a);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("ZeRO-2 data parallel over 4 ranks"), std::string::npos) << first.output;
  // Sharded: each rank wrote its pieces; step 10's rank-2 model shard is then damaged.
  const std::string step10 = dir_ + "/run/checkpoints/step-000000010";
  ASSERT_TRUE(fs::exists(step10 + "/index.json"));
  ASSERT_TRUE(fs::exists(step10 + "/optimizer-rank00003.safetensors"));
  testing::damage_file(step10 + "/model-rank00002.safetensors");
  // `tessera ckpt consolidate` assembles step 5's model: one process's weights at step 5.
  auto consolidated = testing::run_cli({"ckpt", "consolidate", dir_ + "/run/checkpoints/step-000000005"});
  ASSERT_EQ(consolidated.exit_code, 0) << consolidated.output;
  EXPECT_LT(weight_difference(dir_ + "/one", dir_ + "/run", 5), 1e-5);
  auto damaged = testing::run_cli({"ckpt", "consolidate", step10});
  EXPECT_NE(damaged.exit_code, 0);
  EXPECT_NE(damaged.output.find("model-rank00002.safetensors is corrupt"), std::string::npos) << damaged.output;
  // Resuming skips the damaged checkpoint for step 5's, and ends as one process does.
  auto args = train_args(kMlp, dir_ + "/run", 20);
  args.insert(args.end(), {"--resume", "latest"});
  auto second = launch(2, args);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("step-000000010 does not load"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("resumed at step 5"), std::string::npos) << second.output;
  EXPECT_LT(weight_difference(dir_ + "/one", dir_ + "/run", 20), 1e-5);
}

// ZeRO-1, -2 and -3 through the Trainer, with gradient clipping (a norm over
// every rank's shards) and accumulation, equal one process.
TEST_F(Launch, ZeroStagesEqualOneProcess) {
  auto args = [&](const std::string& out, int zero) {
    auto a = train_args(kMlp, out, 12);
    a.insert(a.end(), {"--set", "train.clip_grad_norm=0.5", "--set", "train.grad_accum=2", "--set",
                       "train.batch_size=64"});
    if (zero >= 0) a.insert(a.end(), {"--set", "parallel.zero=" + std::to_string(zero)});
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", -1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (auto [n, zero] : {std::pair{2, 1}, std::pair{4, 2}, std::pair{2, 3}}) {
    const std::string run = dir_ + "/z" + std::to_string(zero);
    auto r = launch(n, args(run, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ZeRO-" + std::to_string(zero) + " data parallel over " + std::to_string(n) + " ranks"),
              std::string::npos)
        << r.output;
    const double d = weight_difference(dir_ + "/one", run, 12);
    std::printf("[Launch] MLP, 12 steps, ZeRO-%d at %d ranks vs one process: weights within %.2g\n", zero, n, d);
    EXPECT_LT(d, 1e-5) << "ZeRO-" << zero;
    expect_same_curve(dir_ + "/one", run);
  }
}

// The character GPT (its head tied to the token embedding) with data
// parallelism at 2 ranks, ZeRO-3 at 2 (each block a unit, gathered in its
// forward and again in its backward), ZeRO-1 and -2 at 4, equals one process;
// so do ZeRO-3 at 4 ranks, a ZeRO-3 run's step-5 checkpoint resumed with
// ZeRO-1 at 4 ranks, and one written at 4 ranks resumed with plain data
// parallelism at 2.
TEST_F(Launch, GptWithDdpAndEveryZeroStageEqualsOneProcess) {
  const std::string gpt = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/char_gpt.yaml";
  auto args = [&](const std::string& out, int steps, int zero) {
    auto a = train_args(gpt, out, steps);
    a.insert(a.end(), {"--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set", "model.n_head=2", "--set",
                       "model.dropout=0", "--set", "train.batch_size=8", "--set", "scheduler.warmup_steps=2"});
    if (zero >= 0) a.insert(a.end(), {"--set", "parallel.zero=" + std::to_string(zero)});
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", 10, -1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto ddp = launch(2, args(dir_ + "/ddp", 10, 0));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  auto z3 = launch(2, args(dir_ + "/z3", 10, 3));
  ASSERT_EQ(z3.exit_code, 0) << z3.output;
  // Built on meta, each rank materialized only its shards (Note [Materializing shard by shard]).
  EXPECT_NE(z3.output.find("ZeRO-3 data parallel over 2 ranks, the model materialized shard by shard"),
            std::string::npos) << z3.output;
  // One process with zero: 3 builds it on meta too and materializes it whole: the same model.
  auto one3 = testing::run_cli(args(dir_ + "/one3", 10, 3));
  ASSERT_EQ(one3.exit_code, 0) << one3.output;
  EXPECT_EQ(weight_difference(dir_ + "/one", dir_ + "/one3", 10), 0.0);
  for (int zero : {1, 2}) {
    auto r = launch(4, args(dir_ + "/z" + std::to_string(zero), 10, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  // ZeRO-3 at 4 ranks; its step-5 checkpoint resumed with plain data parallelism at 2.
  auto z3_4 = launch(4, args(dir_ + "/z3at4", 10, 3));
  ASSERT_EQ(z3_4.exit_code, 0) << z3_4.output;
  // From ZeRO-3's checkpoint at step 5 (written from every rank's shards), ZeRO-1 at 4 ranks.
  auto resumed_args = args(dir_ + "/z3to1", 10, 1);
  resumed_args.insert(resumed_args.end(), {"--resume", dir_ + "/z3/checkpoints/step-000000005"});
  auto resumed = launch(4, resumed_args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resumed at step 5"), std::string::npos) << resumed.output;
  EXPECT_LT(weight_difference(dir_ + "/one", dir_ + "/z3to1", 10), 1e-5);
  auto to_ddp = args(dir_ + "/z3to2", 10, 0);
  to_ddp.insert(to_ddp.end(), {"--resume", dir_ + "/z3at4/checkpoints/step-000000005"});
  auto resumed2 = launch(2, to_ddp);
  ASSERT_EQ(resumed2.exit_code, 0) << resumed2.output;
  EXPECT_NE(resumed2.output.find("resumed at step 5"), std::string::npos) << resumed2.output;
  for (const char* run : {"/ddp", "/z3", "/z1", "/z2", "/z3at4", "/z3to2"}) {
    const double d = weight_difference(dir_ + "/one", dir_ + run, 10);
    std::printf("[Launch] GPT, 10 steps, %s vs one process: weights within %.2g\n", run + 1, d);
    EXPECT_LT(d, 1e-5) << run;
    if (std::string(run) != "/z3to2") expect_same_curve(dir_ + "/one", dir_ + run);  // that one logged steps 6-10 only
  }
}

// `parallel: {tensor: 2, pipeline: 2}` from the command line: the character
// GPT (vocabulary padded to 116, which 2 divides; clipping, warmup-cosine,
// evaluation) trains as one process, and its sharded checkpoint resumes in
// one process, at 2 data-parallel ranks and as a 2-stage pipeline with the
// same trajectory. A vocabulary the tensor size does not divide is an error
// on every rank naming it.
TEST_F(Launch, GptWithTensorAndPipelineParallelismEqualsOneProcess) {
  const std::string gpt = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/char_gpt.yaml";
  auto args = [&](const std::string& out, std::vector<std::string> extra) {
    auto a = train_args(gpt, out, 6);
    a.insert(a.end(), {"--set", "model.n_layer=2", "--set", "model.n_embd=64", "--set", "model.n_head=2", "--set",
                       "model.dropout=0", "--set", "train.batch_size=8", "--set", "scheduler.warmup_steps=2", "--set",
                       "model.vocab_size=116", "--set", "train.checkpoint_every=3", "--set", "train.eval_every=3"});
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", {}));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto split = launch(4, args(dir_ + "/tp", {"--set", "parallel.tensor=2", "--set", "parallel.pipeline=2"}));
  ASSERT_EQ(split.exit_code, 0) << split.output;
  EXPECT_NE(split.output.find("data x tensor x pipeline 1 x 2 x 2 (1f1b, 4 micro-batches)"), std::string::npos)
      << split.output;
  EXPECT_LT(weight_difference(dir_ + "/one", dir_ + "/tp", 6), 1e-5);
  expect_same_curve(dir_ + "/one", dir_ + "/tp");
  // The sharded checkpoint generates text in one process; the vocabulary's
  // padding (3 rows past the tokenizer's 113) is never sampled.
  auto text = testing::run_cli({"generate", dir_ + "/tp/checkpoints/step-000000006", "-p", "The ", "-n", "8"});
  EXPECT_EQ(text.exit_code, 0) << text.output;
  const std::vector<std::string> from{"--resume", dir_ + "/tp/checkpoints/step-000000003"};
  auto alone = testing::run_cli(args(dir_ + "/alone", from));
  ASSERT_EQ(alone.exit_code, 0) << alone.output;
  auto ddp = launch(2, args(dir_ + "/ddp", from));
  ASSERT_EQ(ddp.exit_code, 0) << ddp.output;
  std::vector<std::string> pipe = from;
  pipe.insert(pipe.end(), {"--set", "parallel.pipeline=2"});
  auto piped = launch(2, args(dir_ + "/pipe", pipe));
  ASSERT_EQ(piped.exit_code, 0) << piped.output;
  // ZeRO-1 over 2 data ranks of a tensor-parallel pair (2 x 2 x 1).
  std::vector<std::string> zero = from;
  zero.insert(zero.end(), {"--set", "parallel.tensor=2", "--set", "parallel.zero=1"});
  auto zeroed = launch(4, args(dir_ + "/zero", zero));
  ASSERT_EQ(zeroed.exit_code, 0) << zeroed.output;
  EXPECT_NE(zeroed.output.find("2 x 2 x 1 (1f1b, 2 micro-batches, ZeRO-1 over the data ranks)"), std::string::npos)
      << zeroed.output;
  for (const char* run : {"/alone", "/ddp", "/pipe", "/zero"}) {
    const std::string r = run;
    EXPECT_NE((r == "/alone" ? alone : r == "/ddp" ? ddp : r == "/pipe" ? piped : zeroed).output.find(
                  "resumed at step 3"), std::string::npos) << run;
    EXPECT_LT(weight_difference(dir_ + "/one", dir_ + run, 6), 1e-5) << run;
  }
  // With dropout, inside the split regions too: resumed at step 3, the
  // next steps draw the masks the uninterrupted run drew.
  const std::vector<std::string> drop{"--set", "parallel.tensor=2", "--set", "model.dropout=0.2"};
  auto whole = launch(2, args(dir_ + "/drop", drop));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  std::vector<std::string> again = drop;
  again.insert(again.end(), {"--resume", dir_ + "/drop/checkpoints/step-000000003"});
  auto resumed = launch(2, args(dir_ + "/drop_resumed", again));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto full = losses(dir_ + "/drop"), tail = losses(dir_ + "/drop_resumed");
  ASSERT_EQ(full.size(), 6u);
  ASSERT_EQ(tail.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(tail[i], full[3 + i], 1e-6) << "step " << 4 + i;
  EXPECT_NE(full, losses(dir_ + "/tp"));  // the dropout did draw
  auto odd = launch(2, args(dir_ + "/odd", {"--set", "parallel.tensor=2", "--set", "model.vocab_size=115"}));
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("vocab_size = 115 must divide by the tensor-parallel size 2"), std::string::npos)
      << odd.output;
}

// The Llama LoRA recipe: the base (a GGUF) frozen, only the adapters trained
// and reduced. At 2 ranks with DDP and with ZeRO-2 it equals one process,
// and writes the adapter files as one process does.
// The Llama's layers run through operator() (their rotary tables are the
// model's), so ZeRO-3 gathers each one; built on meta and materialized shard
// by shard, with an untied head, it equals one process.
TEST_F(Launch, LlamaWithZero3EqualsOneProcess) {
  const std::string cfg = std::string(TESSERA_SOURCE_DIR) + "/examples/configs/char_llama.yaml";
  auto args = [&](const std::string& out, int zero) {
    auto a = train_args(cfg, out, 6);
    a.insert(a.end(), {"--set", "model.n_layers=2", "--set", "model.dim=64", "--set", "model.tie_embeddings=false",
                       "--set", "train.batch_size=8", "--set", "scheduler.warmup_steps=2"});
    if (zero >= 0) a.insert(a.end(), {"--set", "parallel.zero=" + std::to_string(zero)});
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", -1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto z3 = launch(2, args(dir_ + "/z3", 3));
  ASSERT_EQ(z3.exit_code, 0) << z3.output;
  EXPECT_NE(z3.output.find("ZeRO-3 data parallel over 2 ranks, the model materialized shard by shard"),
            std::string::npos) << z3.output;
  const double d = weight_difference(dir_ + "/one", dir_ + "/z3", 5);
  std::printf("[Launch] Llama, ZeRO-3 at 2 ranks vs one process: weights within %.2g\n", d);
  EXPECT_LT(d, 1e-5);
  expect_same_curve(dir_ + "/one", dir_ + "/z3");
}

TEST_F(Launch, LoraRecipeEqualsOneProcess) {
  fs::create_directories(dir_);
  nn::zoo::Llama* m = nullptr;
  const testing::Fixture f = testing::fixture(&m, 2, 64);
  llm::GgufExportOptions o;
  o.tokenizer = &f.tok;
  llm::save_llama_gguf(*m, dir_ + "/base.gguf", o);
  std::string text;
  for (int i = 0; i < 80; ++i) text += "abc cab bca ";
  std::ofstream(dir_ + "/text.txt") << text;
  std::ofstream(dir_ + "/lora.yaml")
      << "lora: {base: " << dir_ << "/base.gguf, rank: 4, alpha: 8, targets: [q_proj, v_proj, down_proj]}\n"
      << "data: {dataset: text, path: " << dir_ << "/text.txt, tokenizer: " << dir_ << "/base.gguf, block_size: 32}\n"
      << "optimizer: {name: adamw, lr: 0.01}\n"
      << "train: {batch_size: 4, eval_batches: 2, num_workers: 0}\n";  // 20 windows: 5 whole global batches
  auto args = [&](const std::string& out, int zero) {
    auto a = train_args(dir_ + "/lora.yaml", out, 10);
    if (zero >= 0) a.insert(a.end(), {"--set", "parallel.zero=" + std::to_string(zero)});
    return a;
  };
  auto one = testing::run_cli(args(dir_ + "/one", -1));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  for (int zero : {0, 2}) {
    const std::string run = dir_ + "/z" + std::to_string(zero);
    auto r = launch(2, args(run, zero));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(run + "/adapter.gguf")) << r.output;
    const double d = weight_difference(dir_ + "/one", run, 10);
    std::printf("[Launch] Llama LoRA, 10 steps, 2 ranks %s vs one process: weights within %.2g\n",
                zero ? "ZeRO-2" : "DDP", d);
    EXPECT_LT(d, 1e-5) << "zero " << zero;
    expect_same_curve(dir_ + "/one", run);
  }
  // Batches of 8 leave a short last batch of 4 each epoch: with drop_last it is
  // cut, on one process as at 2 ranks (without, the ranks would pad it).
  auto cut = [&](const std::string& out) {
    auto a = args(out, -1);
    a.insert(a.end(), {"--set", "train.batch_size=8", "--set", "train.drop_last=true"});
    return a;
  };
  auto one_cut = testing::run_cli(cut(dir_ + "/one_cut"));
  ASSERT_EQ(one_cut.exit_code, 0) << one_cut.output;
  auto two_cut = launch(2, cut(dir_ + "/two_cut"));
  ASSERT_EQ(two_cut.exit_code, 0) << two_cut.output;
  EXPECT_LT(weight_difference(dir_ + "/one_cut", dir_ + "/two_cut", 10), 1e-5);
  expect_same_curve(dir_ + "/one_cut", dir_ + "/two_cut");
}

// A profiled data-parallel run: each rank's reports, and one trace with a
// process per rank, each with its communication track.
TEST_F(Launch, ProfileMergesEveryRanksTraceWithItsCommunication) {
  auto a = train_args(kMlp, dir_ + "/prof", 4);
  a.insert(a.end(), {"--set", "train.profile_steps=2", "--set", "train.profile_warmup=1"});
  auto r = launch(2, a);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"/prof/profile/rank0/ops.txt", "/prof/profile/rank1/trace.json", "/prof/profile/trace.json"})
    EXPECT_TRUE(fs::exists(dir_ + f)) << f;
  std::ifstream in(dir_ + "/prof/profile/trace.json");
  json trace = json::parse(in);
  std::set<int> comm_ranks, ranks;
  std::set<std::string> names;
  for (auto& e : trace["traceEvents"]) {
    ranks.insert(e["pid"].get<int>());
    if (e.value("name", "") == "comm allreduce") comm_ranks.insert(e["pid"].get<int>());
    if (e.value("name", "") == "process_name") names.insert(e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  EXPECT_EQ(comm_ranks, (std::set<int>{0, 1}));  // the gradients' all-reduces on both ranks' tracks
  EXPECT_EQ(names, (std::set<std::string>{"rank 0", "rank 1"}));
}

TEST_F(Launch, BadParallelConfigsAreNamed) {
  auto a = train_args(kMlp, dir_ + "/a", 2);
  a.insert(a.end(), {"--set", "parallel.data=4"});
  auto r = launch(2, a);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.data is 4 but the launcher started 2 ranks"), std::string::npos) << r.output;
  auto b = train_args(kMlp, dir_ + "/b", 2);
  b.insert(b.end(), {"--set", "train.batch_size=127"});
  r = launch(2, b);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("does not divide among 2 ranks"), std::string::npos) << r.output;
  auto c = train_args(kMlp, dir_ + "/c", 2);
  c.insert(c.end(), {"--set", "parallel.data=2"});
  auto alone = testing::run_cli(c);
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.output.find("tessera launch -n 2"), std::string::npos) << alone.output;
  auto d = train_args(kMlp, dir_ + "/d", 2);
  d.insert(d.end(), {"--set", "parallel.zero=3", "--set", "parallel.find_unused_parameters=true"});
  r = launch(2, d);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("find_unused_parameters is not supported with zero: 3"), std::string::npos) << r.output;
  auto e = train_args(kMlp, dir_ + "/e", 2);
  e.insert(e.end(), {"--set", "parallel.zero=1", "--set", "parallel.compression=bf16"});
  r = launch(2, e);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("parallel.compression applies to plain data parallelism"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tessera
