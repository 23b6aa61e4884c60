// _core.CheckpointWriter / CheckpointSave: the C++ checkpoint writer, with
// an optional background Uploader wired in (committed checkpoints are
// queued; rotation keeps what is still uploading). The Python
// CheckpointManager (shardstream/checkpoint.py) streams torch.save into a
// CheckpointSave; every call releases the GIL while it does I/O.
#include "shardstream/checkpoint.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <fcntl.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "common/log.h"
#include "interruptible.h"
#include "shardstream/checksum.h"
#include "shardstream/source.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"
#include "status_to_exception.h"

namespace py = pybind11;

namespace shardstream::python {
namespace {

// (name, size, checksum) tuples from Python.
std::vector<CheckpointFile> FilesOf(const py::list& files) {
  std::vector<CheckpointFile> out;
  for (const py::handle& h : files) {
    auto t = h.cast<py::tuple>();
    out.push_back(CheckpointFile{t[0].cast<std::string>(), t[1].cast<uint64_t>(),
                                 t[2].cast<std::string>()});
  }
  return out;
}

py::dict ManifestToDict(const CheckpointManifest& m) {
  py::dict d;
  d["step"] = m.step;
  d["name"] = m.name;
  d["time_unix_ms"] = m.time_unix_ms;
  py::list files;
  for (const CheckpointFile& f : m.files) {
    py::dict fd;
    fd["name"] = f.name;
    fd["size"] = f.size;
    fd["checksum"] = f.checksum;
    files.append(fd);
  }
  d["files"] = files;
  d["metadata"] = py::module_::import("json").attr("loads")(m.metadata_json);
  d["bytes"] = m.total_bytes();
  return d;
}

// Runs `f` without the GIL and raises its Status.
template <typename F>
auto Unlocked(F f) {
  std::optional<decltype(f())> r;
  {
    py::gil_scoped_release release;
    r.emplace(f());
  }
  return std::move(*r);
}

class PySave {
 public:
  explicit PySave(std::unique_ptr<CheckpointSave> save) : save_(std::move(save)) {}

  void OpenFile(const std::string& name) {
    ThrowIfError(Unlocked([&] { return Live()->OpenFile(name); }));
  }
  // Any object with the buffer protocol (bytes, memoryview, bytearray): read
  // without the GIL while the caller holds a reference to it.
  void Append(const py::buffer& data) {
    py::buffer_info info = data.request();
    std::string_view bytes(static_cast<const char*>(info.ptr),
                           static_cast<size_t>(info.size * info.itemsize));
    ThrowIfError(Unlocked([&] { return Live()->Append(bytes); }));
  }
  py::dict Commit() {
    Result<CheckpointManifest> m = Unlocked([&] { return Live()->Commit(); });
    save_.reset();
    return ManifestToDict(ValueOrThrow(std::move(m)));
  }
  void Abort() {
    if (!save_) return;
    py::gil_scoped_release release;
    save_->Abort();
    save_.reset();
  }

 private:
  CheckpointSave* Live() {
    if (!save_) {
      py::gil_scoped_acquire acquire;
      ThrowStatus(Status(StatusCode::kConfig, "this checkpoint save is finished"));
    }
    return save_.get();
  }
  std::unique_ptr<CheckpointSave> save_;
};

class PyCheckpointWriter {
 public:
  PyCheckpointWriter(const std::string& dir, int keep_last, int64_t keep_every_steps,
                     const std::string& remote, int remote_keep_last,
                     int64_t remote_keep_every_steps, double abort_stale_after_s)
      : remote_(remote) {
    if (!remote.empty()) {
      UploaderOptions uo;
      uo.keep_last = remote_keep_last;
      uo.keep_every_steps = remote_keep_every_steps;
      uploader_ = ValueOrThrow(Unlocked([&] { return Uploader::Create(dir, remote, uo); }));
      // One writer owns a remote: multipart uploads pending under it were
      // left by a process killed mid-upload, and would be billed forever.
      if (abort_stale_after_s >= 0) {
        Result<int> n = Unlocked([&] {
          return uploader_->AbortStaleUploads(static_cast<int64_t>(abort_stale_after_s * 1000));
        });
        if (n.ok()) {
          aborted_stale_ = *n;
          if (*n > 0)
            internal::Log().info("aborted {} stale multipart upload(s) under {}", *n,
                                 RedactUrl(remote));
        } else {
          internal::Log().warn("cannot list stale multipart uploads under {}: {}",
                               RedactUrl(remote), n.status().ToString());
        }
      }
    }
    CheckpointWriterOptions o;
    o.keep_last = keep_last;
    o.keep_every_steps = keep_every_steps;
    if (uploader_) {
      Uploader* up = uploader_.get();
      o.in_use = [up](const std::string& name) { return up->InUse(name); };
      o.on_commit = [up](const CheckpointManifest& m) { up->Enqueue(m.name); };
    }
    writer_ = ValueOrThrow(Unlocked([&] { return CheckpointWriter::Open(dir, std::move(o)); }));
  }

  ~PyCheckpointWriter() {
    py::gil_scoped_release release;
    writer_.reset();
    uploader_.reset();  // stops and joins the upload thread
  }

  PySave BeginSave(int64_t step, const std::string& metadata_json) {
    return PySave(ValueOrThrow(
        Unlocked([&] { return writer_->BeginSave(step, metadata_json); })));
  }

  // The newest intact checkpoint (local first, then the remote), or None.
  py::object RestoreLatest(bool verify) {
    RestoreOptions o;
    o.verify = verify;
    o.remote = remote_;
    Result<RestoreResult> r = Unlocked([&] { return writer_->RestoreLatest(o); });
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) return py::none();
    RestoreResult res = ValueOrThrow(std::move(r));
    py::dict d = ManifestToDict(res.manifest);
    d["url"] = res.url;
    d["from_remote"] = res.from_remote;
    d["skipped"] = res.skipped;
    return d;
  }

  py::list List() {
    std::vector<CheckpointManifest> all = ValueOrThrow(
        Unlocked([&] { return ListCheckpoints(writer_->source(), writer_->dir()); }));
    py::list out;
    for (const CheckpointManifest& m : all) out.append(ManifestToDict(m));
    return out;
  }

  py::list Uploads() const {
    py::list out;
    if (!uploader_) return out;
    for (const UploadStatus& s : uploader_->Statuses()) {
      py::dict d;
      d["name"] = s.name;
      d["state"] = std::string(UploadStateName(s.state));
      d["error"] = s.error.ok() ? py::object(py::none()) : py::object(py::str(s.error.ToString()));
      d["attempts"] = s.attempts;
      d["bytes"] = s.bytes;
      out.append(d);
    }
    return out;
  }

  // Waits for queued uploads in short slices (Ctrl-C stays responsive).
  // timeout_s < 0: no limit. Raises the first failure.
  void WaitUploads(double timeout_s) {
    if (!uploader_) return;
    auto start = std::chrono::steady_clock::now();
    while (true) {
      Status s = Unlocked([&] { return uploader_->Wait(kSignalSlice.count()); });
      if (s.ok()) return;
      // kUnavailable without a failed upload is the slice's timeout.
      if (s.code() != StatusCode::kUnavailable || AnyFailed()) ThrowStatus(s);
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (timeout_s >= 0 && waited > timeout_s) ThrowStatus(s);
    }
  }

  void RetryFailed() {
    if (uploader_) uploader_->RetryFailed();
  }

  // A hidden temporary directory under the writer's directory, removed by
  // the next Open unless committed: where several processes write one
  // checkpoint's files (shardstream.dcp).
  std::string NewTempDir(const std::string& tag) {
    return ValueOrThrow(Unlocked([&] { return writer_->NewTempDir(tag); }));
  }

  // Commits the files already written and fsynced into tmp_url (name, size,
  // checksum each): manifest.json is written and synced, then the directory
  // is published as ckpt-<step> exactly as a save commits (directory syncs,
  // rename, `latest`, upload, rotation).
  py::dict CommitDirectory(const std::string& tmp_url, int64_t step, const py::list& files,
                           const std::string& metadata_json) {
    std::vector<CheckpointFile> fs = FilesOf(files);
    Result<CheckpointManifest> r = Unlocked([&] {
      return writer_->CommitFiles(tmp_url, step, std::move(fs), metadata_json);
    });
    return ManifestToDict(ValueOrThrow(std::move(r)));
  }

  const std::string& Dir() const { return writer_->dir(); }
  int AbortedStale() const { return aborted_stale_; }

 private:
  bool AnyFailed() const {
    for (const UploadStatus& s : uploader_->Statuses())
      if (s.state == UploadState::kFailed) return true;
    return false;
  }

  std::string remote_;
  int aborted_stale_ = 0;
  std::unique_ptr<Uploader> uploader_;  // destroyed after writer_ (declared first)
  std::unique_ptr<CheckpointWriter> writer_;
};

}  // namespace

void RegisterCheckpoint(py::module_& m) {
  // The checkpoint rules shardstream.dcp uses, from the one home in C++.
  m.def("commit_single_checkpoint",
        [](const std::string& tmp_url, const std::string& dest_url, const py::list& files,
           const std::string& metadata_json) {
          std::vector<CheckpointFile> fs = FilesOf(files);
          Result<CheckpointManifest> r = Unlocked([&] {
            return CommitSingleCheckpoint(*DefaultSource(), tmp_url, dest_url, std::move(fs),
                                          metadata_json);
          });
          return ManifestToDict(ValueOrThrow(std::move(r)));
        },
        py::arg("tmp_url"), py::arg("dest_url"), py::arg("files"), py::arg("metadata_json") = "{}");
  m.def("check_checkpoint",
        [](const std::string& url, bool verify, const std::string& required_file) -> py::object {
          Result<CheckpointManifest> r = Unlocked(
              [&] { return CheckIntactCheckpoint(*DefaultSource(), url, verify, required_file); });
          if (r.ok()) return py::none();
          return py::str(r.status().ToString());
        },
        py::arg("url"), py::arg("verify") = true, py::arg("required_file") = "");
  m.def("find_newest_checkpoint",
        [](const std::string& dir, bool verify, const std::string& required_file) {
          Result<NewestCheckpoint> r = Unlocked(
              [&] { return FindNewestIntact(*DefaultSource(), dir, verify, required_file); });
          NewestCheckpoint n = ValueOrThrow(std::move(r));
          py::list skipped;
          for (const std::string& s : n.skipped) skipped.append(s);
          return py::make_tuple(n.url.empty() ? py::object(py::none()) : py::object(py::str(n.url)),
                                skipped);
        },
        py::arg("dir"), py::arg("verify") = true, py::arg("required_file") = "");

  py::class_<PySave>(m, "CheckpointSave", "One checkpoint save in progress (native).")
      .def("open_file", &PySave::OpenFile, py::arg("name"))
      .def("append", &PySave::Append, py::arg("data"))
      .def("commit", &PySave::Commit)
      .def("abort", &PySave::Abort);
  py::class_<PyCheckpointWriter>(m, "CheckpointWriter",
                                 "Native checkpoint writer; use shardstream.CheckpointManager.")
      .def(py::init<const std::string&, int, int64_t, const std::string&, int, int64_t, double>(),
           py::arg("dir"), py::arg("keep_last"), py::arg("keep_every_steps"), py::arg("remote"),
           py::arg("remote_keep_last") = 0, py::arg("remote_keep_every_steps") = 0,
           py::arg("abort_stale_after_s") = 0.0)
      .def("begin_save", &PyCheckpointWriter::BeginSave, py::arg("step"),
           py::arg("metadata_json") = "{}")
      .def("restore_latest", &PyCheckpointWriter::RestoreLatest, py::arg("verify") = true)
      .def("list", &PyCheckpointWriter::List)
      .def("uploads", &PyCheckpointWriter::Uploads)
      .def("wait_uploads", &PyCheckpointWriter::WaitUploads, py::arg("timeout_s") = -1.0)
      .def("retry_failed", &PyCheckpointWriter::RetryFailed)
      .def("new_temp_dir", &PyCheckpointWriter::NewTempDir, py::arg("tag"))
      .def("commit_directory", &PyCheckpointWriter::CommitDirectory, py::arg("tmp_url"),
           py::arg("step"), py::arg("files"), py::arg("metadata_json") = "{}")
      .def_property_readonly("dir", &PyCheckpointWriter::Dir)
      .def_property_readonly("aborted_stale", &PyCheckpointWriter::AbortedStale);

  // Holds a checkpoint directory against rotation while it is read.
  py::class_<CheckpointReadPin>(m, "CheckpointReadPin")
      .def(py::init([](const std::string& url) {
             return ValueOrThrow(Unlocked([&] { return CheckpointReadPin::Acquire(url); }));
           }),
           py::arg("url"))
      .def_property_readonly("held", &CheckpointReadPin::held)
      .def("release", &CheckpointReadPin::Release);

  // Starts the writeback of bytes [offset, offset + n) of an open file
  // (sync_file_range WRITE): a large file's final fsync then waits for the
  // last piece only. Advisory: errors surface at that fsync.
  m.def("start_writeback", [](int fd, int64_t offset, int64_t n) {
    py::gil_scoped_release release;
    (void)::sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE);
  }, py::arg("fd"), py::arg("offset"), py::arg("n"));

  // xxh3_128 of a byte stream, as checkpoint manifests record it.
  py::class_<Hasher>(m, "Hasher")
      .def(py::init([] { return ValueOrThrow(Hasher::Create("xxh3_128")); }))
      .def("update",
           [](Hasher& h, const py::buffer& data) {
             py::buffer_info info = data.request();
             const size_t n = static_cast<size_t>(info.size * info.itemsize);
             py::gil_scoped_release release;
             h.Update(info.ptr, n);
           })
      .def("digest", [](Hasher& h) { return h.Finish(); });
}

}  // namespace shardstream::python
