// shardstream._core: thin bindings over the C++ library. One binding file per
// concept; each registers itself from here. Importing starts no thread.
#include <pybind11/pybind11.h>

#include <pybind11/stl.h>

#include "shardstream/byte_size.h"
#include "shardstream/status.h"
#include "shardstream/version.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
void RegisterLoader(py::module_& m);
void RegisterShardWriter(py::module_& m);
void RegisterLogSink(py::module_& m);
void RegisterCheckpoint(py::module_& m);
void RegisterImage(py::module_& m);
void RegisterTransfer(py::module_& m);
void RegisterManifest(py::module_& m);
void RegisterSource(py::module_& m);
void RegisterParquet(py::module_& m);
}  // namespace shardstream::python

PYBIND11_MODULE(_core, m) {
  m.doc() = "Native core of shardstream (C++). Use the shardstream package instead.";
  m.attr("__version__") = std::string(shardstream::Version());
  // Raises the exception a Status of this kind maps to (for tests of the mapping).
  m.def("_raise_status", [](const std::string& kind, const std::string& message,
                            const std::string& url, int64_t offset) {
    for (int c = 1; c <= static_cast<int>(shardstream::StatusCode::kCancelled); ++c) {
      auto code = static_cast<shardstream::StatusCode>(c);
      if (shardstream::StatusCodeName(code) == kind)
        shardstream::python::ThrowStatus(shardstream::Status(code, message, url, offset));
    }
    throw py::value_error("unknown kind " + kind);
  });
  m.def(
      "parse_size",
      [](const std::string& text) {
        return shardstream::python::ValueOrThrow(shardstream::ParseByteSize(text));
      },
      py::arg("text"), "Bytes from a size such as '512MiB' or '0.2GB' (see byte_size.h).");
  m.def("format_size", &shardstream::FormatByteSize, py::arg("bytes"));
  shardstream::python::RegisterLogSink(m);
  shardstream::python::RegisterLoader(m);
  shardstream::python::RegisterShardWriter(m);
  shardstream::python::RegisterCheckpoint(m);
  shardstream::python::RegisterImage(m);
  shardstream::python::RegisterTransfer(m);
  shardstream::python::RegisterManifest(m);
  shardstream::python::RegisterSource(m);
  shardstream::python::RegisterParquet(m);
}
