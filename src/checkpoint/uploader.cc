// Uploader: one background thread uploads committed checkpoints in step
// order; the COMMIT marker goes up last, after every file is verified.
#include "shardstream/uploader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/internal.h"
#include "common/log.h"
#include "transfer/transfer_engine.h"
#include "shardstream/checksum.h"
#include "shardstream/s3.h"
#include "shardstream/url.h"

namespace shardstream {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string_view UploadStateName(UploadState s) {
  switch (s) {
    case UploadState::kPending: return "pending";
    case UploadState::kUploading: return "uploading";
    case UploadState::kDone: return "done";
    case UploadState::kFailed: return "failed";
  }
  return "?";
}

namespace {

// The parts of one multipart upload in progress.
struct PartsState {
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;   // parts queued or running
  bool stopped = false;  // failed or cancelled: queued parts leave unrun
  uint64_t sent = 0;
  Status error;          // the first part that failed
  std::vector<std::string> etags;
};

// One part as a transfer-engine job. Done when run, or when the engine drops
// it unrun (stopped): either way the destructor counts it out.
class UploadPartJob final : public internal::TransferJob {
 public:
  UploadPartJob(std::shared_ptr<PartsState> state, std::string host, std::function<void()> fn)
      : state_(std::move(state)), host_(std::move(host)), fn_(std::move(fn)) {}
  ~UploadPartJob() override {
    std::lock_guard<std::mutex> l(state_->mu);
    state_->outstanding--;
    state_->cv.notify_all();
  }
  const std::string& host() const override { return host_; }
  int64_t Rank() const override {
    std::lock_guard<std::mutex> l(state_->mu);
    return state_->stopped ? -1 : kUploadRank;
  }
  uint64_t Bytes() const override { return 0; }  // bounded by part_threads instead
  bool Upload() const override { return true; }
  void Run() override {
    {
      std::lock_guard<std::mutex> l(state_->mu);
      if (state_->stopped) return;
    }
    fn_();
  }

 private:
  // After every read-ahead part, before prefetches of shards not yet opened.
  static constexpr int64_t kUploadRank = int64_t{1} << 29;
  std::shared_ptr<PartsState> state_;
  std::string host_;
  std::function<void()> fn_;
};

}  // namespace

// ---- remote reading --------------------------------------------------------

Result<CheckpointManifest> ReadRemoteCommitted(Source& source, const std::string& remote,
                                               const std::string& name) {
  std::string dir = JoinUrl(remote, name);
  std::string curl = JoinUrl(dir, internal::kCommitName);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string marker, ReadFileToString(source, curl));
  json j = json::parse(marker, nullptr, false);
  auto corrupt = [&](const std::string& what) {
    return Status(StatusCode::kCorrupt, "commit marker " + RedactUrl(curl) + ": " + what,
                  RedactUrl(curl));
  };
  if (!j.is_object() || j.value("format", "") != "shardstream-checkpoint-commit" ||
      j.value("name", "") != name || !j.contains("manifest_checksum") ||
      !j["manifest_checksum"].is_string())
    return corrupt("malformed (an interrupted write?)");
  std::string murl = JoinUrl(dir, internal::kManifestName);
  SHARDSTREAM_ASSIGN_OR_RETURN(std::string text, ReadFileToString(source, murl));
  if (ChecksumOf(text) != j["manifest_checksum"].get<std::string>())
    return corrupt("does not match " + std::string(internal::kManifestName));
  SHARDSTREAM_ASSIGN_OR_RETURN(CheckpointManifest m, ParseCheckpointManifest(text, murl));
  if (m.name != name) return corrupt("manifest names " + m.name);
  return m;
}

Result<std::vector<CheckpointManifest>> ListRemoteCheckpoints(Source& source,
                                                              const std::string& remote) {
  return ListRemoteCheckpoints(source, remote, nullptr);
}

Result<std::vector<CheckpointManifest>> ListRemoteCheckpoints(Source& source,
                                                              const std::string& remote,
                                                              std::vector<std::string>* uncommitted) {
  auto listed = source.List(remote);
  // Plain http(s) remotes cannot list (kConfig): only the hint finds them.
  if (!listed.ok() && listed.status().code() != StatusCode::kConfig) return listed.status();
  std::vector<FileInfo> entries = listed.ok() ? std::move(*listed) : std::vector<FileInfo>{};
  // Object stores may list keys below the prefix: take the first component.
  std::string base = remote;
  while (!base.empty() && base.back() == '/') base.pop_back();
  std::set<std::string> names;
  for (const auto& e : entries) {
    std::string rel = e.url.rfind(base + "/", 0) == 0 ? e.url.substr(base.size() + 1)
                                                        : UrlBasename(e.url);
    rel = rel.substr(0, rel.find('/'));
    if (ParseCheckpointName(rel)) names.insert(rel);
  }
  // Stores whose List does not show "directories" still find the newest one
  // through the hint, which counts only with its marker (checked below).
  auto hint = ReadLatestPointer(source, remote);
  if (hint.ok()) names.insert(*hint);
  std::vector<CheckpointManifest> out;
  for (const auto& n : names) {
    auto m = ReadRemoteCommitted(source, remote, n);
    if (m.ok()) {
      out.push_back(std::move(*m));
    } else if (m.status().code() != StatusCode::kNotFound) {
      internal::Log().warn("remote checkpoint {} is not committed: {}", n, m.status().ToString());
    } else if (uncommitted != nullptr) {
      uncommitted->push_back(n);
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

// ---- uploader --------------------------------------------------------------

struct Uploader::Impl {
  std::string local_dir, remote;
  UploaderOptions o;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, UploadStatus> items;          // by name (step order)
  std::map<std::string, Clock::time_point> retry_at;  // failed ones
  std::set<std::string> committed;  // committed on the remote by this uploader
  std::thread thread;
  bool stopping = false;
  std::atomic<bool> cancel{false};

  bool SleepMs(int64_t ms) {  // false when stopping
    std::unique_lock<std::mutex> l(mu);
    return !cv.wait_for(l, std::chrono::milliseconds(ms), [&] { return stopping; });
  }

  template <typename F>
  Status WithRetries(const std::string& what, F&& fn) {
    Status s;
    int64_t backoff = o.retry_initial_ms;
    for (int attempt = 1; attempt <= std::max(1, o.attempts); ++attempt) {
      if (cancel.load()) return Status::Cancelled("upload stopped: " + what);
      s = fn();
      if (s.ok() || s.code() == StatusCode::kConfig || s.code() == StatusCode::kAuth ||
          s.code() == StatusCode::kCancelled)
        return s;
      internal::Log().info("upload of {} failed (try {}): {}", what, attempt, s.ToString());
      if (attempt < o.attempts && !SleepMs(backoff))
        return Status::Cancelled("upload stopped: " + what);
      backoff = std::min<int64_t>(backoff * 2, 5000);
    }
    return s;
  }

  Status StreamFile(const std::string& from, const std::string& to, uint64_t* bytes) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto in, o.local_source->OpenInputStream(from, 0));
    SHARDSTREAM_ASSIGN_OR_RETURN(auto out, o.remote_source->NewWritableFile(to));
    std::string buf(o.chunk_size, '\0');
    Status s;
    while (s.ok()) {
      if (cancel.load()) { s = Status::Cancelled("upload stopped: " + RedactUrl(to)); break; }
      auto got = in->Read(buf.size(), buf.data());
      if (!got.ok()) { s = got.status(); break; }
      if (*got == 0) break;
      s = out->Append(std::string_view(buf.data(), *got));
      if (s.ok()) *bytes += *got;
    }
    if (s.ok()) s = out->Sync();  // file:// remotes: durable before the marker
    if (s.ok()) s = out->Close();
    if (!s.ok()) (void)out->Abort();
    return s;
  }

  // Makes a remote directory's entries durable where the remote has
  // directories; object stores (SyncDir unsupported: kConfig) need nothing.
  Status SyncRemoteDir(const std::string& url) {
    Status s = o.remote_source->SyncDir(url);
    return s.code() == StatusCode::kConfig ? Status::OK() : s;
  }

  // Parts run as upload jobs on the process's transfer engine (after every
  // read, on at most a quarter of its connections), at most part_threads of
  // them queued or running, each reading its bytes when it starts.
  Status MultipartFile(const std::string& from, const std::string& to, uint64_t size,
                       uint64_t* bytes) {
    MultipartSink& sink = *o.multipart;
    SHARDSTREAM_ASSIGN_OR_RETURN(std::shared_ptr<RandomAccessFile> in,
                                 o.local_source->OpenRandomAccess(from));
    SHARDSTREAM_ASSIGN_OR_RETURN(std::string id, sink.Create(to));
    const uint64_t part = std::max<uint64_t>(o.part_size, 1);
    const int nparts = static_cast<int>((size + part - 1) / part);
    auto state = std::make_shared<PartsState>();
    state->etags.resize(static_cast<size_t>(nparts));
    auto run_part = [this, state, in, &sink, &from, &to, &id, part, size](int i) {
      uint64_t off = static_cast<uint64_t>(i) * part;
      size_t n = static_cast<size_t>(std::min(part, size - off));
      std::string buf(n, '\0');
      Status s;
      auto got = in->ReadAt(off, n, buf.data());
      if (!got.ok()) s = got.status();
      else if (*got != n) s = Status(StatusCode::kIo, RedactUrl(from) + " shrank while uploading",
                                     RedactUrl(from), static_cast<int64_t>(off + *got));
      std::string etag;
      if (s.ok())
        s = WithRetries(RedactUrl(to) + " part " + std::to_string(i + 1), [&]() -> Status {
          auto e = sink.UploadPart(to, id, i + 1, buf);
          if (!e.ok()) return e.status();
          etag = *e;
          return Status::OK();
        });
      if (s.ok()) internal::TransferEngine::Get().CountUpload(n);
      std::lock_guard<std::mutex> l(state->mu);
      if (s.ok()) {
        state->etags[static_cast<size_t>(i)] = std::move(etag);
        state->sent += n;
      } else if (state->error.ok()) {
        state->error = s;
      }
    };
    const std::string host = internal::UrlHost(to);
    const int window = std::max(1, o.part_threads);
    int submitted = 0;
    {
      std::unique_lock<std::mutex> l(state->mu);
      while (true) {
        const bool stop = !state->error.ok() || cancel.load();
        if (stop) state->stopped = true;  // queued parts leave unrun
        if ((stop || submitted == nparts) && state->outstanding == 0) break;
        if (!stop && submitted < nparts && state->outstanding < window) {
          state->outstanding++;
          const int i = submitted++;
          l.unlock();
          internal::TransferEngine::Get().Submit(
              std::make_shared<UploadPartJob>(state, host, [run_part, i] { run_part(i); }));
          l.lock();
          continue;
        }
        // Cancel is polled: Stop() does not signal this condition.
        state->cv.wait_for(l, std::chrono::milliseconds(100));
      }
    }
    Status s = state->error;
    if (s.ok() && cancel.load()) s = Status::Cancelled("upload stopped");
    if (s.ok()) s = sink.Complete(to, id, state->etags);
    if (!s.ok()) {
      Status a = sink.Abort(to, id);
      if (!a.ok()) internal::Log().warn("cannot abort multipart upload of {}: {}", RedactUrl(to), a.ToString());
      return s;
    }
    *bytes += state->sent;
    return Status::OK();
  }

  Status UploadFile(const std::string& from, const std::string& to, const CheckpointFile& f,
                    uint64_t* bytes) {
    return WithRetries(RedactUrl(to), [&]() -> Status {
      uint64_t sent = 0;
      Status s = (o.multipart && f.size >= o.multipart_threshold)
                     ? MultipartFile(from, to, f.size, &sent)
                     : StreamFile(from, to, &sent);
      SHARDSTREAM_RETURN_IF_ERROR(s);
      SHARDSTREAM_ASSIGN_OR_RETURN(FileInfo info, o.remote_source->Stat(to));
      if (info.size != f.size)
        return Status(StatusCode::kChecksum,
                      RedactUrl(to) + ": remote size " + std::to_string(info.size) +
                          ", expected " + std::to_string(f.size), RedactUrl(to));
      if (o.verify_readback) SHARDSTREAM_RETURN_IF_ERROR(VerifyCheckpointFile(*o.remote_source, to, f, &cancel));
      *bytes += sent;
      return Status::OK();
    });
  }

  Status PutSmall(const std::string& url, const std::string& data) {
    return WithRetries(RedactUrl(url), [&]() -> Status {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto out, o.remote_source->NewWritableFile(url));
      Status s = out->Append(data);
      if (s.ok()) s = out->Sync();
      if (s.ok()) s = out->Close();
      if (!s.ok()) { (void)out->Abort(); return s; }
      SHARDSTREAM_ASSIGN_OR_RETURN(std::string back, ReadFileToString(*o.remote_source, url));
      if (back != data)
        return Status(StatusCode::kChecksum, RedactUrl(url) + " reads back different bytes",
                      RedactUrl(url));
      return Status::OK();
    });
  }

  // Uploads and commits `name`, then rotates the remote (also when it was
  // already up: its marker is durable either way).
  Status UploadOne(const std::string& name, uint64_t* bytes) {
    SHARDSTREAM_RETURN_IF_ERROR(UploadAndCommit(name, bytes));
    {
      std::lock_guard<std::mutex> l(mu);
      committed.insert(name);
    }
    // The checkpoint is committed whatever rotation does: it only logs.
    Status r = RotateRemote(name);
    if (!r.ok())
      internal::Log().warn("remote checkpoint rotation in {}: {}", RedactUrl(remote), r.ToString());
    return Status::OK();
  }

  Status UploadAndCommit(const std::string& name, uint64_t* bytes) {
    std::string ldir = JoinUrl(local_dir, name);
    std::string rdir = JoinUrl(remote, name);
    SHARDSTREAM_ASSIGN_OR_RETURN(std::string mtext,
                                 ReadFileToString(*o.local_source, JoinUrl(ldir, internal::kManifestName)));
    SHARDSTREAM_ASSIGN_OR_RETURN(CheckpointManifest m,
                                 ParseCheckpointManifest(mtext, JoinUrl(ldir, internal::kManifestName)));
    std::string msum = ChecksumOf(mtext);
    std::string curl = JoinUrl(rdir, internal::kCommitName);
    auto existing = ReadRemoteCommitted(*o.remote_source, remote, name);
    if (existing.ok() && FormatCheckpointManifest(*existing) == FormatCheckpointManifest(m))
      return Status::OK();  // already up (an earlier round or another process)
    // A marker for other content must go before any file is replaced, or the
    // remote would present a mix as complete.
    if (o.remote_source->Stat(curl).ok())
      SHARDSTREAM_RETURN_IF_ERROR(o.remote_source->Remove(curl).WithContext("removing stale marker"));
    (void)o.remote_source->CreateDir(rdir);  // object stores have no directories
    for (const auto& f : m.files)
      SHARDSTREAM_RETURN_IF_ERROR(UploadFile(JoinUrl(ldir, f.name), JoinUrl(rdir, f.name), f, bytes));
    SHARDSTREAM_RETURN_IF_ERROR(PutSmall(JoinUrl(rdir, internal::kManifestName), mtext));
    SHARDSTREAM_RETURN_IF_ERROR(SyncRemoteDir(rdir));
    if (cancel.load()) return Status::Cancelled("upload stopped before the commit marker");
    json marker = {{"format", "shardstream-checkpoint-commit"}, {"name", name}, {"step", m.step},
                   {"manifest_checksum", msum}, {"files", m.files.size()},
                   {"bytes", m.total_bytes()}, {"time_unix_ms", internal::NowUnixMs()}};
    SHARDSTREAM_RETURN_IF_ERROR(PutSmall(curl, marker.dump() + "\n"));
    SHARDSTREAM_RETURN_IF_ERROR(SyncRemoteDir(rdir));
    SHARDSTREAM_RETURN_IF_ERROR(SyncRemoteDir(remote));
    // The hint only moves forward: a retried older checkpoint finishing after
    // a newer one leaves it alone.
    auto hint = ReadLatestPointer(*o.remote_source, remote);
    if (o.write_latest_hint && (!hint.ok() || ParseCheckpointName(*hint) <= m.step)) {
      Status s = PutSmall(JoinUrl(remote, internal::kLatestName), name + "\n");
      if (!s.ok()) internal::Log().warn("remote latest hint not written: {}", s.ToString());
    }
    return Status::OK();
  }

  // Deletes committed remote checkpoints outside the keep policy. Never the
  // one just committed, the newest committed or the one `latest` names.
  Status RotateRemote(const std::string& just_committed) {
    if (o.keep_last <= 0) return Status::OK();
    SHARDSTREAM_ASSIGN_OR_RETURN(std::vector<CheckpointManifest> all,
                                 ListRemoteCheckpoints(*o.remote_source, remote));
    // Remotes that cannot list (http) show only the hint's checkpoint; add
    // the ones this uploader committed (still checked for their marker).
    std::set<std::string> listed;
    for (const auto& m : all) listed.insert(m.name);
    std::set<std::string> mine;
    {
      std::lock_guard<std::mutex> l(mu);
      mine = committed;
    }
    for (const auto& n : mine) {
      if (listed.count(n)) continue;
      auto m = ReadRemoteCommitted(*o.remote_source, remote, n);
      if (m.ok()) all.push_back(std::move(*m));
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
    auto hint = ReadLatestPointer(*o.remote_source, remote);
    const size_t n = all.size();
    Status first;
    for (size_t i = 0; i < n; ++i) {
      const CheckpointManifest& m = all[i];
      bool keep = internal::KeptByPolicy(i, n, m.step, o.keep_last, o.keep_every_steps) ||
                  m.name == just_committed || (hint.ok() && *hint == m.name);
      if (keep) continue;
      if (cancel.load()) break;  // Stop(): the next commit rotates again
      Status s = RemoveRemote(m);
      if (s.ok()) {
        internal::Log().info("rotated remote checkpoint {}", RedactUrl(JoinUrl(remote, m.name)));
        std::lock_guard<std::mutex> l(mu);
        committed.erase(m.name);
      } else if (first.ok()) {
        first = s.WithContext("deleting remote checkpoint " + m.name);
      }
    }
    return first;
  }

  // The marker goes first and durably: from then on the checkpoint is
  // incomplete to every reader, so deleting its files can stop anywhere.
  Status RemoveRemote(const CheckpointManifest& m) {
    Source& rs = *o.remote_source;
    std::string rdir = JoinUrl(remote, m.name);
    auto gone = [](const Status& s) { return s.ok() || s.code() == StatusCode::kNotFound; };
    Status s = rs.Remove(JoinUrl(rdir, internal::kCommitName));
    if (!gone(s)) return s;
    SHARDSTREAM_RETURN_IF_ERROR(SyncRemoteDir(rdir));
    std::set<std::string> urls;
    for (const auto& f : m.files) urls.insert(JoinUrl(rdir, f.name));
    urls.insert(JoinUrl(rdir, internal::kManifestName));
    // Stray files (an earlier round of other content) go too, where listable.
    auto entries = rs.List(rdir);
    if (entries.ok())
      for (const auto& e : *entries)
        if (!e.is_dir) urls.insert(e.url);
    for (const auto& u : urls) {
      s = rs.Remove(u);
      if (!gone(s)) return s;
    }
    // Object stores and http have no directories to remove.
    s = rs.RemoveDir(rdir);
    if (!gone(s) && s.code() != StatusCode::kConfig) return s;
    return SyncRemoteDir(remote);
  }

  // Picks the next checkpoint to upload (lowest step first). Under mu.
  std::string NextLocked() {
    auto now = Clock::now();
    for (auto& [name, st] : items) {
      if (st.state == UploadState::kPending) return name;
      if (st.state == UploadState::kFailed && retry_at[name] <= now) return name;
    }
    return {};
  }

  void Run() {
    std::unique_lock<std::mutex> l(mu);
    while (!stopping) {
      std::string name = NextLocked();
      if (name.empty()) {
        cv.wait_for(l, std::chrono::milliseconds(200));
        continue;
      }
      UploadStatus& st = items[name];
      st.state = UploadState::kUploading;
      st.attempts++;
      st.bytes = 0;
      l.unlock();
      uint64_t bytes = 0;
      Status s = UploadOne(name, &bytes);
      l.lock();
      UploadStatus& done = items[name];
      done.bytes = bytes;
      if (s.ok()) {
        done.state = UploadState::kDone;
        done.error = Status::OK();
      } else if (s.code() == StatusCode::kCancelled && stopping) {
        done.state = UploadState::kPending;
      } else {
        internal::Log().warn("upload of checkpoint {} failed: {}", name, s.ToString());
        done.state = UploadState::kFailed;
        done.error = s.WithContext("upload of checkpoint " + name);
        retry_at[name] = Clock::now() + std::chrono::milliseconds(o.retry_after_ms);
      }
      cv.notify_all();
    }
  }
};

Uploader::Uploader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Uploader::~Uploader() { Stop(); }

Result<std::unique_ptr<Uploader>> Uploader::Create(std::string local_dir, std::string remote,
                                                   UploaderOptions options) {
  if (remote.empty()) return Status::Config("uploader: empty remote url");
  if (!options.local_source) options.local_source = DefaultSource();
  if (!options.remote_source && !options.multipart && UrlScheme(remote) == "s3") {
    // One client from the environment for the streamed and the multipart path.
    SHARDSTREAM_ASSIGN_OR_RETURN(auto client, S3Client::Make());
    options.remote_source = NewS3Source(client);
    options.multipart = NewS3MultipartSink(client);
  }
  if (!options.remote_source) options.remote_source = DefaultSource();
  if (options.chunk_size == 0 || options.part_threads < 1 || options.attempts < 1)
    return Status::Config("uploader: chunk_size, part_threads and attempts must be positive");
  if (options.keep_last < 0 || options.keep_every_steps < 0)
    return Status::Config("uploader: keep_last and keep_every_steps must be >= 0");
  while (remote.size() > 1 && remote.back() == '/') remote.pop_back();
  auto impl = std::make_unique<Impl>();
  impl->local_dir = std::move(local_dir);
  impl->remote = std::move(remote);
  impl->o = std::move(options);
  return std::unique_ptr<Uploader>(new Uploader(std::move(impl)));
}

void Uploader::Enqueue(const std::string& name) {
  std::lock_guard<std::mutex> l(impl_->mu);
  if (impl_->stopping) return;
  auto [it, added] = impl_->items.try_emplace(name);
  if (added) it->second.name = name;
  if (!impl_->thread.joinable()) impl_->thread = std::thread([this] { impl_->Run(); });
  impl_->cv.notify_all();
}

bool Uploader::InUse(const std::string& name) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->items.find(name);
  return it != impl_->items.end() && it->second.state != UploadState::kDone;
}

std::vector<UploadStatus> Uploader::Statuses() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  std::vector<UploadStatus> out;
  for (const auto& [n, st] : impl_->items) out.push_back(st);
  return out;
}

std::optional<UploadStatus> Uploader::StatusOf(const std::string& name) const {
  std::lock_guard<std::mutex> l(impl_->mu);
  auto it = impl_->items.find(name);
  if (it == impl_->items.end()) return std::nullopt;
  return it->second;
}

Status Uploader::Wait(int64_t timeout_ms) {
  std::unique_lock<std::mutex> l(impl_->mu);
  auto settled = [&] {
    for (const auto& [n, st] : impl_->items)
      if (st.state == UploadState::kPending || st.state == UploadState::kUploading) return false;
    return true;
  };
  if (timeout_ms < 0) {
    impl_->cv.wait(l, [&] { return settled() || impl_->stopping; });
  } else if (!impl_->cv.wait_for(l, std::chrono::milliseconds(timeout_ms),
                                 [&] { return settled() || impl_->stopping; })) {
    return Status::Unavailable("checkpoint uploads still running after " +
                               std::to_string(timeout_ms) + " ms");
  }
  for (const auto& [n, st] : impl_->items) {
    if (st.state == UploadState::kFailed) return st.error;
    if (st.state != UploadState::kDone)
      return Status::Cancelled("uploader stopped before checkpoint " + n + " was uploaded");
  }
  return Status::OK();
}

void Uploader::RetryFailed() {
  std::lock_guard<std::mutex> l(impl_->mu);
  for (auto& [n, t] : impl_->retry_at) t = Clock::now();
  impl_->cv.notify_all();
}

void Uploader::Stop() {
  {
    std::lock_guard<std::mutex> l(impl_->mu);
    impl_->stopping = true;
    impl_->cancel.store(true);
    impl_->cv.notify_all();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<int> Uploader::AbortStaleUploads(int64_t max_age_ms) {
  if (!impl_->o.multipart) return 0;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto pending, impl_->o.multipart->ListPending(impl_->remote));
  int n = 0;
  int64_t cutoff = internal::NowUnixMs() - max_age_ms;
  for (const auto& p : pending) {
    if (p.initiated_unix_ms > cutoff) continue;
    SHARDSTREAM_RETURN_IF_ERROR(impl_->o.multipart->Abort(p.url, p.upload_id));
    ++n;
  }
  return n;
}

Status Uploader::UploadNow(const std::string& name) {
  uint64_t bytes = 0;
  Status s = impl_->UploadOne(name, &bytes);
  std::lock_guard<std::mutex> l(impl_->mu);
  UploadStatus& st = impl_->items[name];
  st.name = name;
  st.attempts++;
  st.bytes = bytes;
  st.state = s.ok() ? UploadState::kDone : UploadState::kFailed;
  st.error = s;
  return s;
}

}  // namespace shardstream
