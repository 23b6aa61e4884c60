// Parquet rows for the native loader, read by pyarrow (shardstream/parquet.py)
// through the loader's Source: pyarrow reads a SourceFile (a Python file over
// a RandomAccessFile), and its record batches come here through the Arrow C
// stream interface, their values handed out as fields without a copy of the
// strings. The C++ library links no Arrow: Debian has none to link, and a
// second libarrow beside pyarrow's in one process is asking for trouble.
#include "parquet.h"

#include <pybind11/pybind11.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardstream/source.h"
#include "shardstream/url.h"
#include "status_to_exception.h"

// The Arrow C data interface, as its specification says to copy it
// (arrow.apache.org/docs/format/CDataInterface.html, CStreamInterface.html).
#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE
struct ArrowSchema {
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  void (*release)(struct ArrowSchema*);
  void* private_data;
};
struct ArrowArray {
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  void (*release)(struct ArrowArray*);
  void* private_data;
};
#endif
#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE
struct ArrowArrayStream {
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  const char* (*get_last_error)(struct ArrowArrayStream*);
  void (*release)(struct ArrowArrayStream*);
  void* private_data;
};
#endif

namespace py = pybind11;

namespace shardstream::python {
namespace {

// A Python file object over a RandomAccessFile: what pyarrow.parquet reads.
class SourceFile {
 public:
  SourceFile(const std::string& url, Source* source) : url_(url) {
    Source& s = source != nullptr ? *source : *DefaultSource();
    std::optional<Result<std::unique_ptr<RandomAccessFile>>> f;
    std::optional<Result<uint64_t>> size;
    {
      py::gil_scoped_release nogil;
      f.emplace(s.OpenRandomAccess(url));
      if (f->ok()) size.emplace((**f)->Size());
    }
    file_ = ValueOrThrow(std::move(*f));
    size_ = static_cast<int64_t>(ValueOrThrow(std::move(*size)));
  }
  py::bytes Read(int64_t n) {
    if (n < 0 || pos_ + n > size_) n = std::max<int64_t>(0, size_ - pos_);
    std::string buf(static_cast<size_t>(n), '\0');
    Result<size_t> got = size_t{0};
    {
      py::gil_scoped_release nogil;
      size_t done = 0;
      while (done < buf.size()) {
        got = file_->ReadAt(static_cast<uint64_t>(pos_) + done, buf.size() - done, buf.data() + done);
        if (!got.ok() || *got == 0) break;
        done += *got;
      }
      if (got.ok()) got = done;
    }
    if (!got.ok()) last_error_ = got.status();
    const size_t done = ValueOrThrow(std::move(got));
    if (done < buf.size())
      ThrowStatus(Status(StatusCode::kCorrupt, "file " + RedactUrl(url_) + " ended at byte " +
                                                   std::to_string(pos_ + static_cast<int64_t>(done)) +
                                                   ", before its size says",
                         RedactUrl(url_), pos_ + static_cast<int64_t>(done)));
    pos_ += n;
    return py::bytes(buf);
  }
  int64_t Seek(int64_t offset, int whence) {
    const int64_t base = whence == 0 ? 0 : whence == 1 ? pos_ : size_;
    pos_ = std::max<int64_t>(0, base + offset);
    return pos_;
  }
  int64_t Tell() const { return pos_; }
  int64_t Size() const { return size_; }
  const std::string& url() const { return url_; }
  // The Source's error behind the last failed read (pyarrow passes on only
  // its text through the C stream interface).
  const Status& last_error() const { return last_error_; }

 private:
  std::string url_;
  Status last_error_;
  std::unique_ptr<RandomAccessFile> file_;
  int64_t size_ = 0;
  int64_t pos_ = 0;
};

// Status from a Python exception raised reading `url`: shardstream's own
// errors keep their kind (a read through the Source failed), pyarrow's own
// (ArrowException: not Parquet, a damaged page) are the file's defect, and
// anything else (a missing module, a bug) is no defect of the data.
Status StatusFromPython(py::error_already_set& e, const std::string& url, const std::string& what) {
  StatusCode code = StatusCode::kConfig;
  if (py::hasattr(e.value(), "kind")) {
    const std::string kind = py::str(e.value().attr("kind"));
    if (kind == "io") code = StatusCode::kIo;
    else if (kind == "corrupt") code = StatusCode::kCorrupt;
    else if (kind == "unavailable") code = StatusCode::kUnavailable;
    else if (kind == "not-found") code = StatusCode::kNotFound;
    else if (kind == "auth") code = StatusCode::kAuth;
    else if (kind == "config") code = StatusCode::kConfig;
    else if (kind == "cancelled") code = StatusCode::kCancelled;
    else if (kind == "checksum") code = StatusCode::kChecksum;
  } else {
    try {
      if (e.matches(py::module_::import("pyarrow").attr("ArrowException"))) code = StatusCode::kCorrupt;
    } catch (py::error_already_set&) {
    }
  }
  return Status(code, "Parquet file " + RedactUrl(url) + ": " + what + ": " + e.what(), RedactUrl(url));
}

py::object ParquetModule() { return py::module_::import("shardstream.parquet"); }

// One record batch, released when its last field is gone.
struct Batch {
  ArrowArray array{};
  ~Batch() {
    if (array.release != nullptr) array.release(&array);
  }
};

std::string Stem(const std::string& url) {
  std::string base = UrlBasename(url.substr(0, url.find('?')));
  const size_t dot = base.rfind(".parquet");
  return dot == std::string::npos ? base : base.substr(0, dot);
}

bool ValidAt(const ArrowArray* c, int64_t i) {
  if (c->null_count == 0 || c->buffers[0] == nullptr) return true;
  const int64_t j = c->offset + i;
  return (static_cast<const uint8_t*>(c->buffers[0])[j >> 3] >> (j & 7)) & 1;
}

class ArrowRowsReader final : public TarReader {
 public:
  ArrowRowsReader(std::string url, py::object owner, std::shared_ptr<SourceFile> file,
                  ArrowArrayStream stream, int64_t first, ErrorPolicy policy)
      : url_(RedactUrl(url)), stem_(Stem(url)), owner_(std::move(owner)), file_(std::move(file)),
        stream_(stream), row_(first), policy_(policy) {}

  ~ArrowRowsReader() override {
    py::gil_scoped_acquire gil;
    if (schema_.release != nullptr) schema_.release(&schema_);
    if (stream_.release != nullptr) stream_.release(&stream_);
    owner_ = py::object();
  }

  Status Start() {
    py::gil_scoped_acquire gil;
    if (stream_.get_schema(&stream_, &schema_) != 0) return StreamError("its schema");
    for (int64_t k = 0; k < schema_.n_children; ++k) {
      names_.emplace_back(schema_.children[k]->name);
      formats_.emplace_back(schema_.children[k]->format);
    }
    return Status::OK();
  }

  Result<bool> Next(Sample* s) override {
    if (!error_.ok()) return error_;
    while (batch_ == nullptr || at_ >= batch_->array.length) {
      if (done_) return false;
      auto batch = std::make_shared<Batch>();
      {
        py::gil_scoped_acquire gil;
        if (stream_.get_next(&stream_, &batch->array) != 0) {
          Status st = file_->last_error().ok() ? StreamError("a row group") : file_->last_error();
          done_ = true;
          // Only the file's own defects are skipped (as TarReader does).
          if (policy_ != ErrorPolicy::kRaise &&
              (st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kChecksum)) {
            ++stats_.skipped_shards;
            stats_.last_error = st;
            return false;
          }
          return error_ = st;
        }
      }
      if (batch->array.release == nullptr) {
        done_ = true;
        return false;
      }
      if (batch->array.n_children != static_cast<int64_t>(names_.size()))
        return error_ = Status(StatusCode::kCorrupt, "Parquet file " + url_ + ": a batch of " +
                                                         std::to_string(batch->array.n_children) +
                                                         " columns, its schema has " +
                                                         std::to_string(names_.size()), url_);
      batch_ = std::move(batch);
      at_ = 0;
    }
    Status st = Row(s);
    ++at_;
    ++row_;
    if (!st.ok()) return error_ = st;
    ++stats_.samples;
    stats_.fields += s->fields.size();
    stats_.field_bytes += s->bytes();
    return true;
  }

  const TarStats& stats() const override { return stats_; }
  const SampleIndex& index() const override { return index_; }
  ShardCompression compression() const override { return ShardCompression::kNone; }
  const std::string& url() const override { return url_; }

 private:
  Status StreamError(const std::string& what) {
    const char* e = stream_.get_last_error ? stream_.get_last_error(&stream_) : nullptr;
    return Status(StatusCode::kCorrupt, "Parquet file " + url_ + ": reading " + what + " failed: " +
                                            (e ? e : "(no message)"), url_);
  }

  Status Row(Sample* s) {
    s->fields.clear();
    s->url = url_;
    s->index = row_;
    s->offset = 0;
    char num[32];
    std::snprintf(num, sizeof(num), "%09" PRId64, row_);
    s->key = stem_ + "/" + num;
    // Numbers as text, in one buffer per row (reserved: the views stay put).
    auto text = std::make_shared<std::string>();
    text->reserve(names_.size() * 26);
    const std::shared_ptr<const void> batch = batch_;
    for (size_t k = 0; k < names_.size(); ++k) {
      const ArrowArray* c = batch_->array.children[k];
      const int64_t i = batch_->array.offset + at_;
      if (!ValidAt(c, i)) continue;  // a null: no field
      const int64_t j = c->offset + i;
      const std::string& fmt = formats_[k];
      Field f;
      f.name = names_[k];
      if (fmt == "u" || fmt == "z") {
        const int32_t* off = static_cast<const int32_t*>(c->buffers[1]);
        f.data = std::string_view(static_cast<const char*>(c->buffers[2]) + off[j],
                                  static_cast<size_t>(off[j + 1] - off[j]));
        f.owner = batch;
      } else if (fmt == "U" || fmt == "Z") {
        const int64_t* off = static_cast<const int64_t*>(c->buffers[1]);
        f.data = std::string_view(static_cast<const char*>(c->buffers[2]) + off[j],
                                  static_cast<size_t>(off[j + 1] - off[j]));
        f.owner = batch;
      } else if (fmt == "b") {
        const bool v = (static_cast<const uint8_t*>(c->buffers[1])[j >> 3] >> (j & 7)) & 1;
        f.data = v ? "true" : "false";
      } else {
        char buf[40];
        int n = 0;
        const void* v = c->buffers[1];
        switch (fmt[0]) {
          case 'c': n = std::snprintf(buf, sizeof(buf), "%d", static_cast<const int8_t*>(v)[j]); break;
          case 'C': n = std::snprintf(buf, sizeof(buf), "%u", static_cast<const uint8_t*>(v)[j]); break;
          case 's': n = std::snprintf(buf, sizeof(buf), "%d", static_cast<const int16_t*>(v)[j]); break;
          case 'S': n = std::snprintf(buf, sizeof(buf), "%u", static_cast<const uint16_t*>(v)[j]); break;
          case 'i': n = std::snprintf(buf, sizeof(buf), "%" PRId32, static_cast<const int32_t*>(v)[j]); break;
          case 'I': n = std::snprintf(buf, sizeof(buf), "%" PRIu32, static_cast<const uint32_t*>(v)[j]); break;
          case 'l': n = std::snprintf(buf, sizeof(buf), "%" PRId64, static_cast<const int64_t*>(v)[j]); break;
          case 'L': n = std::snprintf(buf, sizeof(buf), "%" PRIu64, static_cast<const uint64_t*>(v)[j]); break;
          case 'f': n = std::snprintf(buf, sizeof(buf), "%.17g", static_cast<double>(static_cast<const float*>(v)[j])); break;
          case 'g': n = std::snprintf(buf, sizeof(buf), "%.17g", static_cast<const double*>(v)[j]); break;
          default:
            return Status(StatusCode::kConfig, "Parquet file " + url_ + ": column '" + names_[k] +
                                                   "' has Arrow type '" + fmt + "', which is not read",
                          url_);
        }
        if (fmt[0] == 'f' || fmt[0] == 'g') {
          // JSON has no inf or nan; Python's json reads these spellings.
          if (std::strstr(buf, "inf")) n = std::snprintf(buf, sizeof(buf), buf[0] == '-' ? "-Infinity" : "Infinity");
          else if (std::strstr(buf, "nan")) n = std::snprintf(buf, sizeof(buf), "NaN");
          else if (!std::strpbrk(buf, ".e")) n = std::snprintf(buf + n, sizeof(buf) - n, ".0") + n;  // 1.0 stays a float
        }
        const size_t from = text->size();
        text->append(buf, static_cast<size_t>(n));
        f.data = std::string_view(text->data() + from, static_cast<size_t>(n));
        f.owner = text;
      }
      s->fields.push_back(std::move(f));
    }
    return Status::OK();
  }

  std::string url_;
  std::string stem_;
  py::object owner_;  // the pyarrow reader behind the stream
  std::shared_ptr<SourceFile> file_;
  ArrowArrayStream stream_;
  ArrowSchema schema_{};
  std::vector<std::string> names_, formats_;
  std::shared_ptr<Batch> batch_;
  int64_t at_ = 0;   // row in the batch
  int64_t row_ = 0;  // row in the file
  ErrorPolicy policy_;
  bool done_ = false;
  Status error_;
  TarStats stats_;
  SampleIndex index_;
};

}  // namespace

ParquetReaders MakeParquetReaders() {
  ParquetReaders r;
  r.count_rows = [](const std::string& url, Source* source) -> Result<int64_t> {
    py::gil_scoped_acquire gil;
    try {
      auto file = std::make_shared<SourceFile>(url, source);
      return ParquetModule().attr("count_rows")(py::cast(file)).cast<int64_t>();
    } catch (py::error_already_set& e) {
      return StatusFromPython(e, url, "reading its footer");
    } catch (const std::exception& e) {
      return Status(StatusCode::kConfig, "Parquet file " + RedactUrl(url) + ": " + e.what(), RedactUrl(url));
    }
  };
  r.columns = [](const std::string& url, Source* source) -> Result<std::vector<RowColumn>> {
    py::gil_scoped_acquire gil;
    try {
      auto file = std::make_shared<SourceFile>(url, source);
      py::list cols = ParquetModule().attr("columns")(py::cast(file));
      std::vector<RowColumn> out;
      for (py::handle c : cols) {
        auto t = c.cast<py::tuple>();
        const std::string kind = t[1].cast<std::string>();
        RowColumn rc;
        rc.name = t[0].cast<std::string>();
        rc.kind = kind == "string"    ? JsonKind::kString
                  : kind == "integer" ? JsonKind::kInteger
                  : kind == "binary"  ? JsonKind::kBinary
                  : kind == "bool"    ? JsonKind::kBool
                  : kind == "float"   ? JsonKind::kFloat
                                      : JsonKind::kUnsupported;
        if (rc.kind == JsonKind::kUnsupported) rc.type = t[2].cast<std::string>();
        out.push_back(std::move(rc));
      }
      return out;
    } catch (py::error_already_set& e) {
      return StatusFromPython(e, url, "reading its schema");
    } catch (const std::exception& e) {
      return Status(StatusCode::kConfig, "Parquet file " + RedactUrl(url) + ": " + e.what(), RedactUrl(url));
    }
  };
  r.open = [](const std::string& url, Source* source, int64_t first,
              ErrorPolicy policy) -> Result<std::unique_ptr<TarReader>> {
    py::gil_scoped_acquire gil;
    try {
      auto file = std::make_shared<SourceFile>(url, source);
      py::object reader = ParquetModule().attr("open_rows")(py::cast(file), first);
      py::capsule cap = reader.attr("__arrow_c_stream__")();
      auto* src = static_cast<ArrowArrayStream*>(PyCapsule_GetPointer(cap.ptr(), "arrow_array_stream"));
      if (src == nullptr) throw py::error_already_set();
      ArrowArrayStream stream = *src;
      src->release = nullptr;  // moved: the capsule no longer owns it
      auto out = std::make_unique<ArrowRowsReader>(url, reader, file, stream, first, policy);
      {
        py::gil_scoped_release nogil;
        Status st = out->Start();
        if (!st.ok()) return st;
      }
      return std::unique_ptr<TarReader>(std::move(out));
    } catch (py::error_already_set& e) {
      return StatusFromPython(e, url, "opening it at row " + std::to_string(first));
    } catch (const std::exception& e) {
      return Status(StatusCode::kConfig, "Parquet file " + RedactUrl(url) + ": " + e.what(), RedactUrl(url));
    }
  };
  return r;
}

void RegisterParquet(py::module_& m) {
  py::class_<SourceFile, std::shared_ptr<SourceFile>>(m, "SourceFile",
                                                      "A read-only file over shardstream's Source (for pyarrow).")
      .def(py::init([](const std::string& url) { return std::make_shared<SourceFile>(url, nullptr); }),
           py::arg("url"))
      .def("read", &SourceFile::Read, py::arg("n") = -1)
      .def("seek", &SourceFile::Seek, py::arg("offset"), py::arg("whence") = 0)
      .def("tell", &SourceFile::Tell)
      .def("size", &SourceFile::Size)
      .def("seekable", [](const SourceFile&) { return true; })
      .def("readable", [](const SourceFile&) { return true; })
      .def("close", [](SourceFile&) {})
      .def_property_readonly("closed", [](const SourceFile&) { return false; })
      .def_property_readonly("url", &SourceFile::url);
}

}  // namespace shardstream::python
