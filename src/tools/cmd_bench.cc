// shardstream bench SHARD...: reads every sample as the loader will (each
// field copied into a destination buffer, as batching does) and, in the same
// run, the plain sequential read of the same files: the limit the reader is
// measured against. For compressed shards also `zstd -d -c` / `gzip -dc`.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/bench_util.h"
#include "tools/command.h"
#include "tools/shard_args.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

struct BenchArgs {
  std::vector<std::string> shards;
  int runs = 5;
  std::string dest_size = "8MiB";
  std::string chunk_size = "512KiB";
  bool libarchive = false, json = false, no_external = false;
  CacheFlags cache;
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

Result<uint64_t> PlainRead(const std::vector<ShardRef>& shards, std::vector<char>& buf) {
  uint64_t total = 0;
  for (const auto& ref : shards) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto in, DefaultSource()->OpenInputStream(ref.url, 0));
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in->Read(buf.size(), buf.data()));
      if (n == 0) break;
      total += n;
    }
  }
  return total;
}

struct ReadTotals {
  uint64_t samples = 0, fields = 0, bytes = 0;
  ShardCompression compression = ShardCompression::kNone;
  double first_sample_s = -1;  // from the start of the run to the first sample
};

Result<ReadTotals> ReaderRead(ShardCache* cache, const std::vector<ShardRef>& shards,
                              const TarReaderOptions& o, std::vector<char>& dest) {
  ReadTotals t;
  size_t pos = 0;
  Sample s;
  auto start = Clock::now();
  for (const auto& ref : shards) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto reader, OpenShardReader(cache, ref, o));
    t.compression = reader->compression();
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(bool got, reader->Next(&s));
      if (!got) break;
      if (t.samples++ == 0) t.first_sample_s = Seconds(start, Clock::now());
      for (const Field& f : s.fields) {
        // The copy batching makes: field bytes into a (reused) batch buffer.
        std::string_view d = f.data;
        while (!d.empty()) {
          if (pos == dest.size()) pos = 0;
          size_t k = std::min(d.size(), dest.size() - pos);
          std::memcpy(dest.data() + pos, d.data(), k);
          pos += k;
          d.remove_prefix(k);
        }
        t.bytes += f.data.size();
        ++t.fields;
      }
    }
  }
  return t;
}

// Wall time of a shell command over the same files, or a negative value.
double TimeCommand(const std::string& cmd) {
  auto t0 = Clock::now();
  int rc = std::system(cmd.c_str());
  auto t1 = Clock::now();
  return rc == 0 ? Seconds(t0, t1) : -1;
}

int RunBench(const BenchArgs& a) {
  auto dest_bytes = ParseByteSize(a.dest_size);
  if (!dest_bytes.ok() || *dest_bytes == 0 || a.runs < 1) {
    std::cerr << "bench: bad --dest-size or --runs\n";
    return 2;
  }
  std::vector<char> buf(size_t{4} << 20);
  std::vector<char> dest(static_cast<size_t>(*dest_bytes));
  std::memset(dest.data(), 1, dest.size());  // fault the pages in before timing
  TarReaderOptions o;
  if (a.libarchive) o.engine = TarEngine::kLibarchive;
  auto chunk = ParseByteSize(a.chunk_size);
  if (!chunk.ok()) {
    std::cerr << "bench: " << chunk.status().message() << "\n";
    return 2;
  }
  o.chunk_size = static_cast<size_t>(*chunk);
  buf.resize(o.chunk_size);  // the plain read uses the reader's read size

  auto refs = ExpandShardArgs(a.shards);
  if (!refs.ok()) {
    std::cerr << "bench: " << refs.status() << "\n";
    return 1;
  }
  auto cache = MakeCacheOrReport(a.cache, "bench");
  if (cache == nullptr) return 1;
  auto warm = PlainRead(*refs, buf);  // page cache warm-up
  if (!warm.ok()) {
    std::cerr << "bench: " << warm.status() << "\n";
    return 1;
  }
  uint64_t file_bytes = *warm;
  std::vector<double> plain, reader, external, first_sample, plain_cpu, reader_cpu, external_cpu;
  ReadTotals totals;
  std::string external_cmd;
  double first_run_s = 0;
  CacheStats after_first;
  for (int r = 0; r < a.runs; ++r) {
    double c0 = CpuSeconds();
    auto t0 = Clock::now();
    auto p = PlainRead(*refs, buf);
    auto t1 = Clock::now();
    double c1 = CpuSeconds();
    auto rr = ReaderRead(cache.get(), *refs, o, dest);
    auto t2 = Clock::now();
    double c2 = CpuSeconds();
    plain_cpu.push_back(c1 - c0);
    reader_cpu.push_back(c2 - c1);
    if (!p.ok() || !rr.ok()) {
      std::cerr << "bench: " << (p.ok() ? rr.status() : p.status()) << "\n";
      return 1;
    }
    totals = *rr;
    plain.push_back(Seconds(t0, t1));
    // With a cache, run 1 fills it and the later runs read from it: the
    // first is reported on its own, the median covers the others.
    if (cache != nullptr && cache->options().mode != CacheMode::kOff && r == 0 && a.runs > 1) {
      first_run_s = Seconds(t1, t2);
      after_first = cache->stats();
    } else {
      reader.push_back(Seconds(t1, t2));
    }
    first_sample.push_back(rr->first_sample_s);
    if (totals.compression != ShardCompression::kNone && !a.no_external) {
      if (external_cmd.empty()) {
        external_cmd = totals.compression == ShardCompression::kZstd ? "zstd -q -d -c" : "gzip -dc";
        for (const auto& s : *refs) external_cmd += " '" + LocalPath(s.url) + "'";
        external_cmd += " > /dev/null";
      }
      const double before = CpuSeconds(RUSAGE_CHILDREN);
      double t = TimeCommand(external_cmd);
      if (t > 0) {
        external.push_back(t);
        external_cpu.push_back(CpuSeconds(RUSAGE_CHILDREN) - before);
      }
    }
  }
  double tp = Median(plain), tr = Median(reader);
  double gb = static_cast<double>(file_bytes) / 1e9;
  struct rusage ru;
  ::getrusage(RUSAGE_SELF, &ru);
  double rss_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  nlohmann::json j = {
      {"shards", refs->size()},
      {"file_bytes", file_bytes},
      {"samples", totals.samples},
      {"fields", totals.fields},
      {"field_bytes", totals.bytes},
      {"engine", a.libarchive ? "libarchive" : "fast"},
      {"runs", a.runs},
      {"plain_read_gbps", gb / tp},
      {"reader_gbps", gb / tr},
      {"reader_payload_gbps", static_cast<double>(totals.bytes) / 1e9 / tr},
      {"samples_per_s", static_cast<double>(totals.samples) / tr},
      {"ratio_vs_plain_read", tp / tr},
      {"cpu_plain_read_gbps", gb / Median(plain_cpu)},
      {"cpu_reader_gbps", gb / Median(reader_cpu)},
      {"cpu_samples_per_s", static_cast<double>(totals.samples) / Median(reader_cpu)},
      {"cpu_ratio_vs_plain_read", Median(plain_cpu) / Median(reader_cpu)},
      {"peak_rss_mib", rss_mib},
      {"first_sample_ms", 1000 * Median(first_sample)},
  };
  if (auto stats = CacheStatsJson(cache.get()); !stats.is_null()) {
    j["cache"] = stats;
    if (first_run_s > 0) {
      CacheStats now = cache->stats();
      j["cache_fill_gbps"] = gb / first_run_s;
      j["first_run_first_sample_ms"] = 1000 * first_sample.front();
      // Bytes fetched from the source by the runs after the first: 0 when
      // they were all served by the cache.
      j["later_runs_source_bytes"] = now.bytes_from_source - after_first.bytes_from_source;
    }
  }
  if (!external.empty()) {
    double te = Median(external);
    j["external_command"] = totals.compression == ShardCompression::kZstd ? "zstd -d -c" : "gzip -dc";
    j["external_gbps"] = gb / te;
    j["ratio_vs_external"] = te / tr;
    j["cpu_ratio_vs_external"] = Median(external_cpu) / Median(reader_cpu);
  }
  if (a.json) {
    std::cout << j.dump() << "\n";
    return 0;
  }
  char line[256];
  std::cout << refs->size() << " shards, " << HumanBytes(file_bytes) << ", "
            << totals.samples << " samples of " << HumanBytes(totals.samples ? totals.bytes / totals.samples : 0)
            << " on average; median of " << a.runs << " runs\n";
  std::snprintf(line, sizeof(line), "plain sequential read: %8.2f GB/s\n", gb / tp);
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "tar reader (%s):   %8.2f GB/s  %12.0f samples/s  %5.1f%% of plain read\n",
                a.libarchive ? "libarchive" : "fast", gb / tr,
                static_cast<double>(totals.samples) / tr, 100.0 * tp / tr);
  std::cout << line;
  if (!external.empty()) {
    std::snprintf(line, sizeof(line),
                  "%s:        %8.2f GB/s; reader at %5.1f%% of it (%.1f%% per CPU second)\n",
                  j["external_command"].get<std::string>().c_str(), gb / Median(external),
                  100.0 * Median(external) / tr, 100.0 * j["cpu_ratio_vs_external"].get<double>());
    std::cout << line;
  }
  if (first_run_s > 0) {
    std::snprintf(line, sizeof(line), "run 1 (filling the cache): %8.2f GB/s; later runs from the cache\n",
                  gb / first_run_s);
    std::cout << line;
  }
  std::string summary = CacheSummary(cache.get());
  if (!summary.empty()) std::cout << summary << "\n";
  std::snprintf(line, sizeof(line), "first sample after %.1f ms (median)\n", 1000 * Median(first_sample));
  std::cout << line;
  std::snprintf(line, sizeof(line),
                "per CPU second:        plain %.2f GB/s, reader %.2f GB/s, %.0f samples/s, "
                "%.1f%% of plain read\n",
                j["cpu_plain_read_gbps"].get<double>(), j["cpu_reader_gbps"].get<double>(),
                j["cpu_samples_per_s"].get<double>(),
                100.0 * j["cpu_ratio_vs_plain_read"].get<double>());
  std::cout << line;
  std::snprintf(line, sizeof(line), "peak RSS: %.0f MiB\n", rss_mib);
  std::cout << line;
  return 0;
}

}  // namespace

SHARDSTREAM_COMMAND(bench, [](CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand(
      "bench", "Read shards as fast as possible and compare with a plain read of the same files");
  sub->add_option("SHARD", args->shards, "Shards to read (paths, urls, quoted brace patterns or manifests)")->required();
  AddCacheFlags(sub, &args->cache);
  sub->add_option("--runs", args->runs, "Timed runs; medians are reported")->capture_default_str();
  sub->add_option("--dest-size", args->dest_size, "Destination buffer fields are copied to, reused cyclically like a batch slot")
      ->capture_default_str();
  sub->add_option("--chunk-size", args->chunk_size, "Reader's read/buffer size (also the plain read's)")
      ->capture_default_str();
  sub->add_flag("--libarchive", args->libarchive, "Use the libarchive engine");
  sub->add_flag("--no-external", args->no_external, "Skip timing zstd/gzip for compressed shards");
  sub->add_flag("--json", args->json, "Print the figures as JSON");
  sub->callback([args] {
    if (Status st = ExpandBraceArgs(&args->shards); !st.ok()) {
      std::cerr << "bench: " << st << "\n";
      ExitWith(2);
      return;
    }
    ExitWith(RunBench(*args));
  });
});

}  // namespace shardstream::tools
