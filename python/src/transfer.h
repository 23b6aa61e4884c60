// Transfer counters as a Python dict, for shardstream.transfer_stats() and
// Loader.stats()["transfer"]. REQUIRES: GIL.
#ifndef SHARDSTREAM_PYTHON_TRANSFER_H_
#define SHARDSTREAM_PYTHON_TRANSFER_H_

#include <pybind11/pybind11.h>

#include "shardstream/transfer.h"

namespace shardstream::python {

pybind11::dict TransferStatsToDict(const TransferStats& s);

}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_TRANSFER_H_
