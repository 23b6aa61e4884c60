// _core.ShardWriter: writes samples (a key and already-encoded field bytes)
// into tar shards plus a manifest. The Python layer (shardstream/writer.py)
// encodes str, numpy arrays and dicts; this only moves bytes, with the GIL
// released while they are written.
#include "shardstream/shard_writer.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

class PyShardWriter {
 public:
  PyShardWriter(const std::string& out_dir, const std::string& pattern, uint64_t max_bytes,
                uint64_t max_samples, const std::string& compression, int zstd_level,
                const std::string& manifest_name, bool write_index, bool overwrite) {
    ShardWriterOptions o;
    o.pattern = pattern;
    o.max_bytes = max_bytes;
    o.max_samples = max_samples;
    if (compression == "zstd") o.compression = ShardCompression::kZstd;
    else if (compression == "gzip") o.compression = ShardCompression::kGzip;
    else if (compression != "none" && !compression.empty())
      ThrowStatus(Status(StatusCode::kConfig,
                         "compression '" + compression + "': expected none, zstd or gzip"));
    o.zstd_level = zstd_level;
    o.manifest_name = manifest_name;
    o.write_index = write_index;
    o.overwrite = overwrite;
    std::optional<Result<std::unique_ptr<ShardWriter>>> r;
    {
      py::gil_scoped_release release;
      r.emplace(ShardWriter::Create(out_dir, o));
    }
    writer_ = ValueOrThrow(std::move(*r));
  }

  // `fields`: name -> bytes. The bytes objects stay referenced by the
  // caller's dict for the duration of the call, so their buffers can be read
  // without the GIL.
  void Write(const std::string& key, const py::dict& fields) {
    Live();
    Sample s;
    s.key = key;
    for (auto item : fields) {
      if (!py::isinstance<py::bytes>(item.second))
        ThrowStatus(Status(StatusCode::kConfig, "field '" + std::string(py::str(item.first)) +
                                                    "' of sample '" + key + "' is not bytes"));
      Field f;
      f.name = py::str(item.first).cast<std::string>();
      char* data = nullptr;
      Py_ssize_t len = 0;
      PyBytes_AsStringAndSize(item.second.ptr(), &data, &len);
      f.data = std::string_view(data, static_cast<size_t>(len));
      s.fields.push_back(std::move(f));
    }
    Status st;
    {
      py::gil_scoped_release release;
      st = writer_->Write(s);
    }
    ThrowIfError(st);
  }

  void Close() {
    if (!writer_ || closed_) return;
    Status st;
    {
      py::gil_scoped_release release;
      st = writer_->Close();
    }
    closed_ = true;
    ThrowIfError(st);
  }

  // Aborts: no partial shard and no manifest appear.
  void Abort() {
    py::gil_scoped_release release;
    writer_.reset();
  }

  py::list Shards() const {
    py::list out;
    if (!writer_) return out;
    for (const ShardEntry& e : writer_->manifest().shards) {
      py::dict d;
      d["url"] = e.url;
      d["size"] = e.size;
      d["nsamples"] = e.nsamples;
      d["checksum"] = e.checksum;
      out.append(d);
    }
    return out;
  }

 private:
  void Live() const {
    if (!writer_ || closed_)
      ThrowStatus(Status(StatusCode::kConfig, "the ShardWriter is closed"));
  }

  std::unique_ptr<ShardWriter> writer_;
  bool closed_ = false;
};

}  // namespace

void RegisterShardWriter(py::module_& m) {
  py::class_<PyShardWriter>(m, "ShardWriter", "Native shard writer; use shardstream.ShardWriter.")
      .def(py::init<const std::string&, const std::string&, uint64_t, uint64_t, const std::string&,
                    int, const std::string&, bool, bool>(),
           py::arg("out_dir"), py::arg("pattern"), py::arg("max_bytes"), py::arg("max_samples"),
           py::arg("compression"), py::arg("zstd_level"), py::arg("manifest_name"),
           py::arg("write_index"), py::arg("overwrite") = false)
      .def("write", &PyShardWriter::Write, py::arg("key"), py::arg("fields"))
      .def("close", &PyShardWriter::Close)
      .def("abort", &PyShardWriter::Abort)
      .def("shards", &PyShardWriter::Shards);
}

}  // namespace shardstream::python
