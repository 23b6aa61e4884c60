// `shardstream ckpt ls|verify|pull|push`: inspect, verify, download and upload
// checkpoints written by CheckpointWriter and Uploader.
#include <nlohmann/json.hpp>

#include <iostream>

#include "shardstream/checkpoint.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"
#include "tools/command.h"

namespace shardstream::tools {
namespace {

using json = nlohmann::json;

json ToJson(const CheckpointManifest& m) {
  json files = json::array();
  for (const auto& f : m.files)
    files.push_back({{"name", f.name}, {"size", f.size}, {"checksum", f.checksum}});
  return {{"name", m.name}, {"step", m.step}, {"time_unix_ms", m.time_unix_ms},
          {"bytes", m.total_bytes()}, {"files", files},
          {"metadata", json::parse(m.metadata_json, nullptr, false)}};
}

int Fail(const Status& s, bool as_json) {
  if (as_json) std::cout << json{{"error", s.ToString()}, {"kind", StatusCodeName(s.code())}}.dump() << "\n";
  std::cerr << "shardstream ckpt: " << s.ToString() << "\n";
  return 1;
}

struct Args {
  std::string dir, remote, name;
  bool json = false;
  bool is_remote = false;
  uint64_t multipart_threshold = 64ull << 20;
  uint64_t part_size = 16ull << 20;
  int part_threads = 4;
  double abort_stale_after_s = -1;
  int keep_last = 0;
  int64_t keep_every_steps = 0;
};

int Ls(const Args& a) {
  Source& src = *DefaultSource();
  // A single checkpoint (shardstream.dcp.Writer(path)) is listed as itself.
  auto single = a.is_remote ? Result<CheckpointManifest>(Status::NotFound(""))
                            : ReadCheckpointManifest(src, a.dir);
  auto list = single.ok() ? Result<std::vector<CheckpointManifest>>(
                                std::vector<CheckpointManifest>{*single})
              : a.is_remote ? ListRemoteCheckpoints(src, a.dir)
                            : ListCheckpoints(src, a.dir);
  if (!list.ok()) return Fail(list.status(), a.json);
  auto latest = ReadLatestPointer(src, a.dir);
  if (a.json) {
    json out = json::array();
    for (const auto& m : *list) {
      json j = ToJson(m);
      j["latest"] = latest.ok() && *latest == m.name;
      out.push_back(j);
    }
    std::cout << out.dump(1) << "\n";
    return 0;
  }
  for (const auto& m : *list)
    std::cout << m.name << "  step " << m.step << "  " << m.files.size() << " files  "
              << m.total_bytes() << " bytes" << (latest.ok() && *latest == m.name ? "  (latest)" : "")
              << "\n";
  if (list->empty()) std::cout << "no " << (a.is_remote ? "committed " : "") << "checkpoints in "
                               << RedactUrl(a.dir) << "\n";
  return 0;
}

int Verify(const Args& a) {
  Source& src = *DefaultSource();
  std::vector<std::string> names;
  const bool single = !a.is_remote && a.name.empty() &&
                      src.Stat(JoinUrl(a.dir, "manifest.json")).ok();
  if (!a.name.empty()) {
    names.push_back(a.name);
  } else if (single) {
    names.push_back("");  // DIR is one checkpoint (shardstream.dcp.Writer(path))
  } else {
    auto entries = src.List(a.dir);
    if (!entries.ok()) return Fail(entries.status(), a.json);
    for (const auto& e : *entries)
      if (ParseCheckpointName(UrlBasename(e.url))) names.push_back(UrlBasename(e.url));
  }
  json out = json::array();
  int bad = 0;
  for (const auto& n : names) {
    std::string url = n.empty() ? a.dir : JoinUrl(a.dir, n);
    Status s;
    if (a.is_remote) {
      auto m = ReadRemoteCommitted(src, a.dir, n);
      s = m.ok() ? VerifyCheckpoint(src, url, *m) : m.status();
    } else {
      s = CheckIntactCheckpoint(src, url, /*verify=*/true).status();  // the readers' rule
    }
    if (!s.ok()) ++bad;
    if (a.json) {
      json j = {{"name", n.empty() ? UrlBasename(a.dir) : n}, {"ok", s.ok()}};
      if (!s.ok()) j["error"] = s.ToString();
      out.push_back(j);
    } else {
      std::cout << (n.empty() ? UrlBasename(a.dir) : n) << ": " << (s.ok() ? "ok" : s.ToString())
                << "\n";
    }
  }
  if (a.json) std::cout << out.dump(1) << "\n";
  if (names.empty()) return Fail(Status::NotFound("no checkpoints in " + RedactUrl(a.dir)), false);
  return bad == 0 ? 0 : 1;
}

int Pull(const Args& a) {
  auto w = CheckpointWriter::Open(a.dir);
  if (!w.ok()) return Fail(w.status(), a.json);
  RestoreOptions o;
  o.remote = a.remote;
  o.prefer_remote = true;
  auto r = (*w)->RestoreLatest(o);
  if (!r.ok()) return Fail(r.status(), a.json);
  if (a.json) {
    json j = ToJson(r->manifest);
    j["url"] = RedactUrl(r->url);
    j["from_remote"] = r->from_remote;
    j["skipped"] = r->skipped;
    std::cout << j.dump(1) << "\n";
  } else {
    std::cout << (r->from_remote ? "pulled " : "already local: ") << r->manifest.name << " ("
              << r->manifest.total_bytes() << " bytes) into " << RedactUrl(r->url) << "\n";
  }
  return 0;
}

int Push(const Args& a) {
  UploaderOptions o;
  o.multipart_threshold = a.multipart_threshold;
  o.part_size = a.part_size;
  o.part_threads = a.part_threads;
  o.keep_last = a.keep_last;
  o.keep_every_steps = a.keep_every_steps;
  if (UrlScheme(a.remote) == "file") o.multipart = NewSourceMultipartSink(DefaultSource(), a.remote);
  auto u = Uploader::Create(a.dir, a.remote, o);
  if (!u.ok()) return Fail(u.status(), a.json);
  if (a.abort_stale_after_s >= 0) {
    auto aborted = (*u)->AbortStaleUploads(static_cast<int64_t>(a.abort_stale_after_s * 1000));
    if (!aborted.ok()) return Fail(aborted.status(), a.json);
    if (!a.json && *aborted > 0)
      std::cerr << "aborted " << *aborted << " stale multipart upload(s)\n";
  }
  std::vector<std::string> names;
  if (!a.name.empty()) {
    names.push_back(a.name);
  } else {
    auto list = ListCheckpoints(*DefaultSource(), a.dir);
    if (!list.ok()) return Fail(list.status(), a.json);
    for (const auto& m : *list) names.push_back(m.name);
  }
  json out = json::array();
  int bad = 0;
  for (const auto& n : names) {
    Status s = (*u)->UploadNow(n);
    auto st = (*u)->StatusOf(n);
    if (!s.ok()) ++bad;
    if (a.json) {
      json j = {{"name", n}, {"state", std::string(UploadStateName(st->state))},
                {"bytes", st->bytes}};
      if (!s.ok()) j["error"] = s.ToString();
      out.push_back(j);
    } else {
      std::cout << n << ": " << (s.ok() ? "uploaded" : s.ToString()) << "\n";
    }
  }
  if (a.json) std::cout << out.dump(1) << "\n";
  return bad == 0 ? 0 : 1;
}

}  // namespace

SHARDSTREAM_COMMAND(ckpt, [](CLI::App& app) {
  auto* ckpt = app.add_subcommand("ckpt", "list, verify, pull and push checkpoints");
  ckpt->require_subcommand(1);
  auto args = std::make_shared<Args>();

  auto* ls = ckpt->add_subcommand("ls", "list checkpoints of a local directory or a remote");
  ls->add_option("dir", args->dir, "checkpoint directory, or remote url with --remote")->required();
  ls->add_flag("--remote", args->is_remote, "list the committed checkpoints of a remote");
  ls->add_flag("--json", args->json, "print JSON");
  ls->callback([args] { ExitWith(Ls(*args)); });

  auto* verify = ckpt->add_subcommand("verify", "check sizes and checksums of every file");
  verify->add_option("dir", args->dir, "checkpoint directory, or remote url with --remote")->required();
  verify->add_option("name", args->name, "one checkpoint (default: all)");
  verify->add_flag("--remote", args->is_remote, "verify committed checkpoints of a remote");
  verify->add_flag("--json", args->json, "print JSON");
  verify->callback([args] { ExitWith(Verify(*args)); });

  auto* pull = ckpt->add_subcommand("pull", "download the newest committed remote checkpoint");
  pull->add_option("remote", args->remote, "remote url")->required();
  pull->add_option("dir", args->dir, "local checkpoint directory")->required();
  pull->add_flag("--json", args->json, "print JSON");
  pull->callback([args] { ExitWith(Pull(*args)); });

  auto* push = ckpt->add_subcommand("push", "upload local checkpoints and commit them remotely");
  push->add_option("dir", args->dir, "local checkpoint directory")->required();
  push->add_option("remote", args->remote, "remote url")->required();
  push->add_option("name", args->name, "one checkpoint (default: all)");
  push->add_option("--multipart-threshold", args->multipart_threshold, "bytes (default 64 MiB)");
  push->add_option("--part-size", args->part_size, "bytes (default 16 MiB)");
  push->add_option("--part-threads", args->part_threads, "parallel parts (default 4)");
  push->add_option("--abort-stale-after", args->abort_stale_after_s,
                   "first abort multipart uploads under the remote older than this many seconds "
                   "(left by a killed uploader)");
  push->add_option("--keep-last", args->keep_last,
                   "after each commit, delete older remote checkpoints beyond the newest N "
                   "(default 0: keep all)");
  push->add_option("--keep-every-steps", args->keep_every_steps,
                   "with --keep-last, also keep steps that are multiples of this");
  push->add_flag("--json", args->json, "print JSON");
  push->callback([args] { ExitWith(Push(*args)); });
});

}  // namespace shardstream::tools
