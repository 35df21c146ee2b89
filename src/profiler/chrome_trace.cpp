// The Chrome trace / Perfetto JSON writer: complete ("X") events for scopes on
// one track per thread, and a counter ("C") track for live memory, so time and
// memory read on one timeline.
#include <cerrno>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "profiler/state.h"
#include "tessera/core/error.h"

namespace tessera::profiler {

void Profiler::export_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TS_CHECK(f, "export_chrome_trace: cannot open '", path, "' for writing: ", std::strerror(errno));
  f << text;
  f.flush();
  TS_CHECK(f, "export_chrome_trace: writing '", path, "' failed: ", std::strerror(errno));
}

std::string Profiler::chrome_trace() const {
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
  nlohmann::json doc = {{"traceEvents", std::move(events)},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"start_unix_us", s_->wall_start_us}}}};
  return doc.dump();
}

void merge_chrome_traces(const std::vector<std::string>& rank_traces, const std::string& out) {
  std::vector<nlohmann::json> docs;
  double first = 0;
  for (size_t r = 0; r < rank_traces.size(); ++r) {
    nlohmann::json d = nlohmann::json::parse(rank_traces[r], nullptr, false);
    TS_CHECK(!d.is_discarded() && d.contains("traceEvents") && d["traceEvents"].is_array(), "merge_chrome_traces: "
             "rank ", r, "'s trace is not a Chrome trace");
    const double start = d.contains("otherData") ? d["otherData"].value("start_unix_us", 0.0) : 0.0;
    first = r == 0 ? start : std::min(first, start);
    docs.push_back(std::move(d));
  }
  nlohmann::json events = nlohmann::json::array();
  for (size_t r = 0; r < docs.size(); ++r) {
    const double shift = docs[r]["otherData"].value("start_unix_us", 0.0) - first;
    const int pid = static_cast<int>(r);
    for (auto& e : docs[r]["traceEvents"]) {
      if (e.value("name", "") == "process_name") e["args"]["name"] = "rank " + std::to_string(r);
      e["pid"] = pid;
      if (e.contains("ts") && e["ts"].is_number()) e["ts"] = e["ts"].get<double>() + shift;
      events.push_back(std::move(e));
    }
  }
  nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  TS_CHECK(f, "merge_chrome_traces: cannot open '", out, "' for writing: ", std::strerror(errno));
  f << doc.dump();
  f.flush();
  TS_CHECK(f, "merge_chrome_traces: writing '", out, "' failed: ", std::strerror(errno));
}

}  // namespace tessera::profiler
