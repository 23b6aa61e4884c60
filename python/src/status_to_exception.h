// The one converter from Status to Python exceptions (tensorstore's
// ThrowStatusException): every binding raises through it, so each error kind
// maps to the same class of shardstream.errors everywhere.
#ifndef SHARDSTREAM_PYTHON_STATUS_TO_EXCEPTION_H_
#define SHARDSTREAM_PYTHON_STATUS_TO_EXCEPTION_H_

#include <pybind11/pybind11.h>

#include "shardstream/result.h"
#include "shardstream/status.h"

namespace shardstream::python {

// Raises the shardstream.errors exception for a non-OK status.
// REQUIRES: the GIL is held.
[[noreturn]] void ThrowStatus(const Status& status);

inline void ThrowIfError(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T ValueOrThrow(Result<T>&& result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

}  // namespace shardstream::python

#endif  // SHARDSTREAM_PYTHON_STATUS_TO_EXCEPTION_H_
