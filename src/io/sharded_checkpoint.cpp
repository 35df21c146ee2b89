// Sharded checkpoints (io/checkpoint.h): every rank writes its pieces, rank 0
// the index (checked here; CheckpointReader reads the pieces).
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <system_error>

#include "tessera/io/checkpoint.h"

namespace tessera::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {

void publish_checkpoint(const std::string& root, const std::string& name, const std::string& tmp);  // checkpoint.cpp
void keep_newest(const std::string& root, int keep_last, const std::string& newest);

std::string rank_file(const char* kind, int rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-rank%05d.safetensors", kind, rank);
  return buf;
}

// Size and CRC32 of a file, read in 4 MB blocks.
std::pair<uint64_t, uint32_t> file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in, "cannot read ", path);
  std::vector<char> buf(4u << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  uint64_t bytes = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = in.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(n));
    bytes += static_cast<uint64_t>(n);
  }
  return {bytes, static_cast<uint32_t>(crc)};
}

// The name each piece has in its rank's file: the tensor's, and for a
// rank's second and later piece of one tensor (the fused QKV projection's
// three row ranges) the tensor's with "#k" after it.
std::vector<std::string> piece_keys(const std::vector<CheckpointPiece>& pieces) {
  std::map<std::string, int> seen;
  std::vector<std::string> keys;
  for (auto& p : pieces) {
    const int k = seen[p.name]++;
    keys.push_back(k == 0 ? p.name : p.name + "#" + std::to_string(k));
  }
  return keys;
}

json describe(const std::vector<CheckpointPiece>& pieces, const std::string& file) {
  json out = json::array();
  const std::vector<std::string> keys = piece_keys(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const CheckpointPiece& p = pieces[i];
    json e = {{"name", p.name},
              {"dtype", dtype_name(p.data.dtype())},
              {"shape", std::vector<int64_t>(p.shape.begin(), p.shape.end())},
              {"file", file}};
    if (!p.offset.empty()) {
      e["offset"] = p.offset;
      e["box"] = std::vector<int64_t>(p.data.shape().begin(), p.data.shape().end());
    } else {
      e["begin"] = std::max<int64_t>(0, p.begin);
      e["end"] = p.begin < 0 ? p.data.numel() : p.begin + p.data.numel();
    }
    if (keys[i] != p.name) e["key"] = keys[i];
    out.push_back(std::move(e));
  }
  return out;
}

// An index piece as the reader holds it.
CheckpointReader::Piece piece_of(const json& p) {
  CheckpointReader::Piece out;
  out.file = p["file"].get<std::string>();
  if (p.contains("key")) out.key = p["key"].get<std::string>();
  if (p.contains("offset")) {
    out.offset = p["offset"].get<std::vector<int64_t>>();
    out.box = p["shape"].get<std::vector<int64_t>>();
  } else {
    out.begin = p["begin"].get<int64_t>();
    out.end = p["end"].get<int64_t>();
  }
  return out;
}

NamedTensors tensors_of(const std::vector<CheckpointPiece>& pieces) {
  NamedTensors out;
  const std::vector<std::string> keys = piece_keys(pieces);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const CheckpointPiece& p = pieces[i];
    TS_CHECK(p.begin >= 0 || !p.offset.empty() || IntArrayRef(p.data.shape()).equals(p.shape),
             "save_sharded_checkpoint: the whole tensor '",
             p.name, "' has shape ", shape_str(p.data.shape()), ", its piece says ", shape_str(p.shape));
    TS_CHECK(p.begin < 0 || p.data.dim() == 1, "save_sharded_checkpoint: piece '", p.name, "' must be 1-D");
    TS_CHECK(p.offset.empty() || (p.begin < 0 && p.offset.size() == p.shape.size() &&
                                  p.data.dim() == static_cast<int64_t>(p.shape.size())),
             "save_sharded_checkpoint: the box of '", p.name, "' needs an offset and a shape per dimension of ",
             shape_str(p.shape));
    out.emplace_back(keys[i], p.data.contiguous());
  }
  return out;
}

// Rank 0: every rank's description into one index, each tensor's pieces checked
// to cover its elements exactly once.
json build_index(const fs::path& dir, int world) {
  json index = {{"format", "tessera-sharded-checkpoint"}, {"world_size", world}, {"files", json::object()}};
  for (const char* kind : {"model", "optimizer"}) {
    std::map<std::string, json> tensors;
    for (int r = 0; r < world; ++r) {
      const fs::path part = dir / ("rank" + std::to_string(r) + ".json");
      std::vector<char> text = read_file(part.string(), 1u << 30);
      json j = json::parse(text.begin(), text.end());
      for (auto& [file, f] : j["files"].items()) index["files"][file] = f;
      for (auto& e : j[kind]) {
        json& t = tensors[e["name"].get<std::string>()];
        if (t.is_null()) t = {{"dtype", e["dtype"]}, {"shape", e["shape"]}, {"pieces", json::array()}};
        TS_CHECK(t["dtype"] == e["dtype"] && t["shape"] == e["shape"], "save_sharded_checkpoint: ranks disagree on ",
                 kind, " tensor '", e["name"].get<std::string>(), "'s dtype or shape");
        if (e.contains("offset"))
          t["pieces"].push_back({{"file", e["file"]}, {"offset", e["offset"]}, {"shape", e["box"]}});
        else
          t["pieces"].push_back({{"file", e["file"]}, {"begin", e["begin"]}, {"end", e["end"]}});
        if (e.contains("key")) t["pieces"].back()["key"] = e["key"];
      }
    }
    json out = json::object();
    for (auto& [name, t] : tensors) {
      std::vector<CheckpointReader::Piece> pieces;
      for (auto& p : t["pieces"]) pieces.push_back(piece_of(p));
      Shape shape;
      for (auto& d : t["shape"]) shape.push_back(d.get<int64_t>());
      const std::string err = CheckpointReader::tiling_error(pieces, shape);
      TS_CHECK(err.empty(), "save_sharded_checkpoint: the pieces of ", kind, " tensor '", name, "' ", err);
      out[name] = t;
    }
    index[kind] = out;
  }
  return index;
}

// A shard file: present, with the size and CRC32 the index gives it.
void check_shard(const std::string& dir, const std::string& file, const json& f) {
  const std::string p = (fs::path(dir) / file).string();
  std::error_code ec;
  TS_CHECK(fs::exists(p, ec), "checkpoint ", dir, " is incomplete: shard ", file, " is missing");
  auto [bytes, crc] = file_crc32(p);
  TS_CHECK(bytes == f["bytes"].get<uint64_t>(), "checkpoint ", dir, ": shard ", file, " has ", bytes,
           " bytes, the index says ", f["bytes"].get<uint64_t>(), " (truncated or replaced)");
  TS_CHECK(crc == f["crc32"].get<uint32_t>(), "checkpoint ", dir, ": shard ", file, " is corrupt (CRC32 ", crc,
           ", the index says ", f["crc32"].get<uint32_t>(), ")");
}

// Reads and checks index.json: every field's type, every piece inside its
// tensor and listed file; with check_files, every file present with its size
// and CRC32 (else check_shard when a file is first read).
json read_index(const std::string& dir, bool check_files) {
  const std::string path = (fs::path(dir) / "index.json").string();
  std::vector<char> text = read_file(path, 256u << 20);
  json index = json::parse(text.begin(), text.end(), nullptr, false);
  auto bad = [&](const std::string& what) { TS_ERROR("checkpoint ", dir, ": index.json ", what, " (corrupted?)"); };
  if (index.is_discarded() || !index.is_object()) bad("is not a JSON object");
  if (!index.contains("files") || !index["files"].is_object()) bad("has no 'files' object");
  for (auto& [file, f] : index["files"].items()) {
    if (file.empty() || file.find('/') != std::string::npos || file[0] == '.') bad("names a file outside it: '" + file + "'");
    if (!f.is_object() || !f.contains("bytes") || !f.contains("crc32") || !f["bytes"].is_number_unsigned() ||
        !f["crc32"].is_number_unsigned())
      bad("gives file '" + file + "' no bytes or crc32");
    if (check_files) check_shard(dir, file, f);
  }
  for (const char* kind : {"model", "optimizer"}) {
    if (!index.contains(kind) || !index[kind].is_object()) bad(std::string("has no '") + kind + "' object");
    for (auto& [name, t] : index[kind].items()) {
      if (!t.is_object() || !t.contains("dtype") || !t["dtype"].is_string() || !dtype_from_name(t["dtype"].get<std::string>()) ||
          !t.contains("shape") || !t["shape"].is_array() || !t.contains("pieces") || !t["pieces"].is_array())
        bad("describes '" + name + "' without a valid dtype, shape and pieces");
      int64_t numel = 1;
      for (auto& d : t["shape"]) {
        if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t(1) << 40))
          bad("gives '" + name + "' a bad dimension");
        numel *= d.get<int64_t>();
        if (numel > (int64_t(1) << 40)) bad("gives '" + name + "' too many elements");
      }
      for (auto& p : t["pieces"]) {
        if (!p.is_object() || !p.contains("file") || !p["file"].is_string() ||
            !index["files"].contains(p["file"].get<std::string>()))
          bad("gives '" + name + "' a piece in an unlisted file");
        if (p.contains("key") && (!p["key"].is_string() || p["key"].get<std::string>().empty()))
          bad("gives '" + name + "' a piece whose key is not a name");
        if (p.contains("offset")) {  // a box: an offset and a shape per dimension, inside the tensor
          const size_t rank = t["shape"].size();  // a plain copy: clang 14 cannot capture the binding t
          auto ints = [&p, rank](const char* key) {
            if (!p.contains(key) || !p[key].is_array() || p[key].size() != rank) return false;
            for (auto& v : p[key])
              if (!v.is_number_integer()) return false;
            return true;
          };
          if (!ints("offset") || !ints("shape")) bad("gives '" + name + "' a box without an offset and shape per dimension");
          for (size_t d = 0; d < t["shape"].size(); ++d) {
            const int64_t o = p["offset"][d].get<int64_t>(), n = p["shape"][d].get<int64_t>();
            if (o < 0 || n < 0 || o > t["shape"][d].get<int64_t>() - n) bad("gives '" + name + "' a piece outside it");
          }
          continue;
        }
        if (!p.contains("begin") || !p.contains("end") || !p["begin"].is_number_integer() || !p["end"].is_number_integer() ||
            p["begin"].get<int64_t>() < 0 || p["begin"].get<int64_t>() > p["end"].get<int64_t>() ||
            p["end"].get<int64_t>() > numel)
          bad("gives '" + name + "' a piece outside it");
      }
    }
  }
  return index;
}

}  // namespace detail

std::string save_sharded_checkpoint(const std::string& root, const std::string& name, int rank, int world,
                                    const CheckpointShard& mine, const Checkpoint& c, int keep_last,
                                    const std::function<void()>& barrier) {
  TS_CHECK(!name.empty() && name.find('/') == std::string::npos && name[0] != '.',
           "save_sharded_checkpoint: invalid name '", name, "'");
  const fs::path final_dir = fs::path(root) / name;
  const fs::path tmp = fs::path(root) / (".tmp-" + name + "-sharded");
  std::error_code ec;
  if (rank == 0) {
    fs::create_directories(root, ec);
    TS_CHECK(!ec, "save_checkpoint: cannot create ", root, ": ", ec.message());
    for (auto& e : fs::directory_iterator(root, ec))  // leftovers of interrupted saves
      if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);
    fs::create_directory(tmp, ec);
    TS_CHECK(!ec, "save_checkpoint: cannot create ", tmp.string(), ": ", ec.message());
  }
  barrier();
  // Every rank: its two files and a description of them.
  const std::string model_file = detail::rank_file("model", rank), opt_file = detail::rank_file("optimizer", rank);
  save_safetensors((tmp / model_file).string(), detail::tensors_of(mine.model));
  save_safetensors((tmp / opt_file).string(), detail::tensors_of(mine.optimizer), {{"format", "tessera-optimizer-shard"}});
  json part = {{"model", detail::describe(mine.model, model_file)},
               {"optimizer", detail::describe(mine.optimizer, opt_file)},
               {"files", json::object()}};
  for (const std::string& f : {model_file, opt_file}) {
    auto [bytes, crc] = detail::file_crc32((tmp / f).string());
    part["files"][f] = {{"bytes", bytes}, {"crc32", crc}};
  }
  const std::string part_text = part.dump();
  write_file_atomic((tmp / ("rank" + std::to_string(rank) + ".json")).string(), [&](Writer& w) { w.write(part_text); });
  barrier();
  if (rank == 0) {
    try {
      json index = detail::build_index(tmp, world);
      index["optimizer_groups"] = mine.optimizer_groups;
      const std::string index_text = index.dump(1) + "\n";
      write_file_atomic((tmp / "index.json").string(), [&](Writer& w) { w.write(index_text); });
      json state = c.state;
      state["format_version"] = kCheckpointFormatVersion;
      state["sharded"] = {{"world_size", world}};
      const std::string text = state.dump(2) + "\n";
      write_file_atomic((tmp / "state.json").string(), [&](Writer& w) { w.write(text); });
      for (int r = 0; r < world; ++r) fs::remove(tmp / ("rank" + std::to_string(r) + ".json"), ec);
      detail::publish_checkpoint(root, name, tmp.string());
    } catch (const std::exception& e) {
      fs::remove_all(tmp, ec);
      TS_ERROR("saving checkpoint ", final_dir.string(), " failed: ", e.what(), "; the previous checkpoint is intact");
    }
    detail::keep_newest(root, keep_last, final_dir.string());
  }
  barrier();  // the checkpoint is complete for every rank
  return final_dir.string();
}

}  // namespace tessera::io
