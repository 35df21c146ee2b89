// The profiler's reports: the op table (by op or by module path) and the
// memory peak with what was alive at it.
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "profiler/state.h"
#include "tessera/core/numbers.h"

namespace tessera::profiler {
namespace {

std::string fmt(const char* f, double v) {
  ClassicLocale c_locale;  // "0.5" whatever the process locale
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string mib(int64_t bytes) { return fmt("%.2f", static_cast<double>(bytes) / (1 << 20)); }

std::string pad(std::string s, size_t w, bool right = false) {
  if (s.size() > w) s = s.substr(0, w - 2) + "..";
  std::string sp(w - s.size(), ' ');
  return right ? sp + s : s + sp;
}

// What a block was for, from where it was made and how long it lived.
MemoryKind classify(const Block& b) {
  if (b.label >= 0) return static_cast<MemoryKind>(b.label);
  if (b.in_op && !b.survived) return MemoryKind::kTemporary;
  switch (b.phase) {
    case Phase::kBackward: return MemoryKind::kBackward;
    case Phase::kOptimizer: return MemoryKind::kOptimizerState;
    case Phase::kForward: return b.in_op ? MemoryKind::kActivation : MemoryKind::kInput;
    case Phase::kOther: return MemoryKind::kInput;
  }
  return MemoryKind::kInput;
}

}  // namespace

std::vector<OpStat> Profiler::op_stats(GroupBy by) const {
  std::lock_guard<std::mutex> lock(s_->mu);
  std::map<std::tuple<std::string, std::string, Phase>, OpStat> rows;
  for (const Event& e : s_->events) {
    bool timed = e.kind == trace::ScopeKind::kOp || e.kind == trace::ScopeKind::kBackward;
    if (!timed || e.folded || e.t1 < 0) continue;
    std::string name = e.kind == trace::ScopeKind::kBackward ? std::string(e.name) + "_backward" : e.name;
    std::string module = e.module ? e.module : "";
    auto key = by == GroupBy::kOp ? std::make_tuple(name, std::string(), e.phase) : std::make_tuple(module, module, e.phase);
    OpStat& r = rows[key];
    if (r.calls == 0) {
      r.name = by == GroupBy::kOp ? name : (module.empty() ? "(top level)" : module);
      r.module = by == GroupBy::kOp ? "" : module;
      r.phase = e.phase;
    }
    int64_t total = e.t1 - e.t0;
    int64_t self = std::max<int64_t>(0, total - e.child_ns);
    r.calls++;
    r.self_ns += self;
    // By module, nested ops would count twice in a total: sum self times.
    r.total_ns += by == GroupBy::kOp ? total : self;
    r.flops += e.flops;
    r.bytes += e.in_bytes + e.alloc_bytes;
  }
  std::vector<OpStat> out;
  for (auto& [k, v] : rows) out.push_back(std::move(v));
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.self_ns > b.self_ns; });
  return out;
}

std::string Profiler::table(GroupBy by, int max_rows) const {
  std::vector<OpStat> rows = op_stats(by);
  int64_t all_self = 0;
  for (const OpStat& r : rows) all_self += r.self_ns;
  std::string out;
  auto line = [&](std::initializer_list<std::pair<std::string, size_t>> cells) {
    bool first = true;
    for (auto& [text, w] : cells) {
      out += first ? pad(text, w) : "  " + pad(text, w, true);
      first = false;
    }
    out += '\n';
  };
  const size_t wn = by == GroupBy::kOp ? 28 : 36;
  line({{by == GroupBy::kOp ? "op" : "module", wn}, {"phase", 9}, {"calls", 7}, {"self ms", 9}, {"self %", 7},
        {"total ms", 9}, {"avg us", 9}, {"GFLOP/s", 8}, {"MB", 9}});
  out += std::string(wn + 2 * 8 + 9 + 7 + 9 + 7 + 9 + 9 + 8 + 9, '-') + '\n';
  int shown = 0;
  for (const OpStat& r : rows) {
    if (shown++ == max_rows) break;
    double self_ms = r.self_ns / 1e6, total_ms = r.total_ns / 1e6;
    line({{r.name, wn},
          {phase_name(r.phase), 9},
          {std::to_string(r.calls), 7},
          {fmt("%.3f", self_ms), 9},
          {fmt("%.1f", all_self ? 100.0 * r.self_ns / all_self : 0.0), 7},
          {fmt("%.3f", total_ms), 9},
          {fmt("%.1f", r.total_ns / 1e3 / std::max<int64_t>(1, r.calls)), 9},
          {r.flops ? fmt("%.1f", r.flops / std::max(1.0, static_cast<double>(r.total_ns))) : "", 8},
          {fmt("%.1f", r.bytes / 1e6), 9}});
  }
  if (static_cast<int>(rows.size()) > max_rows)
    out += "... " + std::to_string(rows.size() - max_rows) + " more rows\n";
  out += "self time in ops and backward nodes: " + fmt("%.3f", all_self / 1e6) + " ms\n";
  return out;
}

MemoryReport Profiler::memory_report() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  const auto& s = *s_;
  MemoryReport r;
  r.peak_bytes = s.peak;
  r.peak_time_ns = s.peak_t;
  r.start_bytes = s.start_bytes;
  r.end_bytes = s.current;
  r.allocations = s.allocations;
  r.frees = s.frees;
  // Blocks made while recording and alive at the peak.
  if (s.peak_seq >= 0)
    for (const Block& b : s.blocks)
      if (b.alloc_seq <= s.peak_seq && (b.free_seq < 0 || b.free_seq > s.peak_seq))
        r.at_peak.push_back({b.module ? b.module : "", b.op ? b.op : "", b.phase, classify(b), b.bytes});
  // Blocks from before start: labelled ones by name, the rest as one entry.
  int64_t existing = s.start_bytes;
  for (const auto& g : s.existing_freed)
    if (s.peak_seq < 0 || g.seq < s.peak_seq) existing -= g.bytes;
  for (const auto& [p, l] : s.labels) {
    bool gone = false;
    for (const auto& g : s.existing_freed)
      if (g.p == p && (s.peak_seq < 0 || g.seq < s.peak_seq)) gone = true;
    if (gone || l.bytes > existing) continue;
    r.at_peak.push_back({l.module, "", Phase::kOther, l.kind, l.bytes});
    existing -= l.bytes;
  }
  if (existing > 0) r.at_peak.push_back({"", "", Phase::kOther, MemoryKind::kExisting, existing});
  std::sort(r.at_peak.begin(), r.at_peak.end(), [](const PeakBlock& a, const PeakBlock& b) { return a.bytes > b.bytes; });
  return r;
}

std::string Profiler::memory_table(int max_rows) const {
  MemoryReport r = memory_report();
  std::string out = "memory: peak " + mib(r.peak_bytes) + " MiB at " + fmt("%.3f", r.peak_time_ns / 1e6) +
                    " ms (at start " + mib(r.start_bytes) + " MiB, at end " + mib(r.end_bytes) + " MiB; " +
                    std::to_string(r.allocations) + " allocations, " + std::to_string(r.frees) + " frees)\n";
  std::map<MemoryKind, int64_t> by_kind;
  std::map<std::string, std::map<MemoryKind, int64_t>> by_module;
  for (const PeakBlock& b : r.at_peak) {
    by_kind[b.kind] += b.bytes;
    by_module[b.module.empty() ? "(top level)" : b.module][b.kind] += b.bytes;
  }
  auto pct = [&](int64_t v) { return fmt("%.1f", r.peak_bytes ? 100.0 * v / r.peak_bytes : 0.0); };
  out += "\nalive at the peak, by kind:\n";
  out += pad("kind", 20) + "  " + pad("MiB", 10, true) + "  " + pad("%", 6, true) + "\n";
  std::vector<std::pair<MemoryKind, int64_t>> kinds(by_kind.begin(), by_kind.end());
  std::sort(kinds.begin(), kinds.end(), [](auto& a, auto& b) { return a.second > b.second; });
  for (auto& [k, v] : kinds) out += pad(kind_name(k), 20) + "  " + pad(mib(v), 10, true) + "  " + pad(pct(v), 6, true) + "\n";
  out += "\nalive at the peak, by module:\n";
  out += pad("module", 36) + "  " + pad("MiB", 10, true) + "  " + pad("%", 6, true) + "  largest kind\n";
  std::vector<std::pair<std::string, int64_t>> mods;
  for (auto& [m, ks] : by_module) {
    int64_t tot = 0;
    for (auto& [k, v] : ks) tot += v;
    mods.push_back({m, tot});
  }
  std::sort(mods.begin(), mods.end(), [](auto& a, auto& b) { return a.second > b.second; });
  int shown = 0;
  for (auto& [m, v] : mods) {
    if (shown++ == max_rows) {
      out += "... " + std::to_string(mods.size() - max_rows) + " more modules\n";
      break;
    }
    const auto& ks = by_module[m];
    auto top = std::max_element(ks.begin(), ks.end(), [](auto& a, auto& b) { return a.second < b.second; });
    out += pad(m, 36) + "  " + pad(mib(v), 10, true) + "  " + pad(pct(v), 6, true) + "  " + kind_name(top->first) + "\n";
  }
  return out;
}

}  // namespace tessera::profiler
