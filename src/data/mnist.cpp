// IDX files and the MNIST / Fashion-MNIST datasets.
#include <zlib.h>

#include "tessera/data/datasets.h"
#include "tessera/io/file.h"
#include "tessera/ops/ops.h"

namespace tessera::data {

Tensor read_idx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  TS_CHECK(f, "cannot open ", path);
  struct Closer {
    gzFile f;
    ~Closer() { gzclose(f); }
  } closer{f};
  auto read_exact = [&](void* dst, size_t n, const char* what) {
    size_t got = 0;
    while (got < n) {
      int chunk = static_cast<int>(std::min<size_t>(n - got, 1u << 30));
      int r = gzread(f, static_cast<char*>(dst) + got, static_cast<unsigned>(chunk));
      TS_CHECK(r > 0, path, ": truncated or corrupt while reading the ", what, " (", got, " of ", n, " bytes)");
      got += static_cast<size_t>(r);
    }
  };
  unsigned char magic[4];
  read_exact(magic, 4, "magic number");
  TS_CHECK(magic[0] == 0 && magic[1] == 0, path, ": not an IDX file (bad magic number)");
  TS_CHECK(magic[2] == 0x08, path, ": IDX element type 0x", std::hex, int(magic[2]), " is not supported (only "
           "unsigned bytes, 0x08)");
  const int ndim = magic[3];
  TS_CHECK(ndim >= 1 && ndim <= 4, path, ": IDX files with ", ndim, " dimensions are not supported (1 to 4)");
  Shape shape;
  uint64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    read_exact(b, 4, "dimensions");
    uint32_t v = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
    TS_CHECK(v > 0 && v <= (1u << 28), path, ": dimension ", d, " is ", v, ", outside 1..2^28");
    numel *= v;
    TS_CHECK(numel <= (uint64_t(1) << 34), path, ": the data would be larger than 16 GiB");
    shape.push_back(v);
  }
  Tensor t = empty(shape, DType::U8);
  read_exact(t.raw_data(), numel, "data");
  char extra;
  TS_CHECK(gzread(f, &extra, 1) == 0, path, ": has bytes after the ", numel, " data bytes its header declares");
  return t;
}

namespace {
std::string find_idx(const std::string& root, const std::string& stem) {
  for (const char* ext : {".gz", ""}) {
    std::string p = root + "/" + stem + ext;
    if (io::path_exists(p)) return p;
  }
  TS_ERROR("dataset file ", root, "/", stem, "[.gz] not found. Give the directory holding the MNIST-format IDX "
           "files; Fashion-MNIST's default, ", kFashionMNISTRoot, ", comes with Debian's package "
           "dataset-fashion-mnist (`apt-get install dataset-fashion-mnist`; scripts/setup.sh installs it).");
}
}  // namespace

MNIST::MNIST(const std::string& root, const std::string& split, double mean, double std, Transform transform)
    : mean_(mean), std_(std), transform_(std::move(transform)) {
  TS_CHECK(split == "train" || split == "test", "MNIST: split must be 'train' or 'test', got '", split, "'");
  const std::string prefix = split == "train" ? "train" : "t10k";
  const std::string img_path = find_idx(root, prefix + "-images-idx3-ubyte");
  const std::string lbl_path = find_idx(root, prefix + "-labels-idx1-ubyte");
  images_ = read_idx(img_path);
  TS_CHECK(images_.dim() == 3, img_path, ": expected 3-D images [N, rows, cols], got shape ",
           shape_str(images_.shape()));
  Tensor lbl = read_idx(lbl_path);
  TS_CHECK(lbl.dim() == 1 && lbl.size(0) == images_.size(0), lbl_path, ": expected ", images_.size(0),
           " labels, got shape ", shape_str(lbl.shape()));
  labels_ = lbl.to(DType::I64);
}

Example MNIST::get(int64_t i) const {
  TS_CHECK(i >= 0 && i < size(), "MNIST: index ", i, " is out of range for ", size(), " samples");
  Tensor x = ops::div(ops::sub(ops::mul(images_.select(0, i).unsqueeze(0).to(DType::F32), 1.0 / 255), mean_), std_);
  if (transform_) x = transform_(x);
  return {x, labels_.select(0, i)};
}

Example MNIST::get_batch(const std::vector<int64_t>& indices) const {
  if (transform_) return Dataset::get_batch(indices);
  for (int64_t i : indices) TS_CHECK(i >= 0 && i < size(), "MNIST: index ", i, " is out of range for ", size());
  Tensor idx = tensor(indices);
  const int64_t n = static_cast<int64_t>(indices.size()), H = images_.size(1), W = images_.size(2);
  Tensor out = empty({n, 1, H, W});
  const uint8_t* src = images_.data_ptr<uint8_t>();
  float* dst = out.data_ptr<float>();
  const float scale = static_cast<float>(1.0 / (255.0 * std_)), shift = static_cast<float>(mean_ / std_);
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* s = src + indices[b] * H * W;
    float* d = dst + b * H * W;
    for (int64_t k = 0; k < H * W; ++k) d[k] = static_cast<float>(s[k]) * scale - shift;
  }
  return {out, ops::index_select(labels_, 0, idx)};
}

const char* FashionMNIST::class_name(int64_t label) {
  static const char* names[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return label >= 0 && label < 10 ? names[label] : "?";
}

}  // namespace tessera::data
