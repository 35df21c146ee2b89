// The profiler from Python: `with tessera.profiler.profile() as prof:` records
// every op (forward, backward, optimizer) with its time, FLOPs and bytes, and
// the memory timeline; then tables and a Chrome/Perfetto trace.
#include "bindings.h"
#include "tessera/profiler/profiler.h"

namespace tessera::python {

void bind_profiler(py::module_& m) {
  py::module_ p = m.def_submodule("_profiler", "The op and memory profiler");
  py::class_<profiler::Profiler>(p, "Profiler")
      .def(py::init([](bool record_memory, bool record_shapes) {
             return std::make_unique<profiler::Profiler>(profiler::ProfilerOptions{record_memory, record_shapes});
           }),
           py::arg("record_memory") = true, py::arg("record_shapes") = false)
      .def("start", &profiler::Profiler::start)
      .def("stop", &profiler::Profiler::stop)
      .def_property_readonly("recording", &profiler::Profiler::recording)
      .def("table", [](const profiler::Profiler& prof, const std::string& by, int rows) {
        TS_CHECK(by == "op" || by == "module", "table: group_by must be 'op' or 'module', got '", by, "'");
        return prof.table(by == "op" ? profiler::GroupBy::kOp : profiler::GroupBy::kModule, rows);
      }, py::arg("group_by") = "op", py::arg("row_limit") = 30)
      .def("memory_table", &profiler::Profiler::memory_table, py::arg("row_limit") = 20)
      .def("op_stats", [](const profiler::Profiler& prof) {
        py::list l;
        for (const auto& s : prof.op_stats()) {
          py::dict d;
          d["name"] = s.name;
          d["phase"] = profiler::phase_name(s.phase);
          d["calls"] = s.calls;
          d["self_ns"] = s.self_ns;
          d["total_ns"] = s.total_ns;
          d["flops"] = s.flops;
          d["bytes"] = s.bytes;
          l.append(d);
        }
        return l;
      })
      .def("export_chrome_trace", &profiler::Profiler::export_chrome_trace, py::arg("path"));
}

}  // namespace tessera::python
