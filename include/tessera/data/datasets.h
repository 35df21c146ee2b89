#pragma once
// Ready-made datasets.
#include <map>
#include <string>

#include "tessera/data/dataset.h"
#include "tessera/data/transforms.h"

namespace tessera::data {

// ---- images -------------------------------------------------------------------------
// An IDX file (the MNIST format), gzip-compressed or not: U8 [N, rows, cols]
// for images, I64 [N] for labels. Every header field is checked.
Tensor read_idx(const std::string& path);

// MNIST-format image classification: samples are {image F32 [1, H, W], label I64 []}.
// Images are scaled to [0, 1], normalised with (mean, std) and then passed
// through `transform` (if any).
class MNIST : public Dataset {
 public:
  // split: "train" or "test". root holds {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].
  MNIST(const std::string& root, const std::string& split, double mean = 0.1307, double std = 0.3081,
        Transform transform = nullptr);
  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& images() const { return images_; }  // U8 [N, H, W]
  const Tensor& labels() const { return labels_; }

 private:
  Tensor images_, labels_;
  double mean_, std_;
  Transform transform_;
};

// Fashion-MNIST: same format; default root is Debian's dataset-fashion-mnist.
constexpr const char* kFashionMNISTRoot = "/usr/share/datasets/fashion-mnist";
class FashionMNIST : public MNIST {
 public:
  FashionMNIST(const std::string& root, const std::string& split, Transform transform = nullptr)
      : MNIST(root, split, 0.2860, 0.3530, std::move(transform)) {}
  static const char* class_name(int64_t label);
};

// ---- tables ---------------------------------------------------------------------------
// A numeric CSV file as F32 [rows, cols]; the first line is skipped when it is a
// header (has a non-numeric field). Errors name the line and column.
Tensor read_csv(const std::string& path);
// Features and an integer label column (negative = counted from the end).
std::shared_ptr<TensorDataset> csv_dataset(const std::string& path, int64_t label_column = -1);
// Samples are rows of the given .npy files.
std::shared_ptr<TensorDataset> npy_dataset(const std::vector<std::string>& paths);

// ---- text ------------------------------------------------------------------------------
// Language-modelling windows over a text: sample i = {x I64 [block], y I64 [block]}
// with y = x shifted by one token, starting at token i * stride.
// level "byte": tokens are bytes (vocabulary 256). level "char": tokens are the
// distinct UTF-8 characters of the text (or of a given vocabulary), sorted.
class TextDataset : public Dataset {
 public:
  TextDataset(const std::string& text, int64_t block_size, const std::string& level = "byte",
              std::vector<std::string> vocab = {}, int64_t stride = 0);
  // Text already tokenized (level "tokens", e.g. by a SentencePiece
  // tokenizer): ids in [0, vocab_size).
  static std::shared_ptr<TextDataset> from_tokens(std::vector<int64_t> ids, int64_t vocab_size, int64_t block_size,
                                                  int64_t stride = 0);
  int64_t size() const override;
  Example get(int64_t i) const override;
  int64_t vocab_size() const {
    return level_ == "byte" ? 256 : level_ == "tokens" ? token_vocab_ : static_cast<int64_t>(vocab_.size());
  }
  const std::vector<std::string>& vocab() const { return vocab_; }  // char level
  const std::string& level() const { return level_; }
  Tensor encode(const std::string& text) const;
  std::string decode(const Tensor& tokens) const;
  int64_t num_tokens() const { return tokens_.numel(); }
  // A [begin, end) fraction of the tokens as a new dataset (train/validation split).
  std::shared_ptr<TextDataset> split(double begin, double end) const;

 private:
  TextDataset() = default;
  Tensor tokens_;  // I64 [n]
  int64_t block_ = 0, stride_ = 0, token_vocab_ = 0;
  std::string level_;
  std::vector<std::string> vocab_;
  std::map<std::string, int64_t> index_;
};

// Every fortune file under dir (default: Debian's `fortunes` package), concatenated.
constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
std::string read_fortunes(const std::string& dir = kFortunesDir);
std::string read_text_file(const std::string& path);

// ---- synthetic -------------------------------------------------------------------------
// Deterministic random samples for benchmarks: image i is N(0, 1) noise with a
// class-dependent offset, so a model can learn it; built from (seed, i) only.
class SyntheticImages : public Dataset {
 public:
  SyntheticImages(int64_t size, int64_t channels, int64_t height, int64_t width, int64_t num_classes,
                  uint64_t seed = 0);
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;

 private:
  int64_t n_, c_, h_, w_, classes_;
  uint64_t seed_;
};

// Random token windows {x [block], y [block]} (y = x shifted), vocabulary `vocab`.
class SyntheticTokens : public Dataset {
 public:
  SyntheticTokens(int64_t size, int64_t block_size, int64_t vocab, uint64_t seed = 0);
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override;

 private:
  int64_t n_, block_, vocab_;
  uint64_t seed_;
};

}  // namespace tessera::data
