// Transfer options and counters (shardstream/transfer.h) for Python.
#include "transfer.h"

#include <string>
#include <type_traits>

namespace py = pybind11;

namespace shardstream::python {
namespace {

// Every option once, by name: `f(name, member)` for each.
template <typename F>
void ForEachOption(TransferOptions& o, F&& f) {
  f("part_size", o.part_size);
  f("parts_per_stream", o.parts_per_stream);
  f("max_connections", o.max_connections);
  f("initial_host_connections", o.initial_host_connections);
  f("max_bytes_in_flight", o.max_bytes_in_flight);
  f("stall_s", o.stall_s);
  f("host_stall_s", o.host_stall_s);
  f("hedge_factor", o.hedge_factor);
  f("hedge_min_s", o.hedge_min_s);
}

}  // namespace

py::dict TransferStatsToDict(const TransferStats& s) {
  py::dict d;
  d["bytes"] = s.bytes;
  d["busy_seconds"] = s.busy_seconds;
  d["bytes_per_s"] = s.bytes_per_s;
  d["connections"] = s.connections;
  d["peak_connections"] = s.peak_connections;
  d["bytes_in_flight"] = s.bytes_in_flight;
  d["streams"] = s.streams;
  d["parted_streams"] = s.parted_streams;
  d["parts"] = s.parts;
  d["part_p50_s"] = s.part_p50_s;
  d["part_p99_s"] = s.part_p99_s;
  d["hedges"] = s.hedges;
  d["hedge_wins"] = s.hedge_wins;
  d["retries"] = s.retries;
  d["stalls"] = s.stalls;
  d["throttles"] = s.throttles;
  d["reader_wait_seconds"] = s.reader_wait_seconds;
  d["upload_parts"] = s.upload_parts;
  d["upload_bytes"] = s.upload_bytes;
  return d;
}

void RegisterTransfer(py::module_& m) {
  m.def("transfer_stats", [] { return TransferStatsToDict(GetTransferStats()); },
        "This process's remote-read counters (see shardstream/transfer.h).");
  m.def("get_transfer_options", [] {
    TransferOptions o = GetTransferOptions();
    py::dict d;
    ForEachOption(o, [&](const char* name, auto& value) { d[name] = value; });
    return d;
  });
  m.def("set_transfer_options", [](const py::dict& d) {
    TransferOptions o = GetTransferOptions();
    for (auto item : d) {
      const auto key = item.first.cast<std::string>();
      bool known = false;
      ForEachOption(o, [&](const char* name, auto& value) {
        if (key != name) return;
        value = item.second.cast<std::remove_reference_t<decltype(value)>>();
        known = true;
      });
      if (!known) throw py::value_error("set_transfer_options: unknown option '" + key + "'");
    }
    SetTransferOptions(o);
  });
}

}  // namespace shardstream::python
