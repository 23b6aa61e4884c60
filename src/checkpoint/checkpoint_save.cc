// CheckpointSave: streams the files of one checkpoint into its temporary
// directory, hashing as it goes, then hands the directory to the writer.
#include "checkpoint/internal.h"
#include "common/log.h"
#include "shardstream/checkpoint.h"
#include "shardstream/url.h"

namespace shardstream {

CheckpointSave::CheckpointSave(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CheckpointSave::~CheckpointSave() { Abort(); }

namespace {
Status Failed(const CheckpointSave::Impl& impl) {
  return Status::Config("checkpoint save of " + impl.manifest.name + " already " +
                        (impl.state == CheckpointSave::Impl::State::kCommitted ? "committed"
                                                                               : "failed"));
}
}  // namespace

Status CheckpointSave::OpenFile(const std::string& name) {
  Impl& s = *impl_;
  if (s.state != Impl::State::kOpen) return Failed(s);
  if (!internal::ValidFileName(name) || s.manifest.Find(name) != nullptr ||
      name == s.file_name)
    return Status::Config("checkpoint file name '" + name +
                          "' is invalid or used twice (no '/', no leading '.', not " +
                          internal::kManifestName + ")");
  SHARDSTREAM_RETURN_IF_ERROR(CloseFile());
  std::string url = JoinUrl(s.tmp_url, name);
  auto file = s.writer->source_->NewWritableFile(url);
  if (!file.ok()) {
    Abort();
    return file.status().WithContext("saving checkpoint " + s.manifest.name);
  }
  auto hasher = Hasher::Create(internal::kChecksumAlgorithm);
  s.file = std::move(*file);
  s.hasher = std::move(*hasher);
  s.file_size = 0;
  s.file_name = name;
  return Status::OK();
}

Status CheckpointSave::Append(std::string_view data) {
  Impl& s = *impl_;
  if (s.state != Impl::State::kOpen) return Failed(s);
  if (!s.file) return Status::Config("CheckpointSave::Append without OpenFile");
  Status st = s.file->Append(data);
  if (!st.ok()) {
    Status out = st.WithContext("saving checkpoint " + s.manifest.name + " file " + s.file_name,
                                RedactUrl(s.file->url()), static_cast<int64_t>(s.file_size));
    Abort();
    return out;
  }
  s.hasher->Update(data);
  s.file_size += data.size();
  return Status::OK();
}

Status CheckpointSave::CloseFile() {
  Impl& s = *impl_;
  if (s.state != Impl::State::kOpen) return Failed(s);
  if (!s.file) return Status::OK();
  Status st = s.file->Sync();
  if (st.ok()) s.writer->Hook("file-sync");
  if (st.ok()) st = s.file->Close();
  if (!st.ok()) {
    Status out = st.WithContext("saving checkpoint " + s.manifest.name + " file " + s.file_name);
    Abort();
    return out;
  }
  s.manifest.files.push_back({s.file_name, s.file_size, s.hasher->Finish()});
  s.file.reset();
  s.file_name.clear();
  return Status::OK();
}

Result<CheckpointManifest> CheckpointSave::Commit() {
  Impl& s = *impl_;
  SHARDSTREAM_RETURN_IF_ERROR(CloseFile());
  CheckpointWriter& w = *s.writer;
  std::string murl = JoinUrl(s.tmp_url, internal::kManifestName);
  auto fail = [&](const Status& st) {
    Abort();
    return st.WithContext("saving checkpoint " + s.manifest.name);
  };
  auto mfile = w.source_->NewWritableFile(murl);
  if (!mfile.ok()) return fail(mfile.status());
  Status st = (*mfile)->Append(FormatCheckpointManifest(s.manifest));
  if (st.ok()) st = (*mfile)->Sync();
  if (st.ok()) w.Hook("manifest-sync");
  if (st.ok()) st = (*mfile)->Close();
  if (!st.ok()) {
    (void)(*mfile)->Abort();
    return fail(st);
  }
  // From here the writer owns the directory (it removes it on failure).
  s.state = Impl::State::kCommitted;
  auto result = w.CommitDirectory(s.tmp_url, s.manifest);
  {
    std::lock_guard<std::mutex> l(w.save_mu_);
    w.save_open_ = false;
  }
  return result;
}

void CheckpointSave::Abort() {
  Impl& s = *impl_;
  if (s.state != Impl::State::kOpen) return;
  s.state = Impl::State::kAborted;
  if (s.file) (void)s.file->Abort();
  s.file.reset();
  Status st = s.writer->RemoveTree(s.tmp_url);
  if (!st.ok())
    internal::Log().warn("cannot remove temporary {}: {}", RedactUrl(s.tmp_url), st.ToString());
  std::lock_guard<std::mutex> l(s.writer->save_mu_);
  s.writer->save_open_ = false;
}

}  // namespace shardstream
