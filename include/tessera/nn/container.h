#pragma once
// Containers: Sequential (runs its children in order), ModuleList and
// ModuleDict (hold children for a forward written by hand). Children are named
// "0", "1", ... (or by key), as in PyTorch.
#include <initializer_list>

#include "tessera/nn/module.h"

namespace tessera::nn {

struct Sequential : Module {
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<ModulePtr> modules);
  Sequential& push_back(ModulePtr m);
  Sequential& push_back(const std::string& name, ModulePtr m);
  size_t size() const { return items_.size(); }
  ModulePtr operator[](size_t i) const;
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<ModulePtr> items_;
};

struct ModuleList : Module {
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<ModulePtr> modules);
  ModuleList& push_back(ModulePtr m);
  size_t size() const { return items_.size(); }
  ModulePtr operator[](size_t i) const;
  template <typename M>
  M& at(size_t i) const {
    auto* p = dynamic_cast<M*>((*this)[i].get());
    TS_CHECK(p, "ModuleList: element ", i, " is a ", (*this)[i]->type_name(), ", not the requested type");
    return *p;
  }
  std::vector<ModulePtr>::const_iterator begin() const { return items_.begin(); }
  std::vector<ModulePtr>::const_iterator end() const { return items_.end(); }

 private:
  std::vector<ModulePtr> items_;
};

struct ModuleDict : Module {
  ModuleDict() : Module("ModuleDict") {}
  ModuleDict& insert(const std::string& key, ModulePtr m);
  bool contains(const std::string& key) const;
  ModulePtr operator[](const std::string& key) const;
  std::vector<std::string> keys() const;
  size_t size() const { return named_children().size(); }
};

}  // namespace tessera::nn
