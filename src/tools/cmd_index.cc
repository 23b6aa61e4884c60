// shardstream index SHARD...: writes <shard>.idx, the sample index that lets
// a reader open an uncompressed shard at any sample; for a JSON Lines file
// (.jsonl, .ndjson, compressed or not) its row index, which gives a remote
// file's row count to the plan (exact splits) without reading it.
#include <cctype>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>

#include "shardstream/rows.h"
#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/command.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

struct IndexArgs {
  std::vector<std::string> shards;
  unsigned threads = 0;
  bool json = false;
  bool force = false;
  double progress_s = 5;
};

int RunIndex(const IndexArgs& a) {
  std::mutex mu;
  int rc = 0;
  size_t kept = 0;
  Progress progress("index", a.shards.size(), a.progress_s);
  ParallelFor(a.shards.size(), a.threads, [&](size_t i) {
    const std::string& url = a.shards[i];
    std::string name = UrlBasename(url.substr(0, url.find('?')));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool rows = IsCompressedRowsUrl(url) || (name.size() > 6 && name.compare(name.size() - 6, 6, ".jsonl") == 0) ||
                      (name.size() > 7 && name.compare(name.size() - 7, 7, ".ndjson") == 0);
    // An index already there that describes the shard as it is (its size; ReadSampleIndex
    // refuses a stale one), in the current version (a shard's with its field records), is
    // kept: a rerun after an interruption does only what is left.
    bool up_to_date = false;
    Result<SampleIndex> index = Status::NotFound("");
    if (!a.force) {
      index = ReadSampleIndex(url);
      up_to_date = index.ok() && (rows || index->samples.empty() || index->has_fields());
    }
    if (!up_to_date) index = rows ? BuildJsonlIndex(url) : BuildSampleIndex(url);
    Status st = up_to_date ? Status::OK()
                           : index.ok() ? WriteSampleIndex(*index, url) : index.status();
    progress.Done(index.ok() ? index->shard_size : 0, up_to_date ? 1 : 0);
    std::lock_guard<std::mutex> lock(mu);
    kept += up_to_date ? 1 : 0;
    if (!st.ok()) {
      rc = 1;
      if (a.json) {
        std::cout << nlohmann::json({{"shard", url}, {"error", st.ToString()}}).dump() << "\n";
      } else {
        std::cerr << "index: " << st << "\n";
      }
      return;
    }
    if (a.json) {
      std::cout << nlohmann::json({{"shard", url},
                                   {"index", IndexUrlFor(url)},
                                   {"samples", index->samples.size()},
                                   {"compressed", index->compressed},
                                   {"up_to_date", up_to_date}})
                       .dump()
                << "\n";
    } else {
      std::cout << IndexUrlFor(url) << ": " << index->samples.size() << " samples"
                << (rows ? " (rows)" : "")
                << (index->compressed ? " (compressed: OpenAt reads from the start)" : "")
                << (up_to_date ? " (up to date, kept)" : "") << "\n";
    }
  });
  if (kept > 0 && !a.json)
    std::cerr << "index: " << kept << " of " << a.shards.size()
              << " indexes were up to date and kept (--force rebuilds them)\n";
  return rc;
}

}  // namespace

SHARDSTREAM_COMMAND(index, [](CLI::App& app) {
  auto args = std::make_shared<IndexArgs>();
  auto* sub = app.add_subcommand("index", "Write <shard>.idx sample indexes (random access)");
  sub->add_option("SHARD", args->shards,
                  "Shards or JSON Lines files to index (paths or quoted brace patterns)")->required();
  sub->add_option("--threads", args->threads, "Parallel shards (0: one per core)");
  sub->add_flag("--json", args->json, "One JSON object per shard");
  sub->add_flag("--force", args->force,
                "Rebuild every index, also those that describe their shard as it is");
  sub->add_option("--progress", args->progress_s,
                  "Seconds between progress lines on stderr (0: none)")
      ->capture_default_str();
  sub->callback([args] {
    if (Status st = ExpandBraceArgs(&args->shards); !st.ok()) {
      std::cerr << "index: " << st << "\n";
      ExitWith(2);
      return;
    }
    ExitWith(RunIndex(*args));
  });
});

}  // namespace shardstream::tools
