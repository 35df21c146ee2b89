// The Chrome trace / Perfetto JSON writer: complete ("X") events for scopes on
// one track per thread, and a counter ("C") track for live memory, so time and
// memory read on one timeline.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "profiler/state.h"
#include "tessera/core/error.h"

namespace tessera::profiler {

void Profiler::export_chrome_trace(const std::string& path) const {
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", "tessera"}}}});
    for (const Event& e : s_->events) {
      if (e.t1 < 0) continue;
      nlohmann::json args = {{"phase", phase_name(e.phase)}};
      if (e.module && *e.module) args["module"] = e.module;
      if (e.flops) args["flops"] = e.flops;
      if (e.in_bytes + e.alloc_bytes) args["bytes"] = e.in_bytes + e.alloc_bytes;
      if (!e.shapes.empty()) args["input shapes"] = e.shapes;
      std::string name = e.kind == trace::ScopeKind::kBackward ? std::string(e.name) + "_backward" : e.name;
      if (e.kind == trace::ScopeKind::kModule && !*e.name) name = "(model)";
      events.push_back({{"name", name},
                        {"cat", trace::kind_name(e.kind)},
                        {"ph", "X"},
                        {"ts", e.t0 / 1e3},
                        {"dur", (e.t1 - e.t0) / 1e3},
                        {"pid", 1},
                        {"tid", e.tid},
                        {"args", std::move(args)}});
    }
    // Allocations of 64 KiB and more as instant events: what made the memory
    // counter jump, with the op and module that asked.
    for (const Block& b : s_->blocks)
      if (b.bytes >= (64 << 10))
        events.push_back({{"name", std::string("alloc ") + (b.op && *b.op ? b.op : "(no op)")},
                          {"cat", "memory"},
                          {"ph", "i"},
                          {"s", "p"},
                          {"ts", b.t_alloc / 1e3},
                          {"pid", 1},
                          {"tid", 0},
                          {"args", {{"bytes", b.bytes}, {"module", b.module ? b.module : ""},
                                    {"phase", phase_name(b.phase)}}}});
    if (s_->options.record_memory)
      for (const auto& pt : s_->timeline)
        events.push_back({{"name", "memory"},
                          {"ph", "C"},
                          {"ts", pt.t / 1e3},
                          {"pid", 1},
                          {"args", {{"allocated MiB", static_cast<double>(pt.bytes) / (1 << 20)}}}});
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TS_CHECK(f, "export_chrome_trace: cannot open '", path, "' for writing: ", std::strerror(errno));
  f << doc.dump();
  f.flush();
  TS_CHECK(f, "export_chrome_trace: writing '", path, "' failed: ", std::strerror(errno));
}

}  // namespace tessera::profiler
