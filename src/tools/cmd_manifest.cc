// shardstream manifest SHARD... [--out FILE]: a manifest for shards that
// already exist (size, sample count, checksum), computed in parallel,
// resumable after an interruption, with progress on stderr.
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/command.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

struct ManifestArgs {
  std::vector<std::string> shards;
  std::string out;
  unsigned threads = 0;
  double progress_s = 5;
};

// The url as the manifest stores it: relative to the manifest's directory
// when the shard lies below it.
std::string RelativeTo(const std::string& dir, const std::string& url) {
  if (dir.empty() || dir == ".") return url;
  std::string prefix = dir + "/";
  if (url.compare(0, prefix.size(), prefix) == 0) return url.substr(prefix.size());
  return url;
}

// Shards as given; a folder (or a glob, brace pattern) stands for its shards.
Result<std::vector<std::string>> ExpandShards(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  ResolveOptions ro;
  ro.learn_counts = false;  // counted below, from each shard
  for (const std::string& a : args) {
    if (IsShardUrl(a)) {
      out.push_back(a);
      continue;
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ResolveDataset({a}, ro));
    for (const ShardEntry& e : m.shards) out.push_back(e.resolved.empty() ? e.url : e.resolved);
  }
  return out;
}

// What an interrupted run leaves beside --out: "<out>.partial", JSON Lines, a header naming
// the list of shards, then a line per finished shard. A rerun of the same command takes the
// finished shards from it (each whose size is unchanged) and does the rest; the manifest is
// written whole at the end and the journal removed. Local only: lines are appended with stdio
// as shards finish, which a Source's whole-object writes cannot do.
class Journal {
 public:
  // Opens the journal for `shards`, taking what a run over the same list noted into *m and
  // marking those shards in *noted (a shard noted twice: its last line). Whether a noted
  // shard is still as it was is the caller's to check.
  static Result<std::unique_ptr<Journal>> Open(const std::string& path,
                                               const std::vector<std::string>& shards,
                                               Manifest* m, std::vector<bool>* noted) {
    const std::string list = ListDigest(shards);
    std::vector<std::string> latest(shards.size());
    size_t count = 0;
    Result<std::string> read = ReadFileToString(*DefaultSource(), path);
    if (!read.ok() && read.status().code() != StatusCode::kNotFound) return read.status();
    if (read.ok()) {
      const std::string& text = *read;
      size_t pos = 0, line_no = 0;
      while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        if (eol == std::string::npos) break;  // a line cut by the interruption
        std::string line = text.substr(pos, eol - pos);
        pos = eol + 1;
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (line_no++ == 0) {
          if (!SameList(j, shards.size(), list)) {
            std::cerr << "manifest: " << path
                      << " is from a run over other shards, or damaged; starting over\n";
            break;
          }
          continue;
        }
        // A line that is not what Record writes (damaged, edited) is not taken.
        size_t i = 0;
        ShardEntry got;
        if (!ParseNoted(j, &i, &got) || i >= shards.size() || got.url != shards[i]) continue;
        ShardEntry& e = m->shards[i];
        e.size = got.size;
        e.nsamples = got.nsamples;
        e.checksum = got.checksum;
        const bool whole = e.size >= 0 && e.nsamples >= 0 && !e.checksum.empty();
        if (whole && !(*noted)[i]) ++count;
        if (!whole && (*noted)[i]) --count;
        (*noted)[i] = whole;
        latest[i] = whole ? line : "";
      }
    }
    // Rewritten with only the lines taken (a torn last line must not precede new ones), then
    // appended to as shards finish.
    std::string kept = nlohmann::json({{"shardstream_manifest_journal", 1},
                                       {"shards", shards.size()},
                                       {"list", list}})
                           .dump() +
                       "\n";
    for (const std::string& l : latest)
      if (!l.empty()) kept += l + "\n";
    SHARDSTREAM_RETURN_IF_ERROR(WriteFileAtomic(*DefaultSource(), path, kept));
    FILE* out = std::fopen(path.c_str(), "a");
    if (!out) return Status::FromErrno(errno, "appending to " + path);
    auto j = std::unique_ptr<Journal>(new Journal(path, out));
    j->noted_ = count;
    return j;
  }
  ~Journal() {
    if (out_) std::fclose(out_);
  }
  size_t noted() const { return noted_; }

  void Record(size_t i, const std::string& url, const ShardEntry& e) {
    std::string line = nlohmann::json({{"i", i},
                                       {"url", url},
                                       {"size", e.size},
                                       {"nsamples", e.nsamples},
                                       {"checksum", e.checksum}})
                           .dump();
    std::lock_guard<std::mutex> lock(mu_);
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);  // on disk as far as an interruption of this process goes
  }
  void Remove() {
    std::fclose(out_);
    out_ = nullptr;
    std::remove(path_.c_str());
  }

 private:
  Journal(std::string path, FILE* out) : path_(std::move(path)), out_(out) {}
  static bool SameList(const nlohmann::json& j, size_t n, const std::string& list) {
    const auto version = j.find("shardstream_manifest_journal");
    const auto count = j.find("shards");
    const auto digest = j.find("list");
    return j.is_object() && version != j.end() && *version == 1 && count != j.end() &&
           count->is_number_unsigned() && count->get<size_t>() == n && digest != j.end() &&
           digest->is_string() && digest->get<std::string>() == list;
  }
  // A shard's line: {"i", "url", "size", "nsamples", "checksum"} of the right types.
  static bool ParseNoted(const nlohmann::json& j, size_t* i, ShardEntry* e) {
    if (!j.is_object()) return false;
    const auto at = [&](const char* k) { return j.find(k); };
    const auto ji = at("i"), url = at("url"), size = at("size"), n = at("nsamples"),
               sum = at("checksum");
    if (ji == j.end() || !ji->is_number_unsigned() || url == j.end() || !url->is_string() ||
        size == j.end() || !size->is_number_integer() || n == j.end() ||
        !n->is_number_integer() || sum == j.end() || !sum->is_string())
      return false;
    *i = ji->get<size_t>();
    e->url = url->get<std::string>();
    e->size = size->get<int64_t>();
    e->nsamples = n->get<int64_t>();
    e->checksum = sum->get<std::string>();
    return true;
  }
  static std::string ListDigest(const std::vector<std::string>& shards) {
    auto h = Hasher::Create("xxh3_128");
    for (const std::string& s : shards) (*h)->Update(s.data(), s.size() + 1);  // with the NUL
    return (*h)->Finish();
  }
  std::string path_;
  FILE* out_;
  std::mutex mu_;
  size_t noted_ = 0;
};

int RunManifest(const ManifestArgs& args) {
  auto shards = ExpandShards(args.shards);
  if (!shards.ok()) {
    std::cerr << "manifest: " << shards.status() << "\n";
    return 1;
  }
  ManifestArgs a = args;
  a.shards = std::move(*shards);
  Manifest m;
  m.shards.resize(a.shards.size());
  std::vector<bool> noted(a.shards.size(), false);
  std::string dir = a.out.empty() ? "" : UrlDirname(a.out);
  for (size_t i = 0; i < a.shards.size(); ++i) {
    m.shards[i].url = RelativeTo(dir, a.shards[i]);
    m.shards[i].resolved = a.shards[i];
  }
  // A journal where the manifest is a local file (stdout and remote outputs have none).
  std::unique_ptr<Journal> journal;
  if (!a.out.empty() && !LocalPath(a.out).empty()) {
    auto j = Journal::Open(LocalPath(a.out) + ".partial", a.shards, &m, &noted);
    if (!j.ok()) {
      std::cerr << "manifest: " << j.status() << "\n";
      return 1;
    }
    journal = std::move(*j);
    if (journal->noted() > 0)
      std::cerr << "manifest: resuming: " << journal->noted() << " of " << a.shards.size()
                << " shards done by an earlier run (" << LocalPath(a.out) << ".partial)\n";
  }
  std::vector<Status> errors(a.shards.size());
  std::atomic<size_t> changed{0};
  Progress progress("manifest", a.shards.size(), a.progress_s);
  ParallelFor(a.shards.size(), a.threads, [&](size_t i) {
    const std::string& url = a.shards[i];
    ShardEntry& e = m.shards[i];
    if (noted[i]) {
      // Taken if the shard still has the size noted; otherwise (rewritten since, or gone)
      // done again. Checked here, in parallel: a Stat is a request on a remote store.
      auto info = DefaultSource()->Stat(url);
      if (info.ok() && static_cast<int64_t>(info->size) == e.size) {
        progress.Done(static_cast<uint64_t>(e.size), 1);
        return;
      }
      changed.fetch_add(1);
    }
    auto d = DigestFile(*DefaultSource(), url);
    if (!d.ok()) {
      errors[i] = d.status();
      progress.Done(0);
      return;
    }
    e.size = static_cast<int64_t>(d->size);
    e.checksum = d->checksum;
    auto index = BuildSampleIndex(url);
    if (!index.ok()) {
      errors[i] = index.status();
      progress.Done(d->size);
      return;
    }
    e.nsamples = static_cast<int64_t>(index->samples.size());
    if (journal) journal->Record(i, url, e);
    progress.Done(d->size);
  });
  if (changed.load() > 0)
    std::cerr << "manifest: " << changed.load()
              << " of the shards done earlier changed in size since (or are gone): read again\n";
  size_t failed = 0;
  for (const Status& st : errors) {
    if (!st.ok()) {
      std::cerr << "manifest: " << st << "\n";
      ++failed;
    }
  }
  if (failed > 0) {
    if (journal)
      std::cerr << "manifest: " << failed << " of " << a.shards.size()
                << " shards failed; the others are kept in " << LocalPath(a.out)
                << ".partial, and the same command again does only what is left\n";
    return 1;
  }
  if (a.out.empty()) {
    std::cout << FormatManifestJsonl(m);
    return 0;
  }
  if (Status st = WriteManifest(m, a.out); !st.ok()) {
    std::cerr << "manifest: " << st << "\n";
    return 1;
  }
  if (journal) journal->Remove();
  int64_t total = 0;
  for (const auto& e : m.shards) total += e.nsamples;
  std::cout << "wrote " << a.out << " (" << m.shards.size() << " shards, " << total
            << " samples)\n";
  return 0;
}

}  // namespace

SHARDSTREAM_COMMAND(manifest, [](CLI::App& app) {
  auto args = std::make_shared<ManifestArgs>();
  auto* sub = app.add_subcommand(
      "manifest", "Write a manifest (url, size, nsamples, checksum) for existing shards");
  sub->add_option("SHARD", args->shards, "Shards, in data set order (a folder, glob or brace pattern stands for its shards)")->required();
  sub->add_option("--out", args->out,
                  "Manifest file to write (JSON Lines; urls relative to it); default stdout");
  sub->add_option("--threads", args->threads, "Shards read at once (0: one per core)");
  sub->add_option("--progress", args->progress_s,
                  "Seconds between progress lines on stderr (0: none)")
      ->capture_default_str();
  sub->footer(
      "With --out FILE, finished shards are noted in FILE.partial as they finish: after an "
      "interruption or a failed shard, the same command again reads only the shards not done "
      "(or changed in size since).");
  sub->callback([args] {
    if (Status st = ExpandBraceArgs(&args->shards); !st.ok()) {
      std::cerr << "manifest: " << st << "\n";
      ExitWith(2);
      return;
    }
    ExitWith(RunManifest(*args));
  });
});

}  // namespace shardstream::tools
