// Tensor-parallel serving: the command channel from rank 0's engine to the
// other ranks' (llm/engine_group.h).
#include "engine_group.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::llm {

// Note [An engine across ranks]
// Rank r of a tensor-parallel group holds the model's part {r, T} (Note [A
// model split across ranks]): its heads' keys and values in its own cache,
// the same blocks as every other rank's, since every rank's engine makes
// the same calls in the same order. Only rank 0's engine is driven (by the
// scheduler, by generate); it sends each call to the others as words by
// broadcast before it runs the call, and the others, in follow(), make it
// too. A step's collectives then line up: every rank sums the same block
// outputs in the same order. Calls check everything before they change
// anything, so a call that fails on rank 0 fails the same way on every rank
// and leaves every engine as it was; the followers go on to the next call.
// While rank 0's engine is idle, the others wait in a broadcast, which has
// the collective deadline (TESSERA_DIST_TIMEOUT): rank 0 sends a heartbeat
// (a call that does nothing) after every second without a call.

namespace {
constexpr int64_t kHead = 256;  // words of the first broadcast: the count, then the call's first words
constexpr auto kHeartbeat = std::chrono::seconds(1);

}  // namespace

void EngineCall::put(std::string_view bytes) {
  put(static_cast<int64_t>(bytes.size()));
  const size_t at = words.size();
  words.resize(at + (bytes.size() + 7) / 8, 0);
  if (!bytes.empty()) std::memcpy(words.data() + at, bytes.data(), bytes.size());
}

Engine::Group::Group(std::shared_ptr<Communicator> c) : comm(std::move(c)), leader(comm->rank() == 0) {
  if (!leader || comm->size() == 1) return;
  last_sent = std::chrono::steady_clock::now();
  heartbeat = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu);
    while (!wake.wait_for(lock, kHeartbeat, [&] { return stopping; })) {
      if (std::chrono::steady_clock::now() - last_sent < kHeartbeat) continue;
      try {
        call.start(EngineOp::Nop);
        send();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tessera: engine heartbeat to the tensor-parallel group failed: %s\n", e.what());
        return;
      }
    }
  });
}

Engine::Group::~Group() {
  if (!heartbeat.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;
    try {
      call.start(EngineOp::Stop);
      send();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera: ending the tensor-parallel group's engines failed: %s\n", e.what());
    }
  }
  wake.notify_all();
  heartbeat.join();
}

void Engine::Group::send() {
  last_sent = std::chrono::steady_clock::now();
  if (comm->size() == 1) return;
  std::vector<int64_t>& w = call.words;
  const int64_t n = static_cast<int64_t>(w.size());
  int64_t head[kHead] = {n};
  std::copy_n(w.begin(), std::min(n, kHead - 1), head + 1);
  comm->broadcast(head, kHead, 0);
  if (n > kHead - 1) comm->broadcast(w.data() + (kHead - 1), n - (kHead - 1), 0);
}

void Engine::Group::receive() {
  int64_t head[kHead] = {};
  comm->broadcast(head, kHead, 0);
  const int64_t n = head[0];
  TS_CHECK(n >= 1 && n <= (int64_t{1} << 28), "engine: rank 0 of the tensor-parallel group sent a call of ", n,
           " words (its build differs from this rank's?)");
  std::vector<int64_t>& w = call.words;
  w.assign(head + 1, head + 1 + std::min(n, kHead - 1));
  if (n > kHead - 1) {
    w.resize(static_cast<size_t>(n));
    comm->broadcast(w.data() + (kHead - 1), n - (kHead - 1), 0);
  }
}

void Engine::Lead::check_following() const {
  TS_CHECK(g_->following, "engine: rank ", g_->comm->rank(), " of a tensor-parallel group makes the calls rank 0's "
           "engine sends it (Engine::follow); its own are refused");
}

void Engine::follow() {
  TS_CHECK(group_ && !group_->leader, "engine: follow() is for the ranks but 0 of a tensor-parallel group "
           "(EngineOptions::group)");
  Group& g = *group_;
  g.following = true;
  struct Done {
    Group& g;
    ~Done() { g.following = false; }
  } done{g};
  for (;;) {
    g.receive();
    const std::vector<int64_t>& w = g.call.words;
    size_t at = 1;
    auto next = [&]() -> int64_t {
      TS_CHECK(at < w.size(), "engine: a call from rank 0 of the tensor-parallel group ends early");
      return w[at++];
    };
    auto tokens = [&](std::vector<int32_t>& out) {
      const int64_t n = next();
      TS_CHECK(n >= 0 && at + static_cast<size_t>(n) <= w.size(), "engine: a call from rank 0 of the "
               "tensor-parallel group ends early");
      out.insert(out.end(), w.begin() + static_cast<ptrdiff_t>(at), w.begin() + static_cast<ptrdiff_t>(at + n));
      at += static_cast<size_t>(n);
      return n;
    };
    // A call that fails here failed on rank 0 too, and neither engine
    // changed: on to the next one. A call that cannot be read is an error.
    auto quietly = [](auto&& f) {
      try {
        f();
      } catch (const Error&) {
      }
    };
    switch (static_cast<EngineOp>(w[0])) {
      case EngineOp::Stop: return;
      case EngineOp::Nop: break;
      case EngineOp::Add: quietly([&] { add_sequence(); }); break;
      case EngineOp::Remove: {
        const int64_t seq = next();
        quietly([&] { remove_sequence(seq); });
        break;
      }
      case EngineOp::Truncate: {
        const int64_t seq = next(), length = next();
        quietly([&] { truncate_sequence(seq, length); });
        break;
      }
      case EngineOp::Fork: {
        const int64_t seq = next(), length = next();
        quietly([&] { fork_sequence(seq, length); });
        break;
      }
      case EngineOp::Reuse: {
        const int64_t seq = next();
        g.tokens.clear();
        tokens(g.tokens);
        const int64_t bytes = next();
        TS_CHECK(bytes >= 0 && at + static_cast<size_t>((bytes + 7) / 8) <= w.size(),
                 "engine: a call from rank 0 of the tensor-parallel group ends early");
        const std::string_view salt(reinterpret_cast<const char*>(w.data() + at), static_cast<size_t>(bytes));
        quietly([&] { reuse_prefix(seq, g.tokens, salt); });
        break;
      }
      case EngineOp::Step: {
        const int64_t n = next();
        TS_CHECK(n >= 0 && n <= (int64_t{1} << 20), "engine: rank 0 of the tensor-parallel group sent a step of ",
                 n, " chunks");
        g.chunks.resize(static_cast<size_t>(n));
        g.tokens.clear();
        g.counts.clear();
        for (Chunk& c : g.chunks) {
          c.seq = next();
          c.logits = next();
          g.counts.push_back(tokens(g.tokens));
        }
        size_t t0 = 0;  // the spans are made once the tokens stop moving
        for (size_t i = 0; i < g.chunks.size(); ++i) {
          const size_t n = static_cast<size_t>(g.counts[i]);
          g.chunks[i].tokens = std::span<const int32_t>(g.tokens).subspan(t0, n);
          t0 += n;
        }
        quietly([&] { step(g.chunks); });
        break;
      }
      default: TS_ERROR("engine: rank 0 of the tensor-parallel group sent call ", w[0], ", which is none");
    }
  }
}

}  // namespace tessera::llm
