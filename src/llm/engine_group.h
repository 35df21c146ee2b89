#pragma once
// Tensor-parallel serving: rank 0's engine sends every call it is asked to
// the other ranks' engines, which make the same call (Note [An engine across
// ranks] in engine_group.cpp).
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include "tessera/llm/engine.h"

namespace tessera::llm {

// A call as words: its operation, then its arguments.
enum class EngineOp : int64_t { Nop, Stop, Add, Remove, Truncate, Reuse, Fork, Step };

struct EngineCall {
  std::vector<int64_t> words;
  void start(EngineOp op) {
    words.clear();
    words.push_back(static_cast<int64_t>(op));
  }
  void put(int64_t v) { words.push_back(v); }
  void put(std::span<const int32_t> tokens) {
    put(static_cast<int64_t>(tokens.size()));
    words.insert(words.end(), tokens.begin(), tokens.end());
  }
  void put(std::string_view bytes);
};

struct Engine::Group {
  std::shared_ptr<Communicator> comm;
  bool leader = false;     // rank 0
  bool following = false;  // another rank, inside follow()
  int depth = 0;           // rank 0: calls in progress (a call may make others)
  EngineCall call;         // the call being sent or received
  // Rank 0: one call at a time, and a heartbeat while none comes (the other
  // ranks wait in a collective, which has a deadline).
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  std::chrono::steady_clock::time_point last_sent;
  std::thread heartbeat;
  // Another rank: the chunks of the step being followed, and their tokens.
  std::vector<Chunk> chunks;
  std::vector<int32_t> tokens;
  std::vector<int64_t> counts;  // each chunk's tokens

  explicit Group(std::shared_ptr<Communicator> c);
  ~Group();
  void send();     // rank 0: `call` to the others (mu held)
  void receive();  // another rank: rank 0's next call into `call`
};

// One public call of an engine. On rank 0, the outermost call is sent to
// the other ranks before it runs (a call that fails fails the same way
// there: calls check everything before they change anything); on another
// rank, a call not made by follow() is refused.
class Engine::Lead {
 public:
  template <typename Encode>
  Lead(Engine& e, Encode&& encode) : g_(e.group_.get()) {
    if (!g_) return;
    if (!g_->leader) {
      check_following();
      g_ = nullptr;
      return;
    }
    if (g_->depth++ > 0) return;
    try {
      lock_ = std::unique_lock<std::mutex>(g_->mu);
      encode(g_->call);
      g_->send();
    } catch (...) {
      --g_->depth;
      throw;
    }
  }
  ~Lead() {
    if (g_) --g_->depth;
  }
  Lead(const Lead&) = delete;
  Lead& operator=(const Lead&) = delete;

 private:
  void check_following() const;
  Group* g_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace tessera::llm
