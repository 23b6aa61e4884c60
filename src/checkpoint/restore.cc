// Restore: the newest intact local checkpoint, else the newest committed one
// on the remote, downloaded and committed locally with the writer's protocol.
#include <algorithm>

#include "checkpoint/internal.h"
#include "common/log.h"
#include "shardstream/checkpoint.h"
#include "shardstream/checksum.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"

namespace shardstream {
namespace {

// Copies remote file `from` to local `to`, checking size and checksum.
Status Download(Source& remote, const std::string& from, Source& local, const std::string& to,
                const CheckpointFile& f) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, remote.OpenInputStream(from, 0));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto out, local.NewWritableFile(to));
  SHARDSTREAM_ASSIGN_OR_RETURN(auto hasher, Hasher::Create(internal::kChecksumAlgorithm));
  std::string buf(4 << 20, '\0');
  uint64_t total = 0;
  Status s;
  while (s.ok()) {
    auto got = in->Read(buf.size(), buf.data());
    if (!got.ok()) { s = got.status(); break; }
    if (*got == 0) break;
    hasher->Update(buf.data(), *got);
    s = out->Append(std::string_view(buf.data(), *got));
    total += *got;
  }
  if (s.ok()) {
    std::string sum = hasher->Finish();
    if (total != f.size)
      s = Status(StatusCode::kChecksum,
                 RedactUrl(from) + ": downloaded " + std::to_string(total) +
                     " bytes, the manifest says " + std::to_string(f.size),
                 RedactUrl(from), static_cast<int64_t>(std::min(total, f.size)));
    else if (sum != f.checksum)
      s = Status(StatusCode::kChecksum,
                 RedactUrl(from) + ": downloaded bytes have checksum " + sum +
                     ", the manifest says " + f.checksum,
                 RedactUrl(from), 0);
  }
  if (s.ok()) s = out->Sync();
  if (s.ok()) s = out->Close();
  if (!s.ok()) (void)out->Abort();
  return s;
}

}  // namespace

Result<RestoreResult> CheckpointWriter::RestoreLatest(const RestoreOptions& o) {
  RestoreResult r;
  auto skip = [&](const std::string& name, const Status& why) {
    internal::Log().warn("restore: skipping checkpoint {}: {}", name, why.ToString());
    r.skipped.push_back(name + ": " + why.ToString());
  };
  auto try_local = [&]() -> bool {
    auto newest = FindNewestIntact(*source_, dir_, o.verify);
    if (!newest.ok()) {
      skip(RedactUrl(dir_), newest.status());
      return false;
    }
    for (const std::string& why : newest->skipped) {
      internal::Log().warn("restore: skipping checkpoint {}", why);
      r.skipped.push_back(why);
    }
    if (newest->url.empty()) return false;
    r.manifest = std::move(newest->manifest);
    r.url = std::move(newest->url);
    return true;
  };
  auto try_remote = [&]() -> bool {
    std::shared_ptr<Source> rs = o.remote_source ? o.remote_source : DefaultSource();
    std::vector<std::string> uncommitted;
    auto committed = ListRemoteCheckpoints(*rs, o.remote, &uncommitted);
    if (!committed.ok()) {
      skip(RedactUrl(o.remote), committed.status());
      return false;
    }
    // Newer than every committed one: an upload that never finished.
    const int64_t newest = committed->empty() ? -1 : committed->back().step;
    for (const auto& n : uncommitted) {
      auto step = ParseCheckpointName(n);
      if (step && *step > newest)
        skip("remote " + n, Status(StatusCode::kNotFound,
                                   "no commit marker on " + RedactUrl(JoinUrl(o.remote, n)) +
                                       " (its upload did not finish)"));
    }
    for (auto it = committed->rbegin(); it != committed->rend(); ++it) {
      const CheckpointManifest& m = *it;
      auto tmp = NewTempDir("restore-" + m.name);
      if (!tmp.ok()) {
        skip("remote " + m.name, tmp.status());
        return false;
      }
      std::string rdir = JoinUrl(o.remote, m.name);
      Status s;
      for (const auto& f : m.files) {
        s = Download(*rs, JoinUrl(rdir, f.name), *source_, JoinUrl(*tmp, f.name), f);
        if (!s.ok()) break;
      }
      if (s.ok()) {
        s = WriteFileAtomic(*source_, JoinUrl(*tmp, internal::kManifestName),
                            FormatCheckpointManifest(m));
      }
      if (!s.ok()) {
        (void)RemoveTree(*tmp);
        skip("remote " + m.name, s);
        continue;
      }
      auto committed_local = CommitDirectory(*tmp, m);
      if (!committed_local.ok()) {
        skip("remote " + m.name, committed_local.status());
        continue;
      }
      r.manifest = m;
      r.url = JoinUrl(dir_, m.name);
      r.from_remote = true;
      return true;
    }
    return false;
  };

  bool found = false;
  if (!o.prefer_remote) found = try_local();
  if (!found && !o.remote.empty()) found = try_remote();
  if (!found && o.prefer_remote) found = try_local();
  if (found) return r;
  std::string msg = "no intact checkpoint in " + RedactUrl(dir_);
  if (!o.remote.empty()) msg += " or committed on " + RedactUrl(o.remote);
  for (const auto& s : r.skipped) msg += "; skipped " + s;
  return Status(StatusCode::kNotFound, msg, RedactUrl(dir_));
}

}  // namespace shardstream
