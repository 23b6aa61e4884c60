// shardstream ls SHARD: the samples of a shard, their fields and sizes.
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "shardstream/tar_reader.h"
#include "tools/command.h"
#include "tools/tar_tool_util.h"
#include "tools/shard_args.h"

namespace shardstream::tools {
namespace {

struct LsArgs {
  std::vector<std::string> shards;
  CacheFlags cache;
  bool json = false;
  bool libarchive = false;
};

int ListShard(ShardCache* cache, const ShardRef& ref, const LsArgs& a) {
  TarReaderOptions o;
  if (a.libarchive) o.engine = TarEngine::kLibarchive;
  auto reader = OpenShardReader(cache, ref, o);
  if (!reader.ok()) {
    std::cerr << "ls: " << reader.status() << "\n";
    return 1;
  }
  Sample s;
  while (true) {
    auto got = (*reader)->Next(&s);
    if (!got.ok()) {
      std::cerr << "ls: " << got.status() << "\n";
      return 1;
    }
    if (!*got) break;
    if (a.json) {
      nlohmann::json fields = nlohmann::json::array();
      for (const Field& f : s.fields) fields.push_back({{"name", f.name}, {"size", f.data.size()}});
      nlohmann::json j = {{"shard", RedactUrl(ref.url)}, {"index", s.index}, {"key", s.key}, {"offset", s.offset},
                          {"fields", fields}};
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else {
      std::cout << s.index << "\t" << s.key << "\t";
      for (size_t i = 0; i < s.fields.size(); ++i)
        std::cout << (i ? " " : "") << s.fields[i].name << ":" << s.fields[i].data.size();
      std::cout << "\n";
    }
  }
  const TarStats& st = (*reader)->stats();
  if (!a.json) {
    std::cerr << st.samples << " samples, " << st.fields << " fields, " << st.field_bytes
              << " bytes; not followed: " << st.directories << " directories, " << st.symlinks
              << " symlinks, " << st.hardlinks << " hard links, " << st.devices
              << " devices, " << st.other_entries << " other; " << st.unkeyed_members
              << " files without a key\n";
  }
  return 0;
}

int RunLs(const LsArgs& a) {
  auto refs = ExpandShardArgs(a.shards);
  if (!refs.ok()) {
    std::cerr << "ls: " << refs.status() << "\n";
    return 1;
  }
  auto cache = MakeCacheOrReport(a.cache, "ls");
  if (cache == nullptr) return 1;
  for (const ShardRef& ref : *refs) {
    if (refs->size() > 1 && !a.json) std::cout << "# " << RedactUrl(ref.url) << "\n";
    if (int rc = ListShard(cache.get(), ref, a)) return rc;
  }
  std::string summary = CacheSummary(cache.get());  // also when --json
  if (!summary.empty()) std::cerr << summary << "\n";
  return 0;
}

}  // namespace

SHARDSTREAM_COMMAND(ls, [](CLI::App& app) {
  auto args = std::make_shared<LsArgs>();
  auto* sub = app.add_subcommand("ls", "List the samples of a shard (key, fields, sizes)");
  sub->add_option("SHARD", args->shards,
                  "Shard urls or paths (.tar, .tar.gz, .tar.zst; http(s)://, s3://), or manifests")
      ->required();
  AddCacheFlags(sub, &args->cache);
  sub->add_flag("--json", args->json, "One JSON object per sample");
  sub->add_flag("--libarchive", args->libarchive, "Read with libarchive instead of the fast parser");
  sub->callback([args] {
    if (Status st = ExpandBraceArgs(&args->shards); !st.ok()) {
      std::cerr << "ls: " << st << "\n";
      ExitWith(2);
      return;
    }
    ExitWith(RunLs(*args));
  });
});

}  // namespace shardstream::tools
