// Transfer options and counters (shardstream/transfer.h) for Python.
#include <pybind11/pybind11.h>

#include "shardstream/transfer.h"

namespace py = pybind11;

namespace shardstream::python {

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
  return d;
}

void RegisterTransfer(py::module_& m) {
  m.def("transfer_stats", [] { return TransferStatsToDict(GetTransferStats()); },
        "This process's remote-read counters (see shardstream/transfer.h).");
  m.def("get_transfer_options", [] {
    TransferOptions o = GetTransferOptions();
    py::dict d;
    d["part_size"] = o.part_size;
    d["parts_per_stream"] = o.parts_per_stream;
    d["max_connections"] = o.max_connections;
    d["initial_host_connections"] = o.initial_host_connections;
    d["max_bytes_in_flight"] = o.max_bytes_in_flight;
    d["stall_s"] = o.stall_s;
    d["hedge_factor"] = o.hedge_factor;
    d["hedge_min_s"] = o.hedge_min_s;
    return d;
  });
  m.def("set_transfer_options", [](const py::dict& d) {
    TransferOptions o = GetTransferOptions();
    for (auto item : d) {
      auto key = item.first.cast<std::string>();
      py::handle v = item.second;
      if (key == "part_size") o.part_size = v.cast<uint64_t>();
      else if (key == "parts_per_stream") o.parts_per_stream = v.cast<int>();
      else if (key == "max_connections") o.max_connections = v.cast<int>();
      else if (key == "initial_host_connections") o.initial_host_connections = v.cast<int>();
      else if (key == "max_bytes_in_flight") o.max_bytes_in_flight = v.cast<uint64_t>();
      else if (key == "stall_s") o.stall_s = v.cast<double>();
      else if (key == "hedge_factor") o.hedge_factor = v.cast<double>();
      else if (key == "hedge_min_s") o.hedge_min_s = v.cast<double>();
      else throw py::value_error("set_transfer_options: unknown option '" + key + "'");
    }
    SetTransferOptions(o);
  });
}

}  // namespace shardstream::python
