// Pipeline schedules: the generators, the checks and the simulation
// (tessera/distributed/pipeline_schedule.h).
#include "tessera/distributed/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "tessera/core/error.h"

namespace tessera::distributed {

const char* pipe_op_name(PipeOp op) {
  switch (op) {
    case PipeOp::kForward: return "F";
    case PipeOp::kBackward: return "B";
    case PipeOp::kSendActivation: return "send-act";
    case PipeOp::kRecvActivation: return "recv-act";
    case PipeOp::kSendGrad: return "send-grad";
    case PipeOp::kRecvGrad: return "recv-grad";
  }
  return "?";
}

std::string PipeAction::str() const {
  return std::string(pipe_op_name(op)) + std::to_string(micro) + "@s" + std::to_string(stage);
}

namespace {

bool is_compute(PipeOp op) { return op == PipeOp::kForward || op == PipeOp::kBackward; }

void check_shape(const char* name, int ranks, int micro_batches, int virtual_stages) {
  TS_CHECK(ranks >= 1 && ranks <= 4096, name, ": the pipeline's ranks must be from 1 to 4096, got ", ranks);
  TS_CHECK(micro_batches >= 1 && micro_batches <= 1 << 16, name, ": micro_batches must be from 1 to 65536, got ",
           micro_batches);
  TS_CHECK(virtual_stages >= 1 && virtual_stages <= 64, name, ": virtual_stages must be from 1 to 64, got ",
           virtual_stages);
}

// A rank's compute order with the sends and receives around it: a stage's
// input is received just before its forward and its output sent just after;
// likewise the gradients around the backward.
std::vector<PipeAction> with_transfers(const std::vector<PipeAction>& compute, int stages) {
  std::vector<PipeAction> out;
  for (const PipeAction& a : compute) {
    if (a.op == PipeOp::kForward) {
      if (a.stage > 0) out.push_back({PipeOp::kRecvActivation, a.stage, a.micro});
      out.push_back(a);
      if (a.stage < stages - 1) out.push_back({PipeOp::kSendActivation, a.stage, a.micro});
    } else {
      if (a.stage < stages - 1) out.push_back({PipeOp::kRecvGrad, a.stage, a.micro});
      out.push_back(a);
      if (a.stage > 0) out.push_back({PipeOp::kSendGrad, a.stage, a.micro});
    }
  }
  return out;
}

Schedule make(const char* name, int ranks, int micro_batches, int virtual_stages,
              const std::vector<std::vector<PipeAction>>& compute) {
  Schedule s;
  s.name = name;
  s.ranks = ranks;
  s.micro_batches = micro_batches;
  s.virtual_stages = virtual_stages;
  for (const auto& c : compute) s.actions.push_back(with_transfers(c, s.stages()));
  return s;
}

}  // namespace

Schedule gpipe(int p, int m) {
  check_shape("gpipe", p, m, 1);
  std::vector<std::vector<PipeAction>> compute(p);
  for (int r = 0; r < p; ++r) {
    for (int i = 0; i < m; ++i) compute[r].push_back({PipeOp::kForward, r, i});
    for (int i = 0; i < m; ++i) compute[r].push_back({PipeOp::kBackward, r, i});
  }
  return make("gpipe", p, m, 1, compute);
}

Schedule one_f_one_b(int p, int m) {
  check_shape("1f1b", p, m, 1);
  TS_CHECK(m >= p, "1f1b: ", m, " micro-batches cannot fill a pipeline of ", p,
           " stages; use at least as many micro-batches as stages (or the gpipe schedule)");
  std::vector<std::vector<PipeAction>> compute(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = std::min(p - r - 1, m);
    int f = 0, b = 0;
    while (f < warmup) compute[r].push_back({PipeOp::kForward, r, f++});
    while (f < m) {
      compute[r].push_back({PipeOp::kForward, r, f++});
      compute[r].push_back({PipeOp::kBackward, r, b++});
    }
    while (b < m) compute[r].push_back({PipeOp::kBackward, r, b++});
  }
  return make("1f1b", p, m, 1, compute);
}

// Megatron's interleaved order: forwards go round the rank's v stages p
// micro-batches at a time; backwards likewise, last stage first. Rank r runs
// 2 (p - r - 1) + (v - 1) p forwards ahead, then alternates.
Schedule interleaved_1f1b(int p, int m, int v) {
  check_shape("interleaved", p, m, v);
  TS_CHECK(m % p == 0, "interleaved: micro_batches = ", m, " must be a multiple of the pipeline's ", p,
           " ranks (each round of the virtual stages takes ", p, " micro-batches)");
  const int total = m * v;
  auto nth = [&](int r, int k, bool forward) {
    const int chunk = (k % (p * v)) / p;
    const int micro = (k / (p * v)) * p + k % p;
    return PipeAction{forward ? PipeOp::kForward : PipeOp::kBackward, (forward ? chunk : v - 1 - chunk) * p + r, micro};
  };
  std::vector<std::vector<PipeAction>> compute(p);
  for (int r = 0; r < p; ++r) {
    const int warmup = m == p ? total : std::min(total, 2 * (p - r - 1) + (v - 1) * p);
    int f = 0, b = 0;
    while (f < warmup) compute[r].push_back(nth(r, f++, true));
    while (f < total) {
      compute[r].push_back(nth(r, f++, true));
      compute[r].push_back(nth(r, b++, false));
    }
    while (b < total) compute[r].push_back(nth(r, b++, false));
  }
  return make("interleaved", p, m, v, compute);
}

Schedule make_schedule(const std::string& name, int ranks, int micro_batches, int virtual_stages) {
  if (name == "gpipe" || name == "1f1b") {
    TS_CHECK(virtual_stages == 1, "pipeline schedule '", name, "' has one stage per rank; virtual_stages = ",
             virtual_stages, " needs the interleaved schedule");
    return name == "gpipe" ? gpipe(ranks, micro_batches) : one_f_one_b(ranks, micro_batches);
  }
  if (name == "interleaved") return interleaved_1f1b(ranks, micro_batches, virtual_stages);
  TS_ERROR("pipeline schedule: unknown name '", name, "'; expected gpipe, 1f1b or interleaved");
}

// ---- checks ------------------------------------------------------------------------------

void check_schedule(const Schedule& s) {
  const int S = s.stages(), m = s.micro_batches;
  TS_CHECK(static_cast<int>(s.actions.size()) == s.ranks, "pipeline schedule '", s.name, "': has action lists for ",
           s.actions.size(), " ranks, expected ", s.ranks);
  using Key = std::tuple<PipeOp, int, int>;
  std::map<Key, std::pair<int, int>> where;  // (rank, position) of each action
  for (int r = 0; r < s.ranks; ++r) {
    for (int k = 0; k < static_cast<int>(s.actions[r].size()); ++k) {
      const PipeAction& a = s.actions[r][k];
      auto bad = [&](const std::string& why) {
        TS_ERROR("pipeline schedule '", s.name, "': rank ", r, " action ", k, " (", a.str(), ") ", why);
      };
      if (a.stage < 0 || a.stage >= S) bad("names a stage outside 0.." + std::to_string(S - 1));
      if (a.micro < 0 || a.micro >= m) bad("names a micro-batch outside 0.." + std::to_string(m - 1));
      if (s.rank_of(a.stage) != r) bad("is for a stage rank " + std::to_string(s.rank_of(a.stage)) + " holds");
      if ((a.op == PipeOp::kSendActivation || a.op == PipeOp::kRecvGrad) && a.stage == S - 1)
        bad("passes on from the last stage");
      if ((a.op == PipeOp::kRecvActivation || a.op == PipeOp::kSendGrad) && a.stage == 0)
        bad("passes back from the first stage");
      if (!where.emplace(Key{a.op, a.stage, a.micro}, std::pair{r, k}).second) bad("appears twice");
    }
  }
  auto find = [&](PipeOp op, int stage, int micro) -> const std::pair<int, int>* {
    auto it = where.find(Key{op, stage, micro});
    return it == where.end() ? nullptr : &it->second;
  };
  auto require_before = [&](PipeOp first, PipeOp then, int stage, int micro, const char* why) {
    const auto* a = find(first, stage, micro);
    const auto* b = find(then, stage, micro);
    const PipeAction fa{first, stage, micro}, tb{then, stage, micro};
    TS_CHECK(a && b, "pipeline schedule '", s.name, "': ", a ? tb.str() : fa.str(), " is missing (", why, ")");
    TS_CHECK(a->second < b->second, "pipeline schedule '", s.name, "': rank ", a->first, " runs ", tb.str(),
             " before ", fa.str(), " (", why, ")");
  };
  for (int st = 0; st < S; ++st)
    for (int i = 0; i < m; ++i) {
      require_before(PipeOp::kForward, PipeOp::kBackward, st, i, "a backward needs its forward");
      if (st > 0) {
        require_before(PipeOp::kRecvActivation, PipeOp::kForward, st, i, "a stage's input arrives before its forward");
        require_before(PipeOp::kBackward, PipeOp::kSendGrad, st, i, "the input's gradient is sent after the backward");
        TS_CHECK(find(PipeOp::kSendActivation, st - 1, i), "pipeline schedule '", s.name, "': rank ",
                 s.rank_of(st - 1), " never sends ", PipeAction{PipeOp::kSendActivation, st - 1, i}.str(), ", which rank ",
                 s.rank_of(st), " receives");
      }
      if (st < S - 1) {
        require_before(PipeOp::kForward, PipeOp::kSendActivation, st, i, "the output is sent after the forward");
        require_before(PipeOp::kRecvGrad, PipeOp::kBackward, st, i, "the output's gradient arrives before the backward");
        TS_CHECK(find(PipeOp::kSendGrad, st + 1, i), "pipeline schedule '", s.name, "': rank ", s.rank_of(st + 1),
                 " never sends ", PipeAction{PipeOp::kSendGrad, st + 1, i}.str(), ", which rank ", s.rank_of(st),
                 " receives");
      }
    }
  // Transfers between two stages match by order (Note [Pipeline messages] in
  // pipeline.cpp): the receiver takes the micro-batches in the order sent.
  for (int st = 0; st + 1 < S; ++st) {
    auto order = [&](PipeOp op, int stage) {
      std::vector<std::pair<int, int>> pos;  // (position, micro)
      for (int i = 0; i < m; ++i) pos.emplace_back(find(op, stage, i)->second, i);
      std::sort(pos.begin(), pos.end());
      std::vector<int> micros;
      for (auto [k, i] : pos) micros.push_back(i);
      return micros;
    };
    TS_CHECK(order(PipeOp::kSendActivation, st) == order(PipeOp::kRecvActivation, st + 1), "pipeline schedule '",
             s.name, "': stage ", st + 1, " receives activations in another order than stage ", st, " sends them");
    TS_CHECK(order(PipeOp::kSendGrad, st + 1) == order(PipeOp::kRecvGrad, st), "pipeline schedule '", s.name,
             "': stage ", st, " receives gradients in another order than stage ", st + 1, " sends them");
  }
  simulate(s);  // throws when the ranks would wait on each other forever
}

// ---- simulation --------------------------------------------------------------------------

Simulation simulate(const Schedule& s, double forward, double backward) {
  const int p = s.ranks;
  Simulation sim;
  sim.peak_in_flight.assign(p, 0);
  sim.busy.assign(p, {});
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  std::vector<int> in_flight(p, 0);
  std::map<std::tuple<PipeOp, int, int>, double> sent;  // (send op, stage, micro) -> when
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < s.actions[r].size()) {
        const PipeAction& a = s.actions[r][next[r]];
        if (is_compute(a.op)) {
          const double cost = a.op == PipeOp::kForward ? forward : backward;
          sim.busy[r].emplace_back(clock[r], clock[r] + cost);
          clock[r] += cost;
          in_flight[r] += a.op == PipeOp::kForward ? 1 : -1;
          sim.peak_in_flight[r] = std::max(sim.peak_in_flight[r], in_flight[r]);
        } else if (a.op == PipeOp::kSendActivation || a.op == PipeOp::kSendGrad) {
          sent[{a.op, a.stage, a.micro}] = clock[r];
        } else {
          const bool act = a.op == PipeOp::kRecvActivation;
          auto it = sent.find({act ? PipeOp::kSendActivation : PipeOp::kSendGrad, act ? a.stage - 1 : a.stage + 1, a.micro});
          if (it == sent.end()) break;  // waits
          clock[r] = std::max(clock[r], it->second);
        }
        ++next[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < p; ++r)
    if (next[r] < s.actions[r].size())
      stuck += (stuck.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " at " +
               s.actions[r][next[r]].str();
  TS_CHECK(stuck.empty(), "pipeline schedule '", s.name, "' never finishes: the ranks wait on each other (", stuck,
           ")");
  double busy = 0;
  for (int r = 0; r < p; ++r) {
    sim.makespan = std::max(sim.makespan, clock[r]);
    for (auto [b, e] : sim.busy[r]) busy += e - b;
  }
  sim.bubble = sim.makespan > 0 ? 1 - busy / (p * sim.makespan) : 0;
  return sim;
}

double ideal_bubble(int p, int m, int v) {
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m + p - 1);
}

}  // namespace tessera::distributed
