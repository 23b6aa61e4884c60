// CheckpointWriter and CheckpointSave: the durable publish protocol
// (tmp dir -> fsync files -> fsync dir -> rename -> fsync parent -> latest),
// rotation, and the directory lock.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <random>
#include <set>
#include <sstream>

#include "checkpoint/internal.h"
#include "common/log.h"
#include "shardstream/checkpoint.h"
#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream {

namespace internal {
int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace internal

namespace {

Status RemoveTreeIn(Source& source, const std::string& url) {
  auto entries = source.List(url);
  if (!entries.ok()) return entries.status().code() == StatusCode::kNotFound ? Status::OK()
                                                                           : entries.status();
  for (const auto& e : *entries)
    SHARDSTREAM_RETURN_IF_ERROR(e.is_dir ? RemoveTreeIn(source, e.url) : source.Remove(e.url));
  return source.RemoveDir(url);
}

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::ostringstream s;
  s << std::hex << (rng() & 0xffffffffffull);
  return s.str();
}

// Processes hold non-local directories (mem://) through this set; local ones
// through flock, which also excludes other processes.
std::mutex g_locked_mu;
std::set<std::string>& LockedUrls() {
  static auto* s = new std::set<std::string>();
  return *s;
}

}  // namespace

// The writer lock. The only file-system access outside the Source: Source
// has no locking call, and flock is what excludes a second process.
struct CheckpointWriter::Lock {
  int fd = -1;
  std::string key;
  ~Lock() {
    if (fd >= 0) ::close(fd);  // releases the flock
    if (!key.empty()) {
      std::lock_guard<std::mutex> l(g_locked_mu);
      LockedUrls().erase(key);
    }
  }
};

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Open(const std::string& dir,
                                                                 CheckpointWriterOptions options) {
  if (!options.source) options.source = DefaultSource();
  if (options.keep_last < 0 || options.keep_every_steps < 0)
    return Status::Config("checkpoint rotation: keep_last and keep_every_steps must be >= 0");
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  bool existed = options.source->Stat(d).ok();
  SHARDSTREAM_RETURN_IF_ERROR(options.source->CreateDir(d).WithContext("checkpoint directory"));
  // A directory made here must survive a power loss with its first save.
  if (!existed)
    SHARDSTREAM_RETURN_IF_ERROR(options.source->SyncDir(UrlDirname(d)).WithContext(
        "checkpoint directory " + RedactUrl(d)));
  auto lock = std::make_unique<Lock>();
  std::string path = LocalPath(d);
  auto busy = [&] {
    return Status(StatusCode::kUnavailable,
                  "checkpoint directory " + RedactUrl(d) + " is in use by another writer",
                  RedactUrl(d));
  };
  if (!path.empty()) {
    std::string lock_path = path + "/" + internal::kLockName;
    lock->fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock->fd < 0) return Status::FromErrno(errno, "open lock file " + lock_path);
    if (::flock(lock->fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno == EWOULDBLOCK) return busy();
      return Status::FromErrno(errno, "flock " + lock_path);
    }
  } else {
    std::lock_guard<std::mutex> l(g_locked_mu);
    if (!LockedUrls().insert(d).second) return busy();
    lock->key = d;
  }
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(d, std::move(options), std::move(lock)));
  // Leftovers of an interrupted save or rotation are ours to remove now that
  // we hold the lock.
  SHARDSTREAM_ASSIGN_OR_RETURN(auto entries, w->source_->List(d));
  for (const auto& e : entries) {
    std::string base = UrlBasename(e.url);
    if (base.rfind(internal::kTempPrefix, 0) == 0 || base.rfind(internal::kTrashPrefix, 0) == 0 ||
        base == std::string(".") + internal::kLatestName + ".tmp") {
      Status s = e.is_dir ? w->RemoveTree(e.url) : w->source_->Remove(e.url);
      if (!s.ok()) internal::Log().warn("cannot remove leftover {}: {}", RedactUrl(e.url), s.ToString());
    }
  }
  return w;
}

CheckpointWriter::CheckpointWriter(std::string dir, CheckpointWriterOptions options,
                                   std::unique_ptr<Lock> lock)
    : dir_(std::move(dir)), options_(std::move(options)), source_(options_.source),
      lock_(std::move(lock)) {}

CheckpointWriter::~CheckpointWriter() = default;

void CheckpointWriter::Hook(std::string_view point) {
  if (options_.test_hook) options_.test_hook(point);
}

Status CheckpointWriter::RemoveTree(const std::string& url) { return RemoveTreeIn(*source_, url); }

Result<CheckpointManifest> CheckpointWriter::CommitFiles(const std::string& tmp_url, int64_t step,
                                                         std::vector<CheckpointFile> files,
                                                         const std::string& metadata_json) {
  SHARDSTREAM_ASSIGN_OR_RETURN(
      CheckpointManifest m,
      MakeCheckpointManifest(CheckpointName(step), step, std::move(files), metadata_json));
  SHARDSTREAM_RETURN_IF_ERROR(WriteFileAtomic(*source_, JoinUrl(tmp_url, internal::kManifestName),
                                              FormatCheckpointManifest(m)));
  return CommitDirectory(tmp_url, std::move(m));
}

Result<CheckpointManifest> CommitSingleCheckpoint(Source& source, const std::string& tmp_url,
                                                  const std::string& dest_url,
                                                  std::vector<CheckpointFile> files,
                                                  const std::string& metadata_json) {
  const std::string parent = UrlDirname(dest_url), name = UrlBasename(dest_url);
  if (UrlDirname(tmp_url) != parent)
    return Status::Config("checkpoint: the temporary directory " + RedactUrl(tmp_url) +
                          " is not beside " + RedactUrl(dest_url));
  SHARDSTREAM_ASSIGN_OR_RETURN(CheckpointManifest m,
                               MakeCheckpointManifest(name, 0, std::move(files), metadata_json));
  const std::string context = "committing checkpoint " + RedactUrl(dest_url);
  SHARDSTREAM_RETURN_IF_ERROR(WriteFileAtomic(source, JoinUrl(tmp_url, internal::kManifestName),
                                              FormatCheckpointManifest(m))
                                  .WithContext(context));
  SHARDSTREAM_RETURN_IF_ERROR(source.SyncDir(tmp_url).WithContext(context));
  std::string trash;
  if (source.Stat(dest_url).ok()) {
    // The older checkpoint goes aside first, and only once the new one is in place.
    trash = JoinUrl(parent, internal::kTrashPrefix + name + "-" + RandomSuffix());
    SHARDSTREAM_RETURN_IF_ERROR(source.Rename(dest_url, trash).WithContext(context));
  }
  SHARDSTREAM_RETURN_IF_ERROR(source.Rename(tmp_url, dest_url).WithContext(context));
  SHARDSTREAM_RETURN_IF_ERROR(source.SyncDir(parent).WithContext(context));
  if (!trash.empty()) {
    Status s = RemoveTreeIn(source, trash);
    if (!s.ok()) internal::Log().warn("checkpoint: cannot remove {}: {}", RedactUrl(trash), s.ToString());
  }
  return m;
}

Result<std::string> CheckpointWriter::NewTempDir(const std::string& tag) {
  std::string url = JoinUrl(dir_, internal::kTempPrefix + tag + "-" + RandomSuffix());
  SHARDSTREAM_RETURN_IF_ERROR(source_->CreateDir(url));
  Hook("mkdir");
  return url;
}

Status CheckpointWriter::WriteLatest(const std::string& name) {
  std::string tmp = JoinUrl(dir_, std::string(".") + internal::kLatestName + ".tmp");
  std::string url = JoinUrl(dir_, internal::kLatestName);
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, source_->NewWritableFile(tmp));
  Status s = file->Append(name + "\n");
  if (s.ok()) s = file->Sync();
  if (s.ok()) Hook("latest-sync");
  if (s.ok()) s = file->Close();
  if (s.ok()) s = source_->Rename(tmp, url);
  if (!s.ok()) {
    (void)file->Abort();
    (void)source_->Remove(tmp);
    return s.WithContext("updating " + RedactUrl(url));
  }
  Hook("latest-rename");
  SHARDSTREAM_RETURN_IF_ERROR(source_->SyncDir(dir_).WithContext(
      "latest was replaced but the directory sync failed"));
  Hook("latest-dir-sync");
  return Status::OK();
}

Result<CheckpointManifest> CheckpointWriter::CommitDirectory(const std::string& tmp_url,
                                                             CheckpointManifest manifest) {
  std::string final_url = JoinUrl(dir_, manifest.name);
  Status s = source_->SyncDir(tmp_url);
  if (s.ok()) Hook("dir-sync");
  // A directory under the final name is a broken or older copy of this step
  // (restore skipped it): move it aside so the rename can take its place.
  if (s.ok() && source_->Stat(final_url).ok()) {
    std::string trash = JoinUrl(dir_, internal::kTrashPrefix + manifest.name + "-" + RandomSuffix());
    s = source_->Rename(final_url, trash);
    if (s.ok()) s = source_->SyncDir(dir_);  // as in Rotate
    if (s.ok()) (void)RemoveTree(trash);
  }
  if (s.ok()) s = source_->Rename(tmp_url, final_url);
  if (!s.ok()) {
    (void)RemoveTree(tmp_url);
    return s.WithContext("publishing checkpoint " + manifest.name + " in " + RedactUrl(dir_));
  }
  Hook("rename");
  s = source_->SyncDir(dir_);
  if (!s.ok()) {
    // Not durable: withdraw it rather than leave a checkpoint `latest` will
    // never name.
    std::string trash = JoinUrl(dir_, internal::kTrashPrefix + manifest.name + "-" + RandomSuffix());
    if (source_->Rename(final_url, trash).ok()) (void)RemoveTree(trash);
    return s.WithContext("publishing checkpoint " + manifest.name + " in " + RedactUrl(dir_));
  }
  Hook("parent-sync");
  SHARDSTREAM_RETURN_IF_ERROR(WriteLatest(manifest.name).WithContext(
      "checkpoint " + manifest.name + " is saved but"));
  if (options_.on_commit) options_.on_commit(manifest);
  Hook("rotate");
  Status r = Rotate(manifest.name);
  if (!r.ok()) internal::Log().warn("checkpoint rotation in {}: {}", RedactUrl(dir_), r.ToString());
  return manifest;
}

Status CheckpointWriter::RotateNow() {
  auto latest = ReadLatestPointer(*source_, dir_);
  if (!latest.ok()) {
    // Nothing saved yet: nothing to rotate.
    return latest.status().code() == StatusCode::kNotFound ? Status::OK() : latest.status();
  }
  return Rotate(*latest);
}

Status CheckpointWriter::Rotate(const std::string& keep_name) {
  if (options_.keep_last == 0) return Status::OK();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto entries, source_->List(dir_));
  std::vector<std::pair<int64_t, std::string>> ckpts;
  for (const auto& e : entries) {
    std::string base = UrlBasename(e.url);
    if (auto step = ParseCheckpointName(base); step && e.is_dir) ckpts.emplace_back(*step, base);
  }
  std::sort(ckpts.begin(), ckpts.end());
  auto latest = ReadLatestPointer(*source_, dir_);
  size_t n = ckpts.size();
  std::vector<std::string> trash_urls;
  // Held until the trash is gone: no reader can pin what is being removed.
  std::vector<internal::RemovalHold> holds;
  for (size_t i = 0; i < n; ++i) {
    const auto& [step, name] = ckpts[i];
    bool keep = internal::KeptByPolicy(i, n, step, options_.keep_last, options_.keep_every_steps) ||
                name == keep_name || (latest.ok() && *latest == name) ||
                (options_.in_use && options_.in_use(name));
    if (keep) continue;
    SHARDSTREAM_ASSIGN_OR_RETURN(internal::RemovalHold hold,
                                 internal::HoldForRemoval(JoinUrl(dir_, name)));
    if (hold.pinned) {
      internal::Log().debug("checkpoint rotation keeps {}: a reader holds it", name);
      continue;
    }
    holds.push_back(std::move(hold));
    // Rename first: a checkpoint half deleted must never be visible.
    std::string trash = JoinUrl(dir_, internal::kTrashPrefix + name + "-" + RandomSuffix());
    SHARDSTREAM_RETURN_IF_ERROR(source_->Rename(JoinUrl(dir_, name), trash));
    Hook("rotate-rename");
    trash_urls.push_back(std::move(trash));
  }
  if (trash_urls.empty()) return Status::OK();
  // The renames must be durable before the contents go, or a power loss
  // could bring back the name with files missing.
  SHARDSTREAM_RETURN_IF_ERROR(source_->SyncDir(dir_));
  Hook("rotate-sync");
  for (const auto& t : trash_urls) SHARDSTREAM_RETURN_IF_ERROR(RemoveTree(t));
  return Status::OK();
}

Result<std::unique_ptr<CheckpointSave>> CheckpointWriter::BeginSave(int64_t step,
                                                                    std::string metadata_json) {
  if (step < 0) return Status::Config("checkpoint step must be >= 0");
  if (metadata_json.empty()) metadata_json = "{}";
  auto meta = nlohmann::json::parse(metadata_json, nullptr, false);
  if (meta.is_discarded() || !meta.is_object())
    return Status::Config("checkpoint metadata must be a JSON object");
  {
    std::lock_guard<std::mutex> l(save_mu_);
    if (save_open_) return Status::Config("a checkpoint save is already open in " + RedactUrl(dir_));
    save_open_ = true;
  }
  auto impl = std::make_unique<CheckpointSave::Impl>();
  impl->writer = this;
  impl->manifest.step = step;
  impl->manifest.name = CheckpointName(step);
  impl->manifest.time_unix_ms = internal::NowUnixMs();
  impl->manifest.metadata_json = meta.dump();
  auto tmp = NewTempDir(impl->manifest.name);
  if (!tmp.ok()) {
    std::lock_guard<std::mutex> l(save_mu_);
    save_open_ = false;
    return tmp.status().WithContext("saving checkpoint " + impl->manifest.name);
  }
  impl->tmp_url = *tmp;
  return std::unique_ptr<CheckpointSave>(new CheckpointSave(std::move(impl)));
}

Result<CheckpointManifest> CheckpointWriter::SaveFiles(
    int64_t step, const std::vector<std::pair<std::string, std::string>>& files,
    std::string metadata_json) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto save, BeginSave(step, std::move(metadata_json)));
  for (const auto& [name, data] : files) {
    SHARDSTREAM_RETURN_IF_ERROR(save->OpenFile(name));
    SHARDSTREAM_RETURN_IF_ERROR(save->Append(data));
  }
  return save->Commit();
}

}  // namespace shardstream
