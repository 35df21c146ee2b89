// The engine's cache blocks and the prefix cache (llm/block_pool.h,
// Note [Prefix caching]).
#include "llm/block_pool.h"

#include <sodium.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::llm {

BlockPool::BlockPool(int64_t n_blocks, int64_t block_tokens, bool caching)
    : n_(n_blocks), bt_(block_tokens), caching_(caching) {
  const size_t n = static_cast<size_t>(n_blocks);
  ref_.assign(n, 0);
  free_.reserve(n);
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  if (!caching) return;
  TS_CHECK(sodium_init() >= 0, "prefix cache: libsodium failed to initialize");
  std::array<unsigned char, crypto_shorthash_KEYBYTES> key;
  crypto_shorthash_keygen(key.data());
  *salt_hash_fn_ = [key](std::string_view bytes) {
    uint64_t h = 0;
    static_assert(crypto_shorthash_BYTES == sizeof h);
    crypto_shorthash(reinterpret_cast<unsigned char*>(&h), reinterpret_cast<const unsigned char*>(bytes.data()),
                     bytes.size(), key.data());
    return h;
  };
  salts_.push_back({});  // slot 0: the empty salt, never released
  toks_.assign(n * static_cast<size_t>(block_tokens), 0);
  name_.assign(n, 0);
  parent_.assign(n, 0);
  salt_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;  // at most half full
  table_.assign(cap, -1);
  mask_ = cap - 1;
}

int32_t BlockPool::take() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = head_;  // the least recently used registered block
    lru_remove(b);
    table_erase(b);
  }
  ref_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockPool::share(int32_t b) {
  if (ref_[static_cast<size_t>(b)]++ == 0) lru_remove(b);
}

void BlockPool::release(int32_t b) {
  if (--ref_[static_cast<size_t>(b)] > 0) return;
  if (caching_ && registered(b)) lru_push(b);
  else free_.push_back(b);
}

uint64_t BlockPool::name(uint64_t parent, std::span<const int32_t> tokens) {
  // splitmix64's finalizer over the chain: every token and the parent move every bit.
  auto mix = [](uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  uint64_t h = mix(parent + 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x9e3779b97f4a7c15ULL));
  return h == 0 ? 1 : h;  // 0 means "not registered"
}

void BlockPool::set_salt_hash(SaltHash h) {
  TS_CHECK(salt_slot_.empty(), "prefix cache: the salt hash changes only before any salt is held");
  *salt_hash_fn_ = std::move(h);
}

int32_t BlockPool::hold_salt(std::string_view bytes) {
  if (!caching_ || bytes.empty()) return 0;
  const std::string key(bytes);
  auto it = salt_slot_.find(key);
  if (it == salt_slot_.end()) {
    int32_t slot;
    if (!free_salts_.empty()) {
      slot = free_salts_.back();
      free_salts_.pop_back();
    } else {
      slot = static_cast<int32_t>(salts_.size());
      salts_.emplace_back();
    }
    Salt& s = salts_[static_cast<size_t>(slot)];
    s.bytes = key;
    s.hash = (*salt_hash_fn_)(bytes) | 1;  // never 0, the empty salt's
    it = salt_slot_.emplace(key, slot).first;
  }
  ++salts_[static_cast<size_t>(it->second)].holders;
  return it->second;
}

void BlockPool::release_salt(int32_t slot) {
  if (slot == 0) return;
  Salt& s = salts_[static_cast<size_t>(slot)];
  if (--s.holders > 0) return;
  salt_slot_.erase(s.bytes);
  s = Salt{};
  free_salts_.push_back(slot);
}

void BlockPool::add(int32_t b, uint64_t name, uint64_t parent, int32_t salt) {
  if (!caching_ || registered(b)) return;
  size_t i = slot_of(name);
  for (; table_[i] >= 0; i = (i + 1) & mask_)
    if (name_[static_cast<size_t>(table_[i])] == name) return;  // that name has its block
  table_[i] = b;
  name_[static_cast<size_t>(b)] = name;
  parent_[static_cast<size_t>(b)] = parent;
  salt_[static_cast<size_t>(b)] = salt;
  if (salt) ++salts_[static_cast<size_t>(salt)].holders;
}

int32_t BlockPool::find(uint64_t name, uint64_t parent, int32_t salt, std::span<const int32_t> tokens) const {
  if (!caching_) return -1;
  for (size_t i = slot_of(name); table_[i] >= 0; i = (i + 1) & mask_) {
    const int32_t b = table_[i];
    if (name_[static_cast<size_t>(b)] != name) continue;
    const bool same = parent_[static_cast<size_t>(b)] == parent && salt_[static_cast<size_t>(b)] == salt &&
                      std::equal(tokens.begin(), tokens.end(), toks_.begin() + static_cast<ptrdiff_t>(b) * bt_);
    return same ? b : -1;
  }
  return -1;
}

void BlockPool::drop(int32_t b) {
  if (!caching_ || !registered(b)) return;
  if (ref_[static_cast<size_t>(b)] == 0) {  // on the LRU list: it becomes a plain free block
    lru_remove(b);
    free_.push_back(b);
  }
  table_erase(b);
}

// Removes b from the table, moving later entries of its probe run back so
// that every lookup still finds them (no tombstones).
void BlockPool::table_erase(int32_t b) {
  size_t i = slot_of(name_[static_cast<size_t>(b)]);
  while (table_[i] != b) i = (i + 1) & mask_;
  for (size_t j = (i + 1) & mask_; table_[j] >= 0; j = (j + 1) & mask_) {
    const size_t home = slot_of(name_[static_cast<size_t>(table_[j])]);
    // Entry j may move to the hole at i when its home is not in (i, j] cyclically.
    const bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    table_[i] = table_[j];
    i = j;
  }
  table_[i] = -1;
  name_[static_cast<size_t>(b)] = 0;
  release_salt(std::exchange(salt_[static_cast<size_t>(b)], 0));
}

void BlockPool::lru_push(int32_t b) {
  prev_[static_cast<size_t>(b)] = tail_;
  next_[static_cast<size_t>(b)] = -1;
  if (tail_ >= 0) next_[static_cast<size_t>(tail_)] = b;
  else head_ = b;
  tail_ = b;
  ++cached_;
}

void BlockPool::lru_remove(int32_t b) {
  const int32_t p = prev_[static_cast<size_t>(b)], n = next_[static_cast<size_t>(b)];
  if (p >= 0) next_[static_cast<size_t>(p)] = n;
  else head_ = n;
  if (n >= 0) prev_[static_cast<size_t>(n)] = p;
  else tail_ = p;
  --cached_;
}

}  // namespace tessera::llm
