#include "tessera/train/recipe.h"

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "tessera/data/datasets.h"
#include "tessera/data/shards.h"
#include "tessera/llm/llama_gguf.h"
#include "tessera/llm/lora.h"
#include "tessera/llm/tokenizer.h"
#include "tessera/nn/zoo/zoo.h"
#include "tessera/quant/prune.h"
#include "tessera/quant/qat.h"

namespace tessera::train {

using nlohmann::json;
using io::Config;

// ---- models -------------------------------------------------------------------------------
std::vector<std::string> model_names() {
  return {"mlp", "lenet", "resnet18", "resnet34", "resnet50", "resnet", "gpt", "llama"};
}

nn::ModulePtr build_model(Config& c, std::string* name_out) {
  const std::string name = c.require<std::string>("name");
  if (name_out) *name_out = name;
  nn::ModulePtr m;
  if (name == "mlp") {
    nn::zoo::MLPConfig k;
    k.in_features = c.get<int64_t>("in_features", k.in_features);
    k.hidden = c.get<std::vector<int64_t>>("hidden", k.hidden);
    k.num_classes = c.get<int64_t>("num_classes", k.num_classes);
    k.activation = c.get<std::string>("activation", k.activation);
    k.dropout = c.get<double>("dropout", k.dropout);
    c.finish();
    m = std::make_shared<nn::zoo::MLP>(k);
  } else if (name == "lenet") {
    nn::zoo::LeNetConfig k;
    k.in_channels = c.get<int64_t>("in_channels", k.in_channels);
    k.image_size = c.get<int64_t>("image_size", k.image_size);
    k.channels = c.get<std::vector<int64_t>>("channels", k.channels);
    k.hidden = c.get<int64_t>("hidden", k.hidden);
    k.num_classes = c.get<int64_t>("num_classes", k.num_classes);
    k.dropout = c.get<double>("dropout", k.dropout);
    c.finish();
    m = std::make_shared<nn::zoo::LeNet>(k);
  } else if (name.rfind("resnet", 0) == 0) {
    nn::zoo::ResNetConfig k = name == "resnet34"   ? nn::zoo::ResNetConfig::resnet34()
                              : name == "resnet50" ? nn::zoo::ResNetConfig::resnet50()
                                                   : nn::zoo::ResNetConfig::resnet18();
    TS_CHECK(name == "resnet" || name == "resnet18" || name == "resnet34" || name == "resnet50", "config: unknown ",
             "model '", name, "'");
    k.block = c.get<std::string>("block", k.block);
    k.layers = c.get<std::vector<int64_t>>("layers", k.layers);
    k.widths = c.get<std::vector<int64_t>>("widths", k.widths);
    k.stem = c.get<std::string>("stem", k.stem);
    k.in_channels = c.get<int64_t>("in_channels", k.in_channels);
    k.num_classes = c.get<int64_t>("num_classes", k.num_classes);
    c.finish();
    m = std::make_shared<nn::zoo::ResNet>(k);
  } else if (name == "gpt") {
    nn::zoo::GPTConfig k;
    k.vocab_size = c.get<int64_t>("vocab_size", k.vocab_size);
    k.block_size = c.get<int64_t>("block_size", k.block_size);
    k.n_layer = c.get<int64_t>("n_layer", k.n_layer);
    k.n_head = c.get<int64_t>("n_head", k.n_head);
    k.n_embd = c.get<int64_t>("n_embd", k.n_embd);
    k.dropout = c.get<double>("dropout", k.dropout);
    k.bias = c.get<bool>("bias", k.bias);
    k.weight_tying = c.get<bool>("weight_tying", k.weight_tying);
    k.gradient_checkpointing = c.get<bool>("gradient_checkpointing", k.gradient_checkpointing);
    k.checkpoint_segments = c.get<int64_t>("checkpoint_segments", k.checkpoint_segments);
    c.finish();
    m = std::make_shared<nn::zoo::GPT>(k);
  } else if (name == "llama") {
    nn::zoo::LlamaConfig k;
    k.vocab_size = c.get<int64_t>("vocab_size", k.vocab_size);
    k.dim = c.get<int64_t>("dim", k.dim);
    k.n_layers = c.get<int64_t>("n_layers", k.n_layers);
    k.n_heads = c.get<int64_t>("n_heads", k.n_heads);
    k.n_kv_heads = c.get<int64_t>("n_kv_heads", k.n_heads);
    k.hidden_dim = c.get<int64_t>("hidden_dim", k.hidden_dim);
    k.norm_eps = c.get<double>("norm_eps", k.norm_eps);
    k.rope_theta = c.get<double>("rope_theta", k.rope_theta);
    k.max_seq_len = c.get<int64_t>("max_seq_len", k.max_seq_len);
    k.tie_embeddings = c.get<bool>("tie_embeddings", k.tie_embeddings);
    k.gradient_checkpointing = c.get<bool>("gradient_checkpointing", k.gradient_checkpointing);
    k.checkpoint_segments = c.get<int64_t>("checkpoint_segments", k.checkpoint_segments);
    c.finish();
    m = std::make_shared<nn::zoo::Llama>(k);
  } else {
    std::string all;
    for (auto& n : model_names()) all += (all.empty() ? "" : ", ") + n;
    TS_ERROR("config: unknown model '", name, "' at '", c.key_path("name"), "'; available models: ", all);
  }
  return m;
}

// ---- data ---------------------------------------------------------------------------------
namespace {

// The parameters an optimizer moves, by name: frozen ones (a LoRA run's base) are left out.
std::vector<std::pair<std::string, Tensor>> trainable(nn::Module& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : m.named_parameters())
    if (p.requires_grad()) out.emplace_back(name, p);
  return out;
}

// The model section of a LoRA run: the base file's Llama, where the config
// may set only what does not change the weights (the training context,
// gradient checkpointing); any other key given must agree with the file.
json lora_model_config(const json& given, const nn::zoo::LlamaConfig& c, const std::string& base) {
  json m = {{"name", "llama"},           {"vocab_size", c.vocab_size}, {"dim", c.dim},
            {"n_layers", c.n_layers},    {"n_heads", c.n_heads},       {"n_kv_heads", c.n_kv_heads},
            {"hidden_dim", c.hidden_dim}, {"norm_eps", c.norm_eps},     {"rope_theta", c.rope_theta},
            {"max_seq_len", c.max_seq_len}, {"tie_embeddings", c.tie_embeddings}};
  TS_CHECK(given.is_object(), "config: model must be a mapping");
  for (const auto& [key, v] : given.items()) {
    if (key == "max_seq_len" || key == "gradient_checkpointing" || key == "checkpoint_segments") {
      m[key] = v;
    } else {
      TS_CHECK(m.contains(key), "config: model.", key, " does not apply to a LoRA run's Llama (", base,
               " gives the model)");
      const bool same = m[key] == v || (m[key].is_number() && v.is_number() &&
                                         std::abs(m[key].get<double>() - v.get<double>()) <=
                                             1e-6 * std::abs(m[key].get<double>()));
      TS_CHECK(same, "config: model.", key, " is ", v.dump(), " but the LoRA base ", base, " has ", m[key].dump());
    }
  }
  return m;
}

data::Transform image_augmentation(Config a) {
  std::vector<data::Transform> ts;
  if (a.has("random_crop")) {
    Config rc = a.section("random_crop");
    ts.push_back(data::random_crop(rc.require<int64_t>("size"), rc.get<int64_t>("padding", 0)));
    rc.finish();
  }
  double flip = a.get<double>("horizontal_flip", 0.0);
  if (flip > 0) ts.push_back(data::random_horizontal_flip(flip));
  double erase = a.get<double>("random_erasing", 0.0);
  if (erase > 0) ts.push_back(data::random_erasing(erase));
  a.finish();
  return ts.empty() ? nullptr : data::compose(ts);
}

data::DatasetPtr take(data::DatasetPtr d, int64_t n) {
  if (n <= 0 || n >= d->size()) return d;
  return std::make_shared<data::Subset>(d, 0, n);
}

void build_data(Config c, Recipe& r) {
  const std::string kind = c.get<std::string>("dataset", "fashion_mnist");
  const int64_t train_subset = c.get<int64_t>("train_subset", 0), eval_subset = c.get<int64_t>("eval_subset", 0);
  TS_CHECK(train_subset >= 0 && eval_subset >= 0, "config: data.train_subset and data.eval_subset must be >= 0");
  if (kind == "fashion_mnist" || kind == "mnist") {
    const std::string root = c.get<std::string>("root", kind == "mnist" ? "data/mnist" : data::kFashionMNISTRoot);
    data::Transform aug = c.has("augment") ? image_augmentation(c.section("augment")) : nullptr;
    c.allow("augment");
    std::shared_ptr<data::Dataset> tr, ev;
    if (kind == "mnist") {
      tr = std::make_shared<data::MNIST>(root, "train", 0.1307, 0.3081, aug);
      ev = std::make_shared<data::MNIST>(root, "test");
    } else {
      tr = std::make_shared<data::FashionMNIST>(root, "train", aug);
      ev = std::make_shared<data::FashionMNIST>(root, "test");
    }
    r.train_data = take(tr, train_subset);
    r.eval_data = take(ev, eval_subset);
    r.task = Task::Classification;
  } else if (kind == "synthetic_images") {
    const int64_t ch = c.get<int64_t>("channels", 3), h = c.get<int64_t>("height", 32), w = c.get<int64_t>("width", 32);
    const int64_t classes = c.get<int64_t>("num_classes", 10);
    r.train_data = std::make_shared<data::SyntheticImages>(c.get<int64_t>("train_size", 50000), ch, h, w, classes, 1);
    r.eval_data = std::make_shared<data::SyntheticImages>(c.get<int64_t>("eval_size", 10000), ch, h, w, classes, 2);
    r.task = Task::Classification;
  } else if (kind == "text" || kind == "fortunes") {
    std::string text = kind == "fortunes" ? data::read_fortunes(c.get<std::string>("path", data::kFortunesDir))
                                          : data::read_text_file(c.require<std::string>("path"));
    const int64_t block = c.get<int64_t>("block_size", 128), stride = c.get<int64_t>("stride", 0);
    const double val = c.get<double>("val_fraction", 0.1);
    TS_CHECK(val > 0 && val < 0.5, "config: data.val_fraction must be in (0, 0.5), got ", val);
    std::shared_ptr<data::TextDataset> all;
    if (c.has("tokenizer")) {
      // Subword tokens: each document (a fortune, or the whole file) encoded
      // with the tokenizer, BOS first as the model's tokenizer asks.
      TS_CHECK(!c.has("level"), "config: data.level and data.tokenizer exclude each other");
      std::string tpath = c.require<std::string>("tokenizer");
      if (tpath.starts_with("~/"))
        if (const char* home = std::getenv("HOME")) tpath = home + tpath.substr(1);
      TS_CHECK(std::filesystem::exists(tpath), "config: data.tokenizer ", tpath, " does not exist (a SentencePiece "
               ".model or a .gguf file; scripts/fortunes_tokenizer.sh makes the fortunes one)");
      auto tok = std::make_shared<llm::Tokenizer>(llm::Tokenizer::from_file(tpath));
      std::vector<int64_t> ids;
      auto add = [&](std::string_view doc) {
        for (int32_t id : tok->encode(doc, true, false)) ids.push_back(id);
      };
      if (kind == "fortunes") {
        for (size_t pos = 0; pos < text.size();) {  // fortunes end with a line holding "%"
          size_t end = text.find("\n%\n", pos);
          const size_t next = end == std::string::npos ? text.size() : end + 3;
          if (end == std::string::npos) end = text.size();
          std::string_view doc(text.data() + pos, end - pos);
          if (doc.starts_with("%\n")) doc.remove_prefix(2);
          if (!doc.empty()) add(std::string(doc) + "\n");
          pos = next;
        }
      } else {
        add(text);
      }
      all = data::TextDataset::from_tokens(std::move(ids), tok->size(), block, stride);
      r.tokenizer = tok;
      r.text_level = "tokens";
    } else {
      const std::string level = c.get<std::string>("level", "char");
      all = std::make_shared<data::TextDataset>(text, block, level, std::vector<std::string>{}, stride);
      r.vocab = all->vocab();
      r.text_level = level;
    }
    auto tr = all->split(0, 1 - val), ev = all->split(1 - val, 1);
    r.train_data = take(tr, train_subset);
    r.eval_data = take(ev, eval_subset);
    r.task = Task::LanguageModel;
  } else if (kind == "synthetic_tokens") {
    const int64_t block = c.get<int64_t>("block_size", 256), vocab = c.get<int64_t>("vocab_size", 256);
    r.train_data = std::make_shared<data::SyntheticTokens>(c.get<int64_t>("train_size", 10000), block, vocab, 1);
    r.eval_data = std::make_shared<data::SyntheticTokens>(c.get<int64_t>("eval_size", 500), block, vocab, 2);
    r.task = Task::LanguageModel;
  } else if (kind == "csv") {
    const int64_t label = c.get<int64_t>("label_column", -1);
    r.train_data = take(data::csv_dataset(c.require<std::string>("train_path"), label), train_subset);
    std::string ev = c.get<std::string>("eval_path", "");
    r.eval_data = ev.empty() ? nullptr : take(data::csv_dataset(ev, label), eval_subset);
    r.task = Task::Classification;
  } else if (kind == "npy") {
    r.train_data = take(data::npy_dataset(c.require<std::vector<std::string>>("train")), train_subset);
    auto ev = c.get<std::vector<std::string>>("eval", {});
    r.eval_data = ev.empty() ? nullptr : take(data::npy_dataset(ev), eval_subset);
    r.task = Task::Classification;
  } else {
    TS_ERROR("config: unknown data.dataset '", kind,
             "' (expected fashion_mnist, mnist, synthetic_images, text, fortunes, synthetic_tokens, csv or npy)");
  }
  c.finish();
}

optim::Options optimizer_options(Config& c, const std::string& name) {
  const optim::Options defaults = name == "sgd"       ? optim::SGD::default_options()
                                  : name == "adam"    ? optim::Adam::default_options()
                                  : name == "adamw"   ? optim::AdamW::default_options()
                                  : name == "rmsprop" ? optim::RMSprop::default_options()
                                  : name == "adagrad" ? optim::Adagrad::default_options()
                                  : name == "lion"    ? optim::Lion::default_options()
                                                      : optim::Options{};
  if (defaults.empty()) {
    std::string all;
    for (auto& n : optim::optimizer_names()) all += (all.empty() ? "" : ", ") + n;
    TS_ERROR("config: unknown optimizer '", name, "' at 'optimizer.name'; available: ", all);
  }
  optim::Options o;
  for (auto& [k, v] : defaults) {
    if (k == "beta1" || k == "beta2") continue;
    if (k == "nesterov" || k == "amsgrad" || k == "centered" || k == "maximize")
      o[k] = c.get<bool>(k, v != 0) ? 1 : 0;
    else
      o[k] = c.get<double>(k, v);
  }
  if (defaults.count("beta1")) {
    auto betas = c.get<std::vector<double>>("betas", {defaults.at("beta1"), defaults.at("beta2")});
    TS_CHECK(betas.size() == 2, "config: 'optimizer.betas' must be a list of two numbers");
    o["beta1"] = betas[0];
    o["beta2"] = betas[1];
  }
  return o;
}

}  // namespace

// ---- the whole recipe ------------------------------------------------------------------------
Recipe build_recipe(const json& config, const std::string& what, bool model_only, bool shard_model) {
  Recipe r;
  r.config = config;
  Config root(config);
  try {
    // data first: language models take their vocabulary size from it
    Config data_cfg = root.section("data");
    if (!model_only) build_data(data_cfg, r);
    Config t = root.section("train");
    TrainSettings& s = r.train;
    s.epochs = t.get<int64_t>("epochs", s.epochs);
    s.steps = t.get<int64_t>("steps", s.steps);
    s.batch_size = t.get<int64_t>("batch_size", s.batch_size);
    s.eval_batch_size = t.get<int64_t>("eval_batch_size", std::max<int64_t>(s.batch_size, 256));
    s.grad_accum = t.get<int64_t>("grad_accum", s.grad_accum);
    s.clip_grad_norm = t.get<double>("clip_grad_norm", s.clip_grad_norm);
    s.clip_grad_value = t.get<double>("clip_grad_value", s.clip_grad_value);
    s.seed = static_cast<uint64_t>(t.get<int64_t>("seed", 0));
    s.eval_every = t.get<int64_t>("eval_every", s.eval_every);
    s.eval_batches = t.get<int64_t>("eval_batches", s.eval_batches);
    s.checkpoint_every = t.get<int64_t>("checkpoint_every", s.checkpoint_every);
    s.keep_checkpoints = t.get<int64_t>("keep_checkpoints", s.keep_checkpoints);
    s.log_every = t.get<int64_t>("log_every", s.log_every);
    s.num_workers = static_cast<int>(t.get<int64_t>("num_workers", s.num_workers));
    s.drop_last = t.get<bool>("drop_last", s.drop_last);
    s.threads = static_cast<int>(t.get<int64_t>("threads", s.threads));
    const std::string precision = t.get<std::string>("precision", "f32");
    TS_CHECK(precision == "f32" || precision == "bf16" || precision == "f16", "config: '", t.key_path("precision"),
             "' must be f32, bf16 or f16, got '", precision, "'");
    s.precision = precision == "bf16" ? DType::BF16 : precision == "f16" ? DType::F16 : DType::F32;
    {
      Config g = t.section("grad_scaler");
      GradScalerOptions& o = s.grad_scaler;
      o.enabled = g.get<bool>("enabled", s.precision == DType::F16);
      o.init_scale = g.get<double>("init_scale", o.init_scale);
      o.growth_factor = g.get<double>("growth_factor", o.growth_factor);
      o.backoff_factor = g.get<double>("backoff_factor", o.backoff_factor);
      o.growth_interval = g.get<int64_t>("growth_interval", o.growth_interval);
      g.finish();
      GradScaler check(o);  // validates the values
    }
    s.profile_steps = t.get<int64_t>("profile_steps", s.profile_steps);
    s.profile_warmup = t.get<int64_t>("profile_warmup", s.profile_warmup);
    s.detect_anomaly = t.get<bool>("detect_anomaly", s.detect_anomaly);
    TS_CHECK(s.profile_steps >= 0 && s.profile_warmup >= 0, "config: train.profile_steps and train.profile_warmup "
             "must be >= 0");
    t.finish();
    {
      Config m = root.section("monitor");
      MonitorSettings& ms = r.monitor;
      ms.port = static_cast<int>(m.get<int64_t>("port", ms.port));
      ms.host = m.get<std::string>("host", ms.host);
      ms.layer_stats = m.get<bool>("layer_stats", ms.layer_stats);
      ms.layer_stats_every = m.get<int64_t>("layer_stats_every", ms.layer_stats_every);
      m.finish();
      TS_CHECK(ms.port >= -1 && ms.port <= 65535, "config: '", m.key_path("port"),
               "' must be a TCP port (0 for any free one, -1 for off), got ", ms.port);
      TS_CHECK(ms.layer_stats_every >= 0, "config: monitor.layer_stats_every must be >= 0");
    }
    {
      Config pc = root.section("parallel");
      ParallelSettings& ps = r.parallel;
      ps.data = pc.get<int64_t>("data", ps.data);
      ps.zero = pc.get<int64_t>("zero", ps.zero);
      ps.find_unused_parameters = pc.get<bool>("find_unused_parameters", ps.find_unused_parameters);
      ps.sync_batch_norm = pc.get<bool>("sync_batch_norm", ps.sync_batch_norm);
      ps.bucket_mb = pc.get<double>("bucket_mb", ps.bucket_mb);
      ps.first_bucket_mb = pc.get<double>("first_bucket_mb", ps.first_bucket_mb);
      ps.overlap = pc.get<bool>("overlap", ps.overlap);
      ps.compression = pc.get<std::string>("compression", ps.compression);
      ps.powersgd_rank = pc.get<int64_t>("powersgd_rank", ps.powersgd_rank);
      ps.powersgd_start_step = pc.get<int64_t>("powersgd_start_step", ps.powersgd_start_step);
      ps.tensor = pc.get<int64_t>("tensor", ps.tensor);
      ps.pipeline = pc.get<int64_t>("pipeline", ps.pipeline);
      ps.sequence_parallel = pc.get<bool>("sequence_parallel", ps.sequence_parallel);
      ps.schedule = pc.get<std::string>("schedule", ps.schedule);
      ps.micro_batches = pc.get<int64_t>("micro_batches", ps.micro_batches);
      ps.virtual_stages = pc.get<int64_t>("virtual_stages", ps.virtual_stages);
      ps.pipeline_split = pc.get<std::string>("pipeline_split", ps.pipeline_split);
      pc.finish();
      TS_CHECK(ps.tensor >= 1 && ps.tensor <= 4096 && ps.pipeline >= 1 && ps.pipeline <= 4096, "config: '",
               pc.key_path("tensor"), "' and '", pc.key_path("pipeline"), "' must be from 1 to 4096, got ", ps.tensor,
               " and ", ps.pipeline);
      TS_CHECK(ps.micro_batches >= 0 && ps.micro_batches <= 65536 && ps.virtual_stages >= 1 && ps.virtual_stages <= 64,
               "config: parallel.micro_batches must be from 0 (2 x pipeline) to 65536 and virtual_stages from 1 to 64");
      TS_CHECK(ps.schedule == "gpipe" || ps.schedule == "1f1b" || ps.schedule == "interleaved", "config: '",
               pc.key_path("schedule"), "' is '", ps.schedule, "'; expected gpipe, 1f1b or interleaved");
      TS_CHECK(ps.pipeline_split == "layers" || ps.pipeline_split == "parameters" || ps.pipeline_split == "time",
               "config: '", pc.key_path("pipeline_split"), "' is '", ps.pipeline_split,
               "'; expected layers, parameters or time");
      TS_CHECK(!ps.splits_model() || (ps.zero <= 1 && ps.compression == "none" && !ps.sync_batch_norm), "config: "
               "parallel.tensor and parallel.pipeline run with data parallelism or ZeRO-1 over the data dimension "
               "(zero: 0 or 1, no compression, no sync_batch_norm); parallel.zero is ", ps.zero);
      TS_CHECK(!ps.sequence_parallel || ps.tensor > 1, "config: parallel.sequence_parallel needs parallel.tensor > 1");
      TS_CHECK(ps.compression == "none" || ps.compression == "bf16" || ps.compression == "powersgd", "config: '",
               pc.key_path("compression"), "' is '", ps.compression, "'; expected none, bf16 or powersgd");
      TS_CHECK(ps.compression == "none" || ps.zero == 0, "config: parallel.compression applies to plain data "
               "parallelism (zero: 0); ZeRO's reduce-scatters are not compressed");
      TS_CHECK(ps.powersgd_rank >= 1 && ps.powersgd_rank <= 1024 && ps.powersgd_start_step >= 0, "config: "
               "parallel.powersgd_rank must be in 1..1024 and powersgd_start_step >= 0");
      TS_CHECK(ps.data >= 0 && ps.data <= 65536, "config: '", pc.key_path("data"),
               "' must be the number of data-parallel ranks (0: as many as launched), got ", ps.data);
      TS_CHECK(ps.zero >= 0 && ps.zero <= 3, "config: '", pc.key_path("zero"), "' is ", ps.zero,
               "; ZeRO stages are 0 (plain data parallelism), 1 (optimizer state sharded), 2 (gradients too), "
               "3 (parameters too)");
      TS_CHECK(ps.zero < 3 || !ps.find_unused_parameters, "config: parallel.find_unused_parameters is not supported "
               "with zero: 3 (every rank must gather the same units in the same order); use zero: 2");
      TS_CHECK(ps.bucket_mb > 0 && ps.first_bucket_mb > 0, "config: parallel.bucket_mb and first_bucket_mb must be positive");
      TS_CHECK(ps.data <= 1 || s.batch_size % ps.data == 0, "config: train.batch_size ", s.batch_size,
               " does not divide among parallel.data = ", ps.data, " ranks; make it a multiple of ", ps.data);
    }
    TS_CHECK(s.epochs > 0 || s.steps > 0, "config: set train.epochs or train.steps to a positive number");
    TS_CHECK(s.batch_size > 0 && s.eval_batch_size > 0, "config: train.batch_size must be positive");
    TS_CHECK(s.grad_accum >= 1, "config: train.grad_accum must be at least 1, got ", s.grad_accum);
    TS_CHECK(s.num_workers >= 0 && s.num_workers <= 64, "config: train.num_workers must be in [0, 64]");
    TS_CHECK(s.log_every > 0, "config: train.log_every must be positive");
    TS_CHECK(s.clip_grad_norm >= 0 && s.clip_grad_value >= 0, "config: gradient clipping values must be >= 0");

    manual_seed(s.seed);  // the model's initial weights follow the seed
    // LoRA fine-tuning (Note [LoRA] in llm/lora.h): the base model's file
    // gives the architecture and the weights.
    std::shared_ptr<nn::zoo::Llama> lora_base;
    if (root.has("lora")) {
      const json& lj = root.json()["lora"];
      TS_CHECK(lj.is_object() && lj.contains("base") && lj["base"].is_string(),
               "config: lora.base must name the base model's GGUF file");
      std::string base = lj["base"].get<std::string>();
      if (base.starts_with("~/"))
        if (const char* home = std::getenv("HOME")) base = home + base.substr(1);
      lora_base = llm::load_llama_gguf(llm::GgufFile::open(base));
      r.config["model"] = lora_model_config(root.has("model") ? root.json()["model"] : json::object(),
                                            lora_base->config, base);
      root.allow("model");
    }
    Config model_cfg = lora_base ? Config(r.config["model"], "model") : root.section("model");
    if (r.task == Task::LanguageModel && !model_cfg.has("vocab_size") && r.train_data) {
      int64_t vocab = r.tokenizer ? r.tokenizer->size() : r.vocab.empty() ? 256 : static_cast<int64_t>(r.vocab.size());
      if (model_cfg.json().value("name", "") == "gpt" || model_cfg.json().value("name", "") == "llama") {
        json j = model_cfg.json();
        j["vocab_size"] = vocab;
        model_cfg = Config(j, "model");
        r.config["model"]["vocab_size"] = vocab;  // saved with checkpoints, so eval/info rebuild this model
      }
    }
    // ZeRO-3 of a plain model, or a GPT or Llama split by tensor or pipeline
    // parallelism: built on meta, and only each rank's part materialized
    // from the seed, by the Trainer's ZeRO or Parallel3D (LoRA, pruning, QAT
    // and SyncBatchNorm read or replace the weights as they are set up, and
    // a pipeline cut by time runs the layers, so they get it whole).
    const std::string model_name = model_cfg.json().value("name", "");
    const bool split = r.parallel.splits_model() && (model_name == "gpt" || model_name == "llama") &&
                       r.parallel.pipeline_split != "time";
    const bool on_meta = shard_model && !model_only && (r.parallel.zero == 3 || split) && !lora_base &&
                         !root.has("prune") && !root.has("qat") && !r.parallel.sync_batch_norm;
    {
      std::optional<DeviceScope> meta;
      if (on_meta) meta.emplace(Device::meta());
      r.model = build_model(model_cfg, &r.model_name);
    }
    if (on_meta) manual_seed(s.seed);  // materializing draws the numbers again from here
    if (lora_base) {
      Config lc = root.section("lora");
      (void)lc.require<std::string>("base");
      llm::LoraConfig k;
      k.rank = lc.get<int64_t>("rank", k.rank);
      k.alpha = lc.get<double>("alpha", k.alpha);
      k.targets = lc.get<std::vector<std::string>>("targets", k.targets);
      lc.finish();
      auto& llama = dynamic_cast<nn::zoo::Llama&>(*r.model);
      llama.load_state_dict(lora_base->state_dict(), true);
      if (r.tokenizer)
        TS_CHECK(r.tokenizer->size() == llama.config.vocab_size, "config: the base model's vocabulary has ",
                 llama.config.vocab_size, " tokens, data.tokenizer's ", r.tokenizer->size());
      llm::add_lora(llama, k);
    }
    if (root.has("prune")) {
      // A pruned model (tessera prune writes this): the layers carry masks
      // (Note [Pruning masks]); a checkpoint loaded next replaces them.
      Config pc = root.section("prune");
      quant::PruneConfig p;
      p.sparsity = pc.get<double>("sparsity", p.sparsity);
      p.method = pc.get<std::string>("method", p.method);
      p.global = pc.get<bool>("global", p.global);
      p.skip = pc.get<std::vector<std::string>>("skip", p.skip);
      pc.finish();
      quant::prune(*r.model, p);
    }
    if (root.has("qat")) {
      // Quantization-aware training (Note [QAT layers]): the layers train
      // with fake quantization; a checkpoint loaded next restores the ranges
      // they learned. After the pruning masks, so pruned weights stay pruned.
      quant::prepare_qat(*r.model, quant::qat_config_from_json(root.section("qat").json()));
    }

    Config oc = root.section("optimizer");
    const std::string opt_name = oc.get<std::string>("name", "adam");
    optim::Options opts = optimizer_options(oc, opt_name);
    const bool no_decay_1d = oc.get<bool>("no_decay_on_1d", false);
    oc.finish();
    r.make_optimizer = [opt_name, opts, no_decay_1d](nn::Module& m) {
      std::vector<optim::ParamGroup> groups;
      if (no_decay_1d) {  // biases and norm weights without weight decay (the GPT recipe)
        optim::ParamGroup decay, no_decay;
        no_decay.options["weight_decay"] = 0;
        for (auto& [name, p] : trainable(m)) {
          optim::ParamGroup& g = p.dim() >= 2 ? decay : no_decay;
          g.params.push_back(p);
          g.names.push_back(name);
        }
        if (!decay.params.empty()) groups.push_back(decay);
        if (!no_decay.params.empty()) groups.push_back(no_decay);
      } else {
        optim::ParamGroup all;
        for (auto& [name, p] : trainable(m)) all.params.push_back(p), all.names.push_back(name);
        groups.push_back(std::move(all));
      }
      return optim::make_optimizer(opt_name, std::move(groups), opts);
    };

    Config sc = root.section("scheduler");
    const std::string sname = sc.get<std::string>("name", "constant");
    json sargs = sc.json();
    if (sname == "step") sc.require<int64_t>("step_size"), sc.get<double>("gamma", 0.1);
    else if (sname == "multistep") sc.require<std::vector<int64_t>>("milestones"), sc.get<double>("gamma", 0.1);
    else if (sname == "exponential") sc.require<double>("gamma");
    else if (sname == "cosine") sc.get<int64_t>("T_max", 0), sc.get<double>("eta_min", 0.0);
    else if (sname == "linear")
      sc.get<double>("start_factor", 1.0 / 3), sc.get<double>("end_factor", 1.0), sc.get<int64_t>("total_iters", 5);
    else if (sname == "warmup_cosine")
      sc.get<int64_t>("warmup_steps", 0), sc.get<double>("min_lr", 0.0), sc.get<int64_t>("total_steps", 0);
    else if (sname == "onecycle")
      sc.require<double>("max_lr"), sc.get<double>("pct_start", 0.3), sc.get<int64_t>("total_steps", 0),
          sc.get<std::string>("anneal_strategy", "cos"), sc.get<bool>("cycle_momentum", true),
          sc.get<double>("div_factor", 25.0), sc.get<double>("final_div_factor", 1e4);
    else if (sname == "plateau")
      sc.get<double>("factor", 0.1), sc.get<int64_t>("patience", 10), sc.get<double>("threshold", 1e-4),
          sc.get<std::string>("mode", "min"), sc.get<int64_t>("cooldown", 0), sc.get<double>("min_lr", 0.0);
    else
      TS_CHECK(sname == "constant", "config: unknown scheduler '", sname,
               "' (expected constant, step, multistep, exponential, cosine, linear, warmup_cosine, onecycle or "
               "plateau)");
    sc.finish();
    r.make_scheduler = [sname, sargs](optim::Optimizer& o, int64_t total) -> optim::SchedulerPtr {
      auto num = [&](const char* k, double d) { return sargs.contains(k) ? sargs[k].get<double>() : d; };
      auto integer = [&](const char* k, int64_t d) {
        return sargs.contains(k) && sargs[k].get<int64_t>() > 0 ? sargs[k].get<int64_t>() : d;
      };
      if (sname == "step") return std::make_unique<optim::StepLR>(o, integer("step_size", 1), num("gamma", 0.1));
      if (sname == "multistep")
        return std::make_unique<optim::MultiStepLR>(o, sargs["milestones"].get<std::vector<int64_t>>(), num("gamma", 0.1));
      if (sname == "exponential") return std::make_unique<optim::ExponentialLR>(o, num("gamma", 1.0));
      if (sname == "cosine") return std::make_unique<optim::CosineAnnealingLR>(o, integer("T_max", total), num("eta_min", 0));
      if (sname == "linear")
        return std::make_unique<optim::LinearLR>(o, num("start_factor", 1.0 / 3), num("end_factor", 1.0),
                                                 integer("total_iters", 5));
      if (sname == "warmup_cosine")
        return std::make_unique<optim::WarmupCosineLR>(o, integer("warmup_steps", 0), integer("total_steps", total),
                                                       num("min_lr", 0.0));
      if (sname == "onecycle")
        return std::make_unique<optim::OneCycleLR>(
            o, num("max_lr", 0), integer("total_steps", total), num("pct_start", 0.3),
            sargs.value("anneal_strategy", std::string("cos")), sargs.value("cycle_momentum", true), 0.85, 0.95,
            num("div_factor", 25.0), num("final_div_factor", 1e4));
      if (sname == "plateau")
        return std::make_unique<optim::ReduceLROnPlateau>(o, sargs.value("mode", std::string("min")),
                                                          num("factor", 0.1), integer("patience", 10),
                                                          num("threshold", 1e-4), "rel", integer("cooldown", 0),
                                                          num("min_lr", 0.0));
      return nullptr;
    };
    r.output_dir = root.get<std::string>("output", "runs/" + r.model_name);
    root.allow("name");         // a free-form run name
    root.allow("description");
    root.finish();
  } catch (const Error& e) {
    TS_ERROR(what, ": ", e.what());
  }
  return r;
}

Recipe load_recipe(const std::string& path) {
  json j = io::load_yaml(path);
  return build_recipe(j, path);
}

void apply_override(json& config, const std::string& a) {
  size_t eq = a.find('=');
  TS_CHECK(eq != std::string::npos && eq > 0, "--set expects key.path=value, got '", a, "'");
  std::string path = a.substr(0, eq);
  json value = io::parse_yaml(a.substr(eq + 1), "--set " + path);
  json* node = &config;
  size_t start = 0;
  for (;;) {
    size_t dot = path.find('.', start);
    std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    TS_CHECK(!key.empty(), "--set: empty key in '", path, "'");
    if (!node->is_object()) *node = json::object();
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    node = &(*node)[key];
    start = dot + 1;
  }
}

}  // namespace tessera::train
