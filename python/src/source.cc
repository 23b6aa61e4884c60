// The Source seam for Python code that writes folders itself (shardstream.ray's
// ShardSink to s3://): stat, list, remove and whole-file writes through
// DefaultSource(), so object stores get the same credentials and retries as
// every other read and write.
#include <pybind11/pybind11.h>

#include "shardstream/source.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

template <typename F>
auto WithoutGil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

void Check(const Status& s) {
  if (!s.ok()) ThrowStatus(s);
}

}  // namespace

void RegisterSource(py::module_& m) {
  m.def(
      "source_exists",
      [](const std::string& url) {
        Result<FileInfo> r = WithoutGil([&] { return DefaultSource()->Stat(url); });
        if (!r.ok() && r.status().code() == StatusCode::kNotFound) return false;
        Check(r.status());
        return true;
      },
      py::arg("url"), "Whether url exists (a NotFound is False; other errors raise).");
  m.def(
      "source_list",
      [](const std::string& url) {
        Result<std::vector<FileInfo>> r = WithoutGil([&] { return DefaultSource()->List(url); });
        Check(r.status());
        py::list out;
        for (const FileInfo& f : *r) out.append(py::make_tuple(f.url, f.is_dir));
        return out;
      },
      py::arg("url"), "[(url, is_dir)] directly below a folder or prefix, sorted.");
  m.def(
      "source_remove",
      [](const std::string& url) {
        Status s = WithoutGil([&] { return DefaultSource()->Remove(url); });
        if (s.code() != StatusCode::kNotFound) Check(s);
      },
      py::arg("url"), "Removes a file or object (one already gone is fine).");
  m.def(
      "source_write_file",
      [](const std::string& url, const py::bytes& data) {
        std::string bytes = data;
        Check(WithoutGil([&] { return WriteFileAtomic(*DefaultSource(), url, bytes); }));
      },
      py::arg("url"), py::arg("data"),
      "Writes a whole file atomically (WriteFileAtomic: a rename locally, one PUT to s3).");
}

}  // namespace shardstream::python
