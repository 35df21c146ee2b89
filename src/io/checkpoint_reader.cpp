// CheckpointReader (io/checkpoint.h): a checkpoint's tensors by name, whole or
// a range of elements at a time, from whole and sharded checkpoints alike.
#include <algorithm>
#include <filesystem>

#include "tessera/io/checkpoint.h"

namespace tessera::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {  // sharded_checkpoint.cpp
json read_index(const std::string& dir, bool check_files);
void check_shard(const std::string& dir, const std::string& file, const json& f);
CheckpointReader::Piece piece_of(const json& p);
}  // namespace detail

namespace {
// The box [offset, offset + shape) of t.
Tensor box_of(Tensor t, IntArrayRef offset, IntArrayRef shape) {
  for (size_t d = 0; d < offset.size(); ++d) t = t.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
  return t;
}
}  // namespace

std::string CheckpointReader::tiling_error(std::vector<Piece> pieces, const Shape& shape) {
  const int64_t numel = numel_of(shape);
  size_t boxes = 0;
  for (const Piece& p : pieces) boxes += p.box.empty() ? 0 : 1;
  if (boxes != 0 && boxes != pieces.size()) return "mix element ranges and boxes";
  if (boxes == 0) {
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    for (const Piece& p : pieces) {
      if (p.begin != at) return (p.begin < at ? "overlap at element " : "leave a gap at element ") + std::to_string(at);
      at = p.end;
    }
    if (at != numel) return "end at element " + std::to_string(at) + " of " + std::to_string(numel);
    return "";
  }
  // Note [Checking a tiling of boxes]
  // The boxes' edges cut each dimension into intervals, and so the tensor
  // into a grid of cells, each wholly inside or outside every box. The boxes
  // tile the tensor when every cell has exactly one owner. Marking them costs
  // the number of cells (as many as the boxes for the grid-shaped tilings
  // tensor parallelism writes) plus a sort, never a comparison of every pair,
  // which a hostile index of a million boxes would turn into a hang; a tiling
  // cut into more than kMaxCells cells is refused as too irregular.
  const size_t rank = shape.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& a = pieces[i];
    if (a.offset.size() != rank || a.box.size() != rank) return "have a box of another rank";
    for (size_t d = 0; d < rank; ++d)
      if (a.offset[d] < 0 || a.box[d] < 0 || a.offset[d] > shape[d] - a.box[d])
        return "have a box outside the tensor (box " + std::to_string(i) + ")";
  }
  if (numel == 0) return "";
  std::vector<std::vector<int64_t>> cuts(rank);
  for (size_t d = 0; d < rank; ++d) {
    cuts[d] = {0, shape[d]};
    for (const Piece& a : pieces)
      if (numel_of(a.box) > 0) cuts[d].insert(cuts[d].end(), {a.offset[d], a.offset[d] + a.box[d]});
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
  }
  constexpr int64_t kMaxCells = int64_t{1} << 22;
  int64_t cells = 1;
  for (size_t d = 0; d < rank; ++d) {
    cells *= static_cast<int64_t>(cuts[d].size()) - 1;
    if (cells > kMaxCells) return "cut the tensor into more than " + std::to_string(kMaxCells) + " cells (too irregular a tiling)";
  }
  auto cell_of = [&](size_t d, int64_t at) {
    return static_cast<int64_t>(std::lower_bound(cuts[d].begin(), cuts[d].end(), at) - cuts[d].begin());
  };
  std::vector<int32_t> owner(static_cast<size_t>(cells), -1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& a = pieces[i];
    if (numel_of(a.box) == 0) continue;
    // The box's cells [lo, hi) per dimension, visited as an odometer.
    std::vector<int64_t> lo(rank), hi(rank), at(rank);
    for (size_t d = 0; d < rank; ++d) {
      lo[d] = at[d] = cell_of(d, a.offset[d]);
      hi[d] = cell_of(d, a.offset[d] + a.box[d]);
    }
    for (;;) {
      int64_t flat = 0;
      for (size_t d = 0; d < rank; ++d) flat = flat * (static_cast<int64_t>(cuts[d].size()) - 1) + at[d];
      int32_t& o = owner[static_cast<size_t>(flat)];
      if (o >= 0) return "overlap (boxes " + std::to_string(o) + " and " + std::to_string(i) + ")";
      o = static_cast<int32_t>(i);
      size_t d = rank;
      while (d > 0 && ++at[d - 1] == hi[d - 1]) at[d - 1] = lo[d - 1], --d;
      if (d == 0) break;
    }
  }
  for (int64_t c = 0; c < cells; ++c) {
    if (owner[static_cast<size_t>(c)] >= 0) continue;
    std::string where;
    for (size_t d = rank, rest = static_cast<size_t>(c); d-- > 0;) {  // the cell's first element
      const size_t n = cuts[d].size() - 1;
      where = std::to_string(cuts[d][rest % n]) + (where.empty() ? "" : ", ") + where;
      rest /= n;
    }
    return "leave a gap at [" + where + "]";
  }
  return "";
}

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  TS_CHECK(fs::is_directory(dir, ec), "checkpoint ", dir, " does not exist or is not a directory");
  const std::string state_path = (fs::path(dir) / "state.json").string();
  TS_CHECK(fs::exists(state_path, ec), "checkpoint ", dir, " is incomplete: state.json is missing");
  std::vector<char> text = read_file(state_path, 64u << 20);
  state_ = json::parse(text.begin(), text.end(), nullptr, false);
  TS_CHECK(!state_.is_discarded() && state_.is_object(), state_path, " is not a valid JSON object (corrupted?)");
  TS_CHECK(state_.contains("format_version") && state_["format_version"].is_number_integer(), state_path,
           " has no format_version: not a Tessera checkpoint");
  const int version = state_["format_version"].get<int>();
  TS_CHECK(version == kCheckpointFormatVersion, state_path, " has format_version ", version, "; this Tessera reads ",
           kCheckpointFormatVersion);

  if (state_.contains("sharded")) {
    TS_CHECK(fs::exists(fs::path(dir) / "index.json", ec), "checkpoint ", dir,
             " is incomplete: it is sharded but index.json is missing");
    json index = detail::read_index(dir, false);  // each shard is checked when first read
    files_json_ = index["files"];
    groups_ = index.value("optimizer_groups", json());
    TS_CHECK(groups_.is_array(), dir, "/index.json: optimizer_groups is not a JSON list");
    for (Part part : {kModel, kOptimizer})
      for (auto& [name, t] : index[part == kModel ? "model" : "optimizer"].items()) {
        Entry e;
        e.dtype = *dtype_from_name(t["dtype"].get<std::string>());
        for (auto& d : t["shape"]) e.shape.push_back(d.get<int64_t>());
        for (auto& p : t["pieces"]) e.pieces.push_back(detail::piece_of(p));
        const std::string err = tiling_error(e.pieces, e.shape);  // each element in exactly one piece
        TS_CHECK(err.empty(), "checkpoint ", dir, ": index.json's pieces of '", name, "' ", err, " (corrupted?)");
        e.boxes = !e.pieces.empty() && !e.pieces[0].box.empty();
        names_[part].push_back(name);
        entries_[part].emplace(name, std::move(e));
      }
    return;
  }
  for (const char* f : {"model.safetensors", "optimizer.safetensors"})
    TS_CHECK(fs::exists(fs::path(dir) / f, ec), "checkpoint ", dir, " is incomplete: ", f, " is missing");
  for (Part part : {kModel, kOptimizer}) {
    const std::string file = part == kModel ? "model.safetensors" : "optimizer.safetensors";
    const SafetensorsFile& f = open(file);
    for (const std::string& name : f.names()) {
      Tensor t = f.get(name);
      names_[part].push_back(name);
      Piece whole;
      whole.file = file;
      whole.end = t.numel();
      entries_[part].emplace(name, Entry{t.dtype(), t.shape(), {whole}, false});
    }
  }
  const Metadata& meta = files_.at("optimizer.safetensors").metadata();
  auto it = meta.find("param_groups");
  TS_CHECK(it != meta.end(), dir, "/optimizer.safetensors has no param_groups metadata");
  groups_ = json::parse(it->second, nullptr, false);
  TS_CHECK(!groups_.is_discarded() && groups_.is_array(), dir,
           "/optimizer.safetensors: param_groups metadata is not a JSON list");
}

const SafetensorsFile& CheckpointReader::open(const std::string& file) const {
  auto it = files_.find(file);
  if (it != files_.end()) return it->second;
  if (files_json_.is_object()) detail::check_shard(dir_, file, files_json_.at(file));
  return files_.emplace(file, SafetensorsFile::open((fs::path(dir_) / file).string())).first->second;
}

void CheckpointReader::check_files() const {
  if (files_json_.is_object())
    for (auto& [file, f] : files_json_.items()) open(file);
}

const CheckpointReader::Entry& CheckpointReader::entry(Part part, const std::string& name) const {
  auto it = entries_[part].find(name);
  TS_CHECK(it != entries_[part].end(), "checkpoint ", dir_, " has no ", part == kModel ? "model" : "optimizer",
           " tensor '", name, "'");
  return it->second;
}

// A piece's data in its file, after checking it is what the index says: a
// range flattened, a box in its shape.
Tensor CheckpointReader::piece_data(const Entry& e, const std::string& name, const Piece& p) const {
  const SafetensorsFile& f = open(p.file);
  const std::string& key = p.key.empty() ? name : p.key;
  TS_CHECK(f.contains(key), "checkpoint ", dir_, ": ", p.file, " has no tensor '", key, "' though the index says so");
  Tensor t = f.get(key);
  if (!p.box.empty()) {
    TS_CHECK(t.dtype() == e.dtype && IntArrayRef(t.shape()).equals(p.box), "checkpoint ", dir_, ": '", name, "' in ",
             p.file, " is ", dtype_name(t.dtype()), " ", shape_str(t.shape()), ", the index says a ",
             dtype_name(e.dtype), " box of shape ", shape_str(p.box));
    return t;
  }
  TS_CHECK(t.dtype() == e.dtype && t.numel() == p.end - p.begin, "checkpoint ", dir_, ": '", name, "' in ", p.file,
           " is ", dtype_name(t.dtype()), " with ", t.numel(), " elements, the index says ", dtype_name(e.dtype),
           " elements [", p.begin, ", ", p.end, ")");
  return t.reshape({-1});
}

Tensor CheckpointReader::read(Part part, const std::string& name) const {
  const Entry& e = entry(part, name);
  if (e.boxes) return read_box(part, name, std::vector<int64_t>(e.shape.size(), 0), e.shape);
  return read(part, name, 0, numel_of(e.shape)).view(e.shape);
}

Tensor CheckpointReader::read_box(Part part, const std::string& name, IntArrayRef offset, IntArrayRef shape) const {
  const Entry& e = entry(part, name);
  bool inside = offset.size() == e.shape.size() && shape.size() == e.shape.size();
  for (size_t d = 0; inside && d < e.shape.size(); ++d)
    inside = offset[d] >= 0 && shape[d] >= 0 && offset[d] <= e.shape[d] - shape[d];
  TS_CHECK(inside, "checkpoint ", dir_, ": the box at ", shape_str(offset), " of shape ", shape_str(shape), " is not "
           "inside '", name, "' of shape ", shape_str(e.shape));
  if (!e.boxes) return box_of(read(part, name), offset, shape).contiguous();
  // Every box it overlaps, checked before anything is allocated.
  std::vector<std::pair<const Piece*, Tensor>> parts;
  for (const Piece& p : e.pieces) {
    bool meet = numel_of(p.box) > 0 && numel_of(shape) > 0;
    for (size_t d = 0; d < shape.size() && meet; ++d)
      meet = std::max(offset[d], p.offset[d]) < std::min(offset[d] + shape[d], p.offset[d] + p.box[d]);
    if (meet) parts.emplace_back(&p, piece_data(e, name, p));
  }
  Tensor out = empty(shape, e.dtype);
  for (auto& [p, data] : parts) {
    std::vector<int64_t> at(shape.size()), in(shape.size()), n(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t lo = std::max(offset[d], p->offset[d]);
      n[d] = std::min(offset[d] + shape[d], p->offset[d] + p->box[d]) - lo;
      at[d] = lo - offset[d];
      in[d] = lo - p->offset[d];
    }
    box_of(out, at, n).copy_(box_of(data, in, n));
  }
  return out;
}

Tensor CheckpointReader::read(Part part, const std::string& name, int64_t begin, int64_t count) const {
  const Entry& e = entry(part, name);
  const int64_t numel = numel_of(e.shape);
  TS_CHECK(begin >= 0 && count >= 0 && begin + count <= numel, "checkpoint ", dir_, ": elements [", begin, ", ",
           begin + count, ") of '", name, "' are outside its ", numel);
  if (e.boxes) return read(part, name).reshape({-1}).narrow(0, begin, count);  // every box
  auto piece_data = [&](const Piece& p) { return this->piece_data(e, name, p); };
  for (const Piece& p : e.pieces)  // one piece holds it all: a view of the mapped file
    if (p.begin <= begin && begin + count <= p.end) return piece_data(p).narrow(0, begin - p.begin, count);
  // Every piece it overlaps, checked before anything is allocated (the pieces
  // tile the tensor, so they cover the range).
  std::vector<std::pair<const Piece*, Tensor>> parts;
  for (const Piece& p : e.pieces)
    if (std::max(begin, p.begin) < std::min(begin + count, p.end)) parts.emplace_back(&p, piece_data(p));
  Tensor out = empty({count}, e.dtype);
  for (auto& [p, data] : parts) {
    const int64_t a = std::max(begin, p->begin), b = std::min(begin + count, p->end);
    out.narrow(0, a - begin, b - a).copy_(data.narrow(0, a - p->begin, b - a));
  }
  return out;
}

Checkpoint CheckpointReader::read_all() const {
  check_files();
  Checkpoint c;
  c.state = state_;
  c.optimizer_groups = groups_;
  for (const std::string& name : names(kModel)) c.model.emplace_back(name, read(kModel, name));
  for (const std::string& name : names(kOptimizer)) c.optimizer.emplace_back(name, read(kOptimizer, name));
  return c;
}

Checkpoint load_checkpoint(const std::string& dir) { return CheckpointReader(dir).read_all(); }

}  // namespace tessera::io
