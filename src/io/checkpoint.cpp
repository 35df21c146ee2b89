#include "tessera/io/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <filesystem>
#include <system_error>

namespace tessera::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace detail {
// The last step of both writers: a complete directory `tmp` (its files
// fsynced) becomes root/name, replacing one of that name, and root/latest
// points at it; then only the newest `keep_last` checkpoints stay.
void publish_checkpoint(const std::string& root, const std::string& name, const std::string& tmp);
void keep_newest(const std::string& root, int keep_last, const std::string& newest);
}  // namespace detail

// Whole (model and optimizer files) or sharded (an index); the shards
// themselves are checked when it is loaded.
static bool is_complete(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::exists(dir / "state.json", ec)) return false;
  return fs::exists(dir / "index.json", ec) ||
         (fs::exists(dir / "model.safetensors", ec) && fs::exists(dir / "optimizer.safetensors", ec));
}

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (auto& e : fs::directory_iterator(root, ec)) {
    std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || !is_complete(e.path())) continue;
    out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());  // names are zero-padded steps
  return out;
}

namespace detail {

void publish_checkpoint(const std::string& root, const std::string& name, const std::string& tmp) {
  std::error_code ec;
  const fs::path final_dir = fs::path(root) / name;
  fsync_dir(tmp);
  if (fs::exists(final_dir, ec)) {  // re-saving the same step: replace it
    const fs::path old = fs::path(root) / (".tmp-old-" + name + "-" + std::to_string(::getpid()));
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsync_dir(root);
  write_file_atomic((fs::path(root) / "latest").string(), [&](Writer& w) { w.write(name + "\n"); });
}

void keep_newest(const std::string& root, int keep_last, const std::string& newest) {
  if (keep_last <= 0) return;
  std::error_code ec;
  auto all = list_checkpoints(root);
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < all.size(); ++i)
    if (fs::path(all[i]) != fs::path(newest)) fs::remove_all(all[i], ec);
}

}  // namespace detail

std::string save_checkpoint(const std::string& root, const std::string& name, const Checkpoint& c, int keep_last) {
  TS_CHECK(!name.empty() && name.find('/') == std::string::npos && name[0] != '.', "save_checkpoint: invalid name '",
           name, "'");
  std::error_code ec;
  fs::create_directories(root, ec);
  TS_CHECK(!ec, "save_checkpoint: cannot create ", root, ": ", ec.message());
  // Leftovers of saves that were interrupted (by a crash, a kill or a full disk).
  for (auto& e : fs::directory_iterator(root, ec))
    if (e.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(e.path(), ec);

  const fs::path final_dir = fs::path(root) / name;
  const fs::path tmp = fs::path(root) / (".tmp-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  TS_CHECK(!ec, "save_checkpoint: cannot create ", tmp.string(), ": ", ec.message());
  try {
    save_safetensors((tmp / "model.safetensors").string(), c.model);
    save_safetensors((tmp / "optimizer.safetensors").string(), c.optimizer,
                     {{"param_groups", c.optimizer_groups.dump()}, {"format", "tessera-optimizer"}});
    json state = c.state;
    state["format_version"] = kCheckpointFormatVersion;
    std::string text = state.dump(2) + "\n";
    write_file_atomic((tmp / "state.json").string(), [&](Writer& w) { w.write(text); });
    detail::publish_checkpoint(root, name, tmp.string());
  } catch (const std::exception& e) {  // filesystem errors included
    fs::remove_all(tmp, ec);
    TS_ERROR("saving checkpoint ", final_dir.string(), " failed: ", e.what(), "; the previous checkpoint is intact");
  }
  detail::keep_newest(root, keep_last, final_dir.string());
  return final_dir.string();
}

std::vector<std::string> resume_candidates(const std::string& root) {
  const std::string newest = resolve_checkpoint("latest", root);
  std::vector<std::string> order{newest};
  auto all = list_checkpoints(root);
  for (auto it = all.rbegin(); it != all.rend(); ++it)
    if (*it != newest) order.push_back(*it);
  return order;
}

std::pair<std::string, Checkpoint> load_newest_valid_checkpoint(const std::string& root) {
  std::string why;
  for (const std::string& dir : resume_candidates(root)) {
    try {
      return {dir, load_checkpoint(dir)};
    } catch (const Error& e) {
      std::fprintf(stderr, "tessera: checkpoint %s does not load: %s; trying the one before it\n", dir.c_str(),
                   e.what());
      why += (why.empty() ? "" : "; ") + std::string(e.what());
    }
  }
  TS_ERROR("no checkpoint under ", root, " loads: ", why);
}

std::string resolve_checkpoint(const std::string& spec, const std::string& root) {
  if (spec != "latest" && spec != "last") {
    TS_CHECK(is_complete(spec), "checkpoint '", spec, "' is not a complete checkpoint directory (it needs ",
             "state.json and model.safetensors with optimizer.safetensors, or a sharded checkpoint's index.json)");
    return spec;
  }
  std::error_code ec;
  fs::path latest = fs::path(root) / "latest";
  if (fs::exists(latest, ec)) {
    std::vector<char> t = read_file(latest.string(), 4096);
    std::string name(t.begin(), t.end());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (!name.empty() && name.find('/') == std::string::npos && is_complete(fs::path(root) / name))
      return (fs::path(root) / name).string();
  }
  auto all = list_checkpoints(root);
  TS_CHECK(!all.empty(), "no checkpoint found under ", root, " (looked for ", latest.string(),
           " and for complete checkpoint directories)");
  return all.back();
}

}  // namespace tessera::io
