#include "tessera/nn/container.h"

namespace tessera::nn {

Sequential::Sequential(std::initializer_list<ModulePtr> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(m);
}

Sequential& Sequential::push_back(ModulePtr m) { return push_back(std::to_string(items_.size()), std::move(m)); }

Sequential& Sequential::push_back(const std::string& name, ModulePtr m) {
  add_child(name, m);
  items_.push_back(std::move(m));
  return *this;
}

ModulePtr Sequential::operator[](size_t i) const {
  TS_CHECK(i < items_.size(), "Sequential: index ", i, " is out of range for ", items_.size(), " modules");
  return items_[i];
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = (*m)(h);
  return h;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) : Module("ModuleList") {
  for (auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(ModulePtr m) {
  add_child(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
  return *this;
}

ModulePtr ModuleList::operator[](size_t i) const {
  TS_CHECK(i < items_.size(), "ModuleList: index ", i, " is out of range for ", items_.size(), " modules");
  return items_[i];
}

ModuleDict& ModuleDict::insert(const std::string& key, ModulePtr m) {
  add_child(key, std::move(m));
  return *this;
}

bool ModuleDict::contains(const std::string& key) const {
  for (auto& [k, m] : named_children())
    if (k == key) return true;
  return false;
}

ModulePtr ModuleDict::operator[](const std::string& key) const {
  for (auto& [k, m] : named_children())
    if (k == key) return m;
  std::string known;
  for (auto& k : keys()) known += (known.empty() ? "" : ", ") + k;
  TS_ERROR("ModuleDict: no module named '", key, "' (keys: ", known.empty() ? "none" : known, ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (auto& [k, m] : named_children()) out.push_back(k);
  return out;
}

}  // namespace tessera::nn
