// Manifests for Python code that needs a data set's shard list itself
// (shardstream.ray.read_shards: one read task per shard), read through the
// Source seam so s3://, http(s):// and file manifests all work.
#include <pybind11/pybind11.h>

#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/url.h"
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
  m.def(
      "is_store_prefix",
      [](const std::string& url) {
        const std::string scheme = UrlScheme(url);
        if ((scheme != "s3" && scheme != "gs") || IsBracePattern(url)) return false;
        const std::string name = UrlBasename(url);  // "" after a trailing '/'
        return name.find('.') == std::string::npos;
      },
      py::arg("url"),
      "True for an object-store prefix (s3:// or gs://, ending in '/' or in a name without a "
      "dot): an input the loader lists.");
  m.def(
      "resolve_listing",
      [](const std::string& url) -> py::object {
        std::string text;
        bool plain = true;
        {
          py::gil_scoped_release nogil;  // a listing and an index per shard: requests
          Result<Manifest> r = ResolveDataset({url}, ResolveOptions());
          if (!r.ok()) {
            py::gil_scoped_acquire gil;
            ThrowStatus(r.status());
          }
          for (ShardEntry& e : r->shards) {
            if (!e.resolved.empty()) e.url = e.resolved;  // absolute: read from anywhere
            // Tar shards of known counts only: rows, Parquet and MDS entries carry more
            // than a manifest line says, and a count left unknown is not a manifest's.
            plain = plain && IsShardUrl(e.url) && e.nsamples >= 0 && e.extra.empty();
          }
          if (plain) text = FormatManifestJsonl(*r);
        }
        if (!plain) return py::none();
        return py::str(text);
      },
      py::arg("url"),
      "What the loader makes of an input (a listing, its manifest, every shard's sample "
      "count from its index), as manifest JSON Lines with absolute urls; None when that is "
      "not a plain manifest (rows, Parquet, MDS, or counts unknown).");
}

}  // namespace shardstream::python
