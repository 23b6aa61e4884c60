// shardstream verify MANIFEST: every shard's size and checksum (and with
// --samples its sample count) against the manifest, in parallel. Exit 1 if
// any shard is bad. An MDS set (its folder or index.json) is checked against
// its index.json: sizes, and with --samples every sample read. JSON Lines
// files (a file, a folder of them) have every row read and parsed, and their
// count checked against an existing row index (<file>.idx).
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "plan/entry_format.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/mds.h"
#include "shardstream/rows.h"
#include "shardstream/shard_index.h"
#include "shardstream/source.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/command.h"
#include "tools/shard_args.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

using internal::EntryFormat;
using internal::FormatOf;

struct VerifyArgs {
  std::string manifest;
  unsigned threads = 0;
  bool samples = false, json = false;
  CacheFlags cache;
};

struct Verdict {
  bool ok = true;
  std::string problem;
};

// Size and checksum of the bytes the cache delivers (it also checks them
// against the manifest itself, failing with kChecksum on a mismatch).
Result<FileDigest> DigestCached(ShardCache& cache, const ShardEntry& e, const std::string& algo) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, cache.Open(ShardRef::FromEntry(e)));
  return DigestStream(*in, algo);
}

// Every sample of a reader that opened; the first error.
Result<int64_t> CountSamples(Result<std::unique_ptr<TarReader>> reader) {
  if (!reader.ok()) return reader.status();
  Sample s;
  int64_t n = 0;
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(bool more, (*reader)->Next(&s));
    if (!more) return n;
    ++n;
  }
}

// A JSON Lines file: every row parsed; its count against its index, if any.
Verdict CheckRows(const ShardEntry& e) {
  auto in = DefaultSource()->OpenInputStream(e.resolved, 0);
  if (!in.ok()) return {false, in.status().ToString()};
  auto counted = CountSamples(OpenJsonlReader(std::move(*in)));
  if (!counted.ok()) return {false, counted.status().ToString()};
  const int64_t n = *counted;
  auto index = ReadSampleIndex(e.resolved);
  if (index.ok() && static_cast<int64_t>(index->samples.size()) != n)
    return {false, std::to_string(n) + " rows != its index " + std::to_string(index->samples.size()) +
                       " (a stale .idx: remove it)"};
  if (!index.ok() && index.status().code() == StatusCode::kCorrupt)
    return {false, index.status().ToString() + " (remove the .idx; the next run builds it again)"};
  return {};
}

Verdict Check(ShardCache* cache, const ShardEntry& e, bool count_samples) {
  const EntryFormat format = FormatOf(e.extra);
  if (format == EntryFormat::kParquet)
    return {false, "a Parquet file: pyarrow reads it (python -c \"import pyarrow.parquet as pq; "
                   "pq.read_table('FILE')\"), this tool does not"};
  if (format == EntryFormat::kJsonl) return CheckRows(e);
  std::string algo = e.checksum.empty() ? "xxh3_128" : e.checksum.substr(0, e.checksum.find(':'));
  auto d = cache != nullptr && cache->options().mode != CacheMode::kOff
               ? DigestCached(*cache, e, algo)
               : DigestFile(*DefaultSource(), e.resolved, algo);
  if (!d.ok()) return {false, d.status().ToString()};
  if (e.size >= 0 && d->size != static_cast<uint64_t>(e.size))
    return {false, "size " + std::to_string(d->size) + " != manifest " + std::to_string(e.size)};
  if (!e.checksum.empty() && d->checksum != e.checksum)
    return {false, "checksum " + d->checksum + " != manifest " + e.checksum};
  if (count_samples && format == EntryFormat::kMds) {
    // An MDS shard: every sample read and split into its columns.
    auto layout = ParseMdsLayout(e.extra.at(kMdsLayoutKey), e.resolved);
    if (!layout.ok()) return {false, layout.status().ToString()};
    auto in = DefaultSource()->OpenInputStream(e.resolved, 0);
    if (!in.ok()) return {false, in.status().ToString()};
    auto counted = CountSamples(OpenMdsReader(std::move(*in), *layout));
    if (!counted.ok()) return {false, counted.status().ToString()};
    const int64_t n = *counted;
    if (e.nsamples >= 0 && n != e.nsamples)
      return {false, std::to_string(n) + " samples != index.json " + std::to_string(e.nsamples)};
  } else if (count_samples) {
    auto index = BuildSampleIndex(e.resolved);  // from the source, not the cache
    if (!index.ok()) return {false, index.status().ToString()};
    if (e.nsamples >= 0 && static_cast<int64_t>(index->samples.size()) != e.nsamples)
      return {false, std::to_string(index->samples.size()) + " samples != manifest " +
                         std::to_string(e.nsamples)};
  }
  return {};
}

int RunVerify(const VerifyArgs& a) {
  std::string manifest = a.manifest;
  // JSON Lines rows (a file or a folder of them): no manifest, every row read.
  std::optional<Manifest> rows;
  if (!IsMdsIndexUrl(manifest)) {
    ResolveOptions ro;
    ro.learn_counts = false;
    auto resolved = ResolveDataset({manifest}, ro);
    if (resolved.ok() && resolved->shards.front().extra.count(kRowsFormatKey)) rows = std::move(*resolved);
  }
  if (!rows && !IsManifestUrl(manifest)) {
    // A folder: the manifest the writers leave in it, an MDS set's
    // index.json, or what to do.
    auto st = DefaultSource()->Stat(manifest);
    if (st.ok() && st->is_dir && DefaultSource()->Stat(JoinUrl(manifest, "index.json")).ok() &&
        !DefaultSource()->Stat(JoinUrl(manifest, "manifest.jsonl")).ok()) {
      manifest = JoinUrl(manifest, "index.json");
    } else if (st.ok() && st->is_dir) {
      const std::string beside = JoinUrl(manifest, "manifest.jsonl");
      if (!DefaultSource()->Stat(beside).ok()) {
        std::cerr << "verify: " << manifest
                  << " is a folder without a manifest.jsonl; verify checks shards against a "
                     "manifest's sizes and checksums: write one with `shardstream manifest "
                  << manifest << " --out " << beside << "`, then verify it\n";
        return 1;
      }
      manifest = beside;
    }
  }
  // An MDS set's index.json gives sizes and counts (no checksums: its
  // optional hashes are not checked).
  auto m = rows ? Result<Manifest>(std::move(*rows))
                : IsMdsIndexUrl(manifest) ? ReadMdsIndex(manifest) : ReadManifest(manifest);
  if (!m.ok()) {
    std::cerr << "verify: " << m.status() << "\n";
    return 1;
  }
  auto cache = MakeCacheOrReport(a.cache, "verify");
  if (cache == nullptr) return 1;
  std::vector<Verdict> verdicts(m->shards.size());
  ParallelFor(m->shards.size(), a.threads,
              [&](size_t i) { verdicts[i] = Check(cache.get(), m->shards[i], a.samples); });
  size_t bad = 0;
  nlohmann::json bad_list = nlohmann::json::array();
  for (size_t i = 0; i < verdicts.size(); ++i) {
    const auto& e = m->shards[i];
    if (verdicts[i].ok) {
      if (!a.json) std::cout << "ok   " << RedactUrl(e.url) << "\n";
      continue;
    }
    ++bad;
    bad_list.push_back({{"url", RedactUrl(e.url)}, {"problem", verdicts[i].problem}});
    if (!a.json) std::cout << "BAD  " << RedactUrl(e.url) << ": " << verdicts[i].problem << "\n";
  }
  if (a.json) {
    nlohmann::json j = {{"manifest", RedactUrl(a.manifest)},
                        {"shards", m->shards.size()},
                        {"bad", bad_list}};
    if (auto stats = CacheStatsJson(cache.get()); !stats.is_null()) j["cache"] = stats;
    std::cout << j.dump() << "\n";
  } else {
    std::cout << m->shards.size() - bad << " of " << m->shards.size() << " shards ok"
              << (bad ? ", " + std::to_string(bad) + " bad" : "") << "\n";
  }
  if (!a.json) {
    std::string summary = CacheSummary(cache.get());
    if (!summary.empty()) std::cerr << summary << "\n";
  }
  return bad ? 1 : 0;
}

}  // namespace

SHARDSTREAM_COMMAND(verify, [](CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  auto* sub = app.add_subcommand(
      "verify", "Check every shard of a manifest: size and checksum (exit 1 if any is bad)");
  sub->add_option("MANIFEST", args->manifest,
                  "manifest.jsonl (or .csv/.json), a folder holding manifest.jsonl, an MDS set "
                  "(index.json), or JSON Lines files (every row read)")->required();
  sub->add_option("--threads", args->threads, "Shards checked at once (0: one per core)");
  sub->add_flag("--samples", args->samples, "Also read each shard and check its sample count");
  sub->add_flag("--json", args->json, "Print the result as JSON");
  AddCacheFlags(sub, &args->cache);
  sub->callback([args] { ExitWith(RunVerify(*args)); });
});

}  // namespace shardstream::tools
