#pragma once
// The engine's cache blocks: which are free, which sequences share, and
// which hold a computed prefix that a later sequence may reuse.
//
// Note [Prefix caching]
// A full block is named by a chained hash: of its tokens, the hash of the
// block before it (so of every token before it), and the sequence's salt
// (the adapter that computed it, a client's cache_salt). Once computed, a
// full block is registered under that name; a new sequence whose tokens
// begin the same way takes the registered blocks instead of computing them
// (Engine::reuse_prefix), sharing them by reference count. Only full blocks
// are shared and a sequence writes past its length only, so a shared block
// is never written; where one would be (a sequence truncated into a shared
// block, a fork part-way through a block) the block is copied first.
//
// A registered block whose last sequence ends is not freed but kept,
// counted as free, on a least-recently-used list; a block is taken from the
// free list first and from the head of that list after (its registration
// dropped). A lookup compares the block's tokens, its parent's hash and
// its salt, not only the 64-bit name, so a collision can never share a
// wrong block.
//
// A salt is bytes a client may choose (a tenant's cache_salt), so it is
// never trusted to its hash: each salt in use has a slot holding its bytes,
// every registered block and every sequence holds its salt's slot, and a
// lookup compares slots. Two salts whose hashes collide therefore never
// share a block (one of them just misses the cache). The hash that starts a
// chain is SipHash-2-4 (libsodium's crypto_shorthash) under a key drawn
// when the pool is made, so a client cannot aim collisions at another
// tenant's chains or at the salt table. Slots in use are bounded by the
// sequences plus the registered blocks, so the table never fills.
//
// Everything is sized when the engine is made: no step allocates.
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera::llm {

class BlockPool {
 public:
  BlockPool() = default;
  BlockPool(int64_t n_blocks, int64_t block_tokens, bool caching);

  int64_t total() const { return n_; }
  // Blocks a sequence can take now: free, and registered but held by none.
  int64_t available() const { return static_cast<int64_t>(free_.size()) + cached_; }
  // Registered blocks held by no sequence (evictable).
  int64_t cached() const { return cached_; }
  bool caching() const { return caching_; }

  // A block for one sequence (refcount 1): a free one, else the least
  // recently used registered one, its registration dropped. The caller
  // checks available() first.
  int32_t take();
  // One more sequence holds b (a registered block held by none leaves the LRU list).
  void share(int32_t b);
  void release(int32_t b);
  int32_t refs(int32_t b) const { return ref_[static_cast<size_t>(b)]; }

  // The tokens stored at a block's slots (for names and copies).
  int32_t* tokens(int32_t b) { return toks_.data() + static_cast<size_t>(b) * static_cast<size_t>(bt_); }

  // The hash of a salt's bytes (SipHash-2-4 under the pool's random key
  // unless a test sets its own, to force collisions).
  using SaltHash = std::function<uint64_t(std::string_view)>;
  // Only before any salt is held.
  void set_salt_hash(SaltHash h);
  // The slot of a salt (0: the empty one), held once more; released by
  // release_salt. Its hash starts the chain of names of its blocks.
  int32_t hold_salt(std::string_view bytes);
  void release_salt(int32_t slot);
  // One more holder of a slot held already (a forked sequence).
  int32_t share_salt(int32_t slot) {
    if (slot) ++salts_[static_cast<size_t>(slot)].holders;
    return slot;
  }
  uint64_t salt_hash(int32_t slot) const { return slot ? salts_[static_cast<size_t>(slot)].hash : 0; }
  int64_t salts_in_use() const { return static_cast<int64_t>(salt_slot_.size()); }

  // The name of a full block of `tokens` after a block named `parent`.
  static uint64_t name(uint64_t parent, std::span<const int32_t> tokens);
  // Registers full block b of salt `salt` under `name` (its tokens already
  // stored) unless that name has a block already (two sequences computed the
  // same prefix, or a collision).
  void add(int32_t b, uint64_t name, uint64_t parent, int32_t salt);
  // The registered block named `name` with these tokens after `parent` of
  // salt `salt`, or -1.
  int32_t find(uint64_t name, uint64_t parent, int32_t salt, std::span<const int32_t> tokens) const;
  // Drops b's registration (its contents are about to change).
  void drop(int32_t b);
  bool registered(int32_t b) const { return name_[static_cast<size_t>(b)] != 0; }

 private:
  size_t slot_of(uint64_t name) const { return static_cast<size_t>(name) & mask_; }
  void lru_push(int32_t b);
  void lru_remove(int32_t b);
  void table_erase(int32_t b);

  int64_t n_ = 0, bt_ = 0;
  bool caching_ = false;
  std::vector<int32_t> ref_, free_;
  std::vector<int32_t> toks_;  // [n, block_tokens]
  // Registration: each block's name (0: none) and its parent's; an
  // open-addressed table of block ids (-1 empty), linear probing with
  // backward-shift deletion.
  std::vector<uint64_t> name_, parent_;
  std::vector<int32_t> salt_;  // each registered block's salt slot
  std::vector<int32_t> table_;
  size_t mask_ = 0;
  // Registered blocks held by none, least recently used first.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int64_t cached_ = 0;
  // Salts in use: slot -> bytes, hash and holders; bytes -> slot.
  struct Salt {
    std::string bytes;
    uint64_t hash = 0;
    int64_t holders = 0;
  };
  struct KeyedHash {
    std::shared_ptr<SaltHash> fn;  // shared with the pool, so that a moved pool's table still hashes
    size_t operator()(const std::string& s) const { return (*fn)(s); }
  };
  std::shared_ptr<SaltHash> salt_hash_fn_ = std::make_shared<SaltHash>();
  std::vector<Salt> salts_;
  std::vector<int32_t> free_salts_;
  std::unordered_map<std::string, int32_t, KeyedHash> salt_slot_{16, KeyedHash{salt_hash_fn_}};
};

}  // namespace tessera::llm
