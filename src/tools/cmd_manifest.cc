// shardstream manifest SHARD... [--out FILE]: a manifest for shards that
// already exist (size, sample count, checksum), computed in parallel.
#include <iostream>
#include <memory>

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
  std::vector<Status> errors(a.shards.size());
  std::string dir = a.out.empty() ? "" : UrlDirname(a.out);
  ParallelFor(a.shards.size(), a.threads, [&](size_t i) {
    const std::string& url = a.shards[i];
    ShardEntry& e = m.shards[i];
    e.url = RelativeTo(dir, url);
    e.resolved = url;
    auto d = DigestFile(*DefaultSource(), url);
    if (!d.ok()) {
      errors[i] = d.status();
      return;
    }
    e.size = static_cast<int64_t>(d->size);
    e.checksum = d->checksum;
    auto index = BuildSampleIndex(url);
    if (!index.ok()) {
      errors[i] = index.status();
      return;
    }
    e.nsamples = static_cast<int64_t>(index->samples.size());
  });
  for (const Status& st : errors) {
    if (!st.ok()) {
      std::cerr << "manifest: " << st << "\n";
      return 1;
    }
  }
  if (a.out.empty()) {
    std::cout << FormatManifestJsonl(m);
    return 0;
  }
  if (Status st = WriteManifest(m, a.out); !st.ok()) {
    std::cerr << "manifest: " << st << "\n";
    return 1;
  }
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
