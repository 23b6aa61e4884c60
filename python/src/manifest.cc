// Manifests for Python code that needs a data set's shard list itself
// (shardstream.ray.read_shards: one read task per shard), read through the
// Source seam so s3://, http(s):// and file manifests all work.
#include <pybind11/pybind11.h>

#include "shardstream/manifest.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {

void RegisterManifest(py::module_& m) {
  m.def(
      "read_manifest",
      [](const std::string& url) {
        Manifest manifest;
        {
          py::gil_scoped_release nogil;  // a remote manifest is a request
          Result<Manifest> r = LoadManifest(url);
          if (!r.ok()) {
            py::gil_scoped_acquire gil;
            ThrowStatus(r.status());
          }
          manifest = std::move(r).value();
        }
        py::list out;
        for (const ShardEntry& e : manifest.shards) {
          py::dict d;
          d["url"] = e.resolved.empty() ? e.url : e.resolved;
          d["size"] = e.size < 0 ? py::object(py::none()) : py::object(py::int_(e.size));
          d["nsamples"] =
              e.nsamples < 0 ? py::object(py::none()) : py::object(py::int_(e.nsamples));
          out.append(std::move(d));
        }
        return out;
      },
      py::arg("url"),
      "The shards of a manifest (local, file://, http(s)://, s3://) or brace pattern: "
      "[{'url' (resolved), 'size', 'nsamples'}], None where unknown.");
}

}  // namespace shardstream::python
