#include "shardstream/dataset_inputs.h"

#include <glob.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "common/log.h"
#include "manifest/shard_table.h"
#include "plan/entry_format.h"
#include "plan/resolve_shards.h"
#include "shardstream/mds.h"
#include "shardstream/rows.h"
#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tar/index_lookup.h"

namespace shardstream {
namespace {

using internal::EntryFormat;
using internal::FormatOf;

// The manifest the writers (ShardWriter, pack, convert) leave beside their shards.
constexpr const char* kWrittenManifestName = "manifest.jsonl";


Source& SourceOf(const ResolveOptions& o) { return o.source ? *o.source : *DefaultSource(); }

// The manifest url is the shard's name, so a data set's fingerprint (which
// resume states carry) does not depend on where it is mounted.
ShardEntry EntryFor(const std::string& url) {
  ShardEntry e;
  e.url = UrlScheme(url) == "pipe" ? url : UrlBasename(url);
  e.resolved = url;
  return e;
}

ShardEntry RowsEntryFor(const std::string& url) {
  ShardEntry e = EntryFor(url);
  e.extra[kRowsFormatKey] = IsParquetUrl(url) ? kRowsParquet : kRowsJsonl;
  return e;
}

bool IsParquetEntry(const ShardEntry& e) { return FormatOf(e.extra) == EntryFormat::kParquet; }

bool IsRowsEntry(const ShardEntry& e) { return internal::IsRows(FormatOf(e.extra)); }

// A ".jsonl"/".ndjson" input holds rows or names shards (a manifest): its
// first line says which (IsRowsFile).
Result<bool> HoldsRows(const std::string& url, const ResolveOptions& o) {
  if (IsCompressedRowsUrl(url)) return true;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, SourceOf(o).OpenInputStream(url));
  std::string head;
  char buf[16384];
  while (head.size() < (size_t{1} << 20)) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in->Read(sizeof(buf), buf));
    if (n == 0) break;
    head.append(buf, n);
    const size_t first = head.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && head.find('\n', first) != std::string::npos) break;
  }
  const size_t first = head.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return false;  // empty: a manifest's error says so
  const size_t nl = head.find('\n', first);
  return IsRowsFile(url, std::string_view(head).substr(first, nl == std::string::npos ? nl : nl - first));
}

bool IsRowsName(const std::string& url) {
  if (IsCompressedRowsUrl(url)) return true;
  std::string name = UrlBasename(url.substr(0, url.find('?')));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  auto ends = [&](const char* x) {
    const size_t n = std::strlen(x);
    return name.size() > n && name.compare(name.size() - n, n, x) == 0;
  };
  return name != kWrittenManifestName && (ends(".jsonl") || ends(".ndjson"));
}

// Sidecar indexes are looked for only where "<url>.idx" names one: files,
// http(s) and s3 without a query (a pipe: command must not be run again, a
// presigned url would be broken).
bool MayHaveIndex(const std::string& url) {
  const std::string scheme = UrlScheme(url);
  return url.find('?') == std::string::npos &&
         (scheme == "file" || scheme == "http" || scheme == "https" || scheme == "s3");
}

// The shards of a directory (or an object store prefix), in name order.
// A manifest.jsonl beside them (what the writers leave) must list every one:
// shards left from an earlier write would otherwise be read beside the new
// ones, duplicating data without a word. With no shards at the top, that
// manifest names them (in subfolders).
Result<std::vector<ShardEntry>> ListShards(const std::string& dir, const ResolveOptions& o) {
  SHARDSTREAM_ASSIGN_OR_RETURN(std::vector<FileInfo> files, SourceOf(o).List(dir));
  std::vector<ShardEntry> out;
  std::string manifest, mds_index;
  std::vector<ShardEntry> rows;
  for (const FileInfo& f : files) {
    if (!f.is_dir && (IsRowsName(f.url) || IsParquetUrl(f.url))) rows.push_back(RowsEntryFor(f.url));
    if (!f.is_dir && UrlBasename(f.url) == kWrittenManifestName) manifest = f.url;
    if (!f.is_dir && IsMdsIndexUrl(f.url)) mds_index = f.url;
    if (f.is_dir || !IsShardUrl(f.url)) continue;
    // A local shard's size stays unknown (the index gives it): a listed
    // symlink's size is its own, not its target's. An object store's listing
    // gives the object's: its index is then checked against it without a
    // HEAD per shard.
    out.push_back(EntryFor(f.url));
    if (LocalPath(f.url).empty()) out.back().size = static_cast<int64_t>(f.size);
  }
  std::sort(out.begin(), out.end(),
            [](const ShardEntry& a, const ShardEntry& b) { return a.resolved < b.resolved; });
  if (manifest.empty() && out.empty() && mds_index.empty() && !rows.empty()) {
    // A folder of JSON Lines files (and no shards beside them): rows, unless
    // the first says it is a manifest under another name.
    std::sort(rows.begin(), rows.end(),
              [](const ShardEntry& a, const ShardEntry& b) { return a.resolved < b.resolved; });
    bool holds_rows = true;
    for (const ShardEntry& e : rows)
      if (!IsParquetEntry(e)) {
        SHARDSTREAM_ASSIGN_OR_RETURN(holds_rows, HoldsRows(e.resolved, o));
        break;
      }
    if (holds_rows) return rows;
  }
  if (manifest.empty() && out.empty() && !mds_index.empty()) {
    // A MosaicML Streaming (MDS) data set: its index.json says everything.
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadMdsIndex(mds_index, o.source));
    return std::move(m.shards);
  }
  if (!manifest.empty() && out.empty()) {
    // No shards at the top, a manifest that names them: shards in subfolders, as
    // shardstream.ray.ShardSink writes them (part-NNNNN/), read as the manifest says.
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest, o.source));
    return std::move(m.shards);
  }
  if (!manifest.empty() && !out.empty()) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadManifest(manifest, o.source));
    std::unordered_set<std::string> listed;
    for (const ShardEntry& e : m.shards) listed.insert(UrlBasename(e.resolved.empty() ? e.url : e.resolved));
    std::vector<std::string> extra;
    for (const ShardEntry& e : out)
      if (!listed.count(UrlBasename(e.resolved))) extra.push_back(UrlBasename(e.resolved));
    if (!extra.empty()) {
      std::string names;
      for (size_t i = 0; i < extra.size() && i < 3; ++i) names += (i ? ", " : "") + extra[i];
      if (extra.size() > 3) names += ", ...";
      return Status(StatusCode::kConfig,
                    "data set: directory " + RedactUrl(dir) + " holds " + std::to_string(extra.size()) +
                        " shard(s) that its " + kWrittenManifestName + " does not list (" + names +
                        "), left from an earlier write? Read the manifest (" +
                        RedactUrl(manifest) + ") to take only what it lists, or remove them",
                    RedactUrl(dir));
    }
  }
  return out;
}

// One input's shards.
using internal::ShardTable;

void AppendAll(ShardTable* out, const std::vector<ShardEntry>& entries) {
  for (const ShardEntry& e : entries) out->Append(e);
}

// `whole`: set when the input was one manifest file taken whole into an
// empty table (its reader checked it for duplicates).
Status AddInput(const std::string& input, const ResolveOptions& o, ShardTable* out, bool* whole) {
  if (input.empty()) return Status::Config("data set: an input is empty");
  if (IsBracePattern(input)) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ManifestFromPattern(input));
    AppendAll(out, m.shards);
    return Status::OK();
  }
  const std::string local = LocalPath(input);
  if (!local.empty() && local.find_first_of("*?[") != std::string::npos) {
    // A glob, as a shell would expand it (sorted), for local paths.
    glob_t g{};
    const int rc = ::glob(local.c_str(), 0, nullptr, &g);
    std::vector<std::string> matched;
    std::vector<std::string> rows;  // taken when no shard matches, as in a folder
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) {
        if (IsShardUrl(g.gl_pathv[i])) matched.emplace_back(g.gl_pathv[i]);
        if (IsRowsName(g.gl_pathv[i]) || IsParquetUrl(g.gl_pathv[i])) rows.emplace_back(g.gl_pathv[i]);
      }
    ::globfree(&g);
    if (matched.empty() && !rows.empty()) {
      bool holds_rows = true;
      for (const std::string& r : rows)
        if (!IsParquetUrl(r)) {
          SHARDSTREAM_ASSIGN_OR_RETURN(holds_rows, HoldsRows(r, o));
          break;
        }
      if (holds_rows) {
        for (const std::string& m : rows) out->Append(RowsEntryFor(m));
        return Status::OK();
      }
    }
    if (matched.empty())
      return Status(StatusCode::kNotFound,
                    "data set: no shard matches the glob " + input +
                        " (for a pattern of names that need not exist yet, or remote shards, use "
                        "braces: shard-{000000..000099}.tar; or pass a list or the folder)",
                    input);
    for (const std::string& m : matched) out->Append(EntryFor(m));
    return Status::OK();
  }
  const std::string scheme = UrlScheme(input);
  if (local.empty() && input.find('*') != std::string::npos &&
      (scheme == "s3" || scheme == "http" || scheme == "https")) {
    // Remote globs are not expanded: say so rather than "not found".
    return Status(StatusCode::kConfig,
                  "data set: " + RedactUrl(input) +
                      " looks like a glob, which is expanded for local paths only; for remote "
                      "shards use braces (shard-{000000..000099}.tar), a list, a manifest or "
                      "the prefix",
                  RedactUrl(input));
  }
  if (IsMdsIndexUrl(input)) {
    SHARDSTREAM_ASSIGN_OR_RETURN(Manifest m, ReadMdsIndex(input, o.source));
    AppendAll(out, m.shards);
    return Status::OK();
  }
  if (IsManifestUrl(input) && IsRowsName(input)) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool rows, HoldsRows(input, o));
    if (rows) {
      out->Append(RowsEntryFor(input));
      return Status::OK();
    }
  }
  // A ".parquet" may be a folder of part files (Spark writes them so).
  if (IsCompressedRowsUrl(input) ||
      (IsParquetUrl(input) && [&] {
        auto st = SourceOf(o).Stat(input);
        return !(st.ok() && st->is_dir);
      }())) {
    out->Append(RowsEntryFor(input));
    return Status::OK();
  }
  if (IsShardUrl(input) || scheme == "pipe") {
    out->Append(EntryFor(input));
    return Status::OK();
  }
  if ((scheme == "http" || scheme == "https") && input.back() == '/') {
    // A folder over http, which lists nothing: an MDS data set names its
    // shards in its index.json.
    auto mds = ReadMdsIndex(JoinUrl(input, "index.json"), o.source);
    if (mds.ok()) {
      AppendAll(out, mds->shards);
      return Status::OK();
    }
    if (mds.status().code() != StatusCode::kNotFound) return mds.status();
  }
  if (!IsManifestUrl(input)) {
    // A directory (or a prefix of an object store), or a manifest without
    // its usual extension.
    auto st = SourceOf(o).Stat(input);
    if (!st.ok() || st->is_dir) {
      auto listed = ListShards(input, o);
      if (listed.ok() && !listed->empty()) {
        AppendAll(out, *listed);
        return Status::OK();
      }

      // A listing that failed says why (permission, credentials), unless
      // there is simply nothing at that name.
      if (!listed.ok() && (st.ok() || listed.status().code() != StatusCode::kNotFound))
        return listed.status();
      if (st.ok())
        return Status(StatusCode::kNotFound,
                      "data set: no shards (.tar, .tar.zst, .tar.gz, .tgz), MDS index.json, "
                      "JSON Lines files (.jsonl, .jsonl.gz, .jsonl.zst) or Parquet files in directory " +
                          RedactUrl(input),
                      RedactUrl(input));
      return st.status();
    }
  }
  // A manifest file: read into columns, a chunk at a time (a million
  // shards cost tens of MiB, not a ShardEntry each).
  SHARDSTREAM_ASSIGN_OR_RETURN(ShardTable t, internal::ReadManifestTable(input, o.source));
  if (out->empty()) {
    *out = std::move(t);
    *whole = true;
  } else {
    out->AppendTable(t);
  }
  return Status::OK();
}

// Sample counts from sidecar indexes, built for local shards that lack one.
Status LearnCounts(ShardTable* m, const ResolveOptions& o) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < m->size(); ++i)
    if (m->nsamples(i) < 0) todo.push_back(i);
  if (todo.empty()) return Status::OK();
  // What each thread learns, written into the table after the join: a
  // column may change representation when a value is set (IntColumn), so
  // no thread writes it while others read it.
  std::vector<int64_t> learned(todo.size(), -1), sizes(todo.size(), -1);
  std::atomic<size_t> next{0}, built{0}, unknown{0};
  std::mutex mu;
  Status first_error;
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < todo.size();) {
      const size_t at = todo[k];
      const ShardEntry e = (*m)[at];
      const std::string& url = e.resolved.empty() ? e.url : e.resolved;
      if (IsParquetEntry(e)) {
        // Parquet keeps its row count in its footer: no index needed.
        if (o.parquet == nullptr || !*o.parquet) {
          ++unknown;
          continue;
        }
        auto rows = o.parquet->count_rows(url, o.source);
        std::lock_guard<std::mutex> lock(mu);
        if (!rows.ok()) {
          if (first_error.ok()) first_error = rows.status().WithContext("data set: reading the footer of " + RedactUrl(url), RedactUrl(url));
          continue;
        }
        learned[k] = *rows;
        continue;
      }
      if (!MayHaveIndex(url)) {
        ++unknown;
        continue;
      }
      auto found = internal::LoadOrBuildSampleIndex(url, o.source, o.index_dir, o.build_indexes,
                                                    /*need_fields=*/false, IsRowsEntry(e), e.size);
      if (!found.ok() || found->build_failed) {
        // A transient or permission error must fail the loader, not make
        // this rank plan without counts while the others plan with them.
        // A damaged shard stops start-up before any error policy applies:
        // say how to get past it.
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok())
          first_error =
              !found.ok()
                  ? found.status()
                  : found->missing.WithContext(
                        "data set: counting the samples of " + RedactUrl(url) +
                            " (no manifest or .idx gives them) failed; a damaged shard stops "
                            "this before error_policy applies: write a manifest of the good "
                            "shards (shardstream manifest), or pass learn_sample_counts=False "
                            "(LoaderOptions::learn_sample_counts) to read without counts, where "
                            "skip_shard and skip_sample apply",
                        RedactUrl(url));
        continue;
      }
      if (!found->found) {
        ++unknown;
        continue;
      }
      if (found->built) {
        ++built;
        if (!found->kept.ok())
          internal::Log().info("data set: could not keep the index of {} ({}); its sample count "
                               "is learned again next time",
                               RedactUrl(url), found->kept.ToString());
      }
      const SampleIndex* index = &found->index;
      learned[k] = static_cast<int64_t>(index->samples.size());
      if (e.size < 0) sizes[k] = static_cast<int64_t>(index->shard_size);
    }
  };
  const size_t n = std::min<size_t>(todo.size(), static_cast<size_t>(std::max(1, o.threads)));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (size_t k = 0; k < todo.size(); ++k) {
    if (learned[k] >= 0) m->set_nsamples(todo[k], learned[k]);
    if (sizes[k] >= 0) m->set_bytes(todo[k], sizes[k]);
  }
  SHARDSTREAM_RETURN_IF_ERROR(first_error);
  if (built > 0 && o.index_dir.empty())
    // Said at warning level: files appear in the user's data folder.
    internal::Log().warn("data set: counted the samples of {} shards without an index and wrote "
                         "their <shard>.idx sidecars beside them (a manifest avoids this: "
                         "shardstream manifest DIR --out DIR/manifest.jsonl; index_dir= keeps "
                         "them in another folder)",
                         built.load());
  else if (built > 0)
    internal::Log().info("data set: counted the samples of {} shards without an index and kept "
                         "their indexes in {}",
                         built.load(), o.index_dir);
  if (unknown > 0 && o.build_indexes)
    internal::Log().warn("data set: {} shards (remote, pipe: or presigned) have no index, so their sample counts are "
                         "unknown and ranks are balanced by shards, not samples; write a manifest "
                         "(shardstream manifest) or indexes (shardstream index)",
                         unknown.load());
  return Status::OK();
}

}  // namespace

namespace internal {

Result<ShardTable> ResolveShards(const std::vector<std::string>& inputs, const ResolveOptions& o) {
  if (inputs.empty())
    return Status::Config("data set: no input given (a manifest, shard, directory or pattern)");
  ShardTable m;
  bool whole = false;
  for (const std::string& input : inputs) SHARDSTREAM_RETURN_IF_ERROR(AddInput(input, o, &m, &whole));
  m.set_source_url(inputs.size() == 1 ? inputs[0]
                                      : inputs[0] + " (+" + std::to_string(inputs.size() - 1) + ")");
  if (m.empty()) return Status::Config("data set: the inputs name no shards");
  if (auto dup = inputs.size() == 1 && whole ? std::nullopt : m.FirstDuplicate())
    return Status::Config("data set: shard " + RedactUrl(m.resolved(dup->first)) + " is named twice");
  if (o.learn_counts) SHARDSTREAM_RETURN_IF_ERROR(LearnCounts(&m, o));
  m.ShrinkToFit();
  return m;
}

}  // namespace internal

Result<Manifest> ResolveDataset(const std::vector<std::string>& inputs, const ResolveOptions& o) {
  SHARDSTREAM_ASSIGN_OR_RETURN(internal::ShardTable t, internal::ResolveShards(inputs, o));
  return t.ToManifest();
}

}  // namespace shardstream
