// `shardstream cache stats|ls|evict|clear --dir DIR [--json]`: inspect and
// trim a shard cache directory, also while training processes use it (entries
// in use are never removed).
#include <cmath>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <unistd.h>

#include "shardstream/shard_cache.h"
#include "tools/cache_flags.h"
#include "tools/command.h"

namespace shardstream::tools {
namespace {

using json = nlohmann::json;

std::string HumanBytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

std::string IsoTime(int64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool IsCache(const std::string& dir) {
  return ::access((dir + "/SHARDSTREAM_CACHE").c_str(), F_OK) == 0;
}

int Fail(const Status& s) {
  std::cerr << "shardstream cache: " << s.ToString() << "\n";
  return 1;
}

Result<std::vector<CacheEntryInfo>> Entries(const std::string& dir) {
  if (!IsCache(dir))
    return Status::Config(dir + " is not a shardstream cache directory (no SHARDSTREAM_CACHE)");
  return ListCacheEntries(dir);
}

int Stats(const std::string& dir, bool as_json) {
  auto entries = Entries(dir);
  if (!entries.ok()) return Fail(entries.status());
  uint64_t count = 0, bytes = 0, temps = 0, temp_bytes = 0, in_use = 0;
  int64_t oldest = 0, newest = 0;
  for (const auto& e : *entries) {
    if (e.temporary) {
      temps++;
      temp_bytes += e.size;
      continue;
    }
    count++;
    bytes += e.size;
    in_use += e.in_use ? 1 : 0;
    if (oldest == 0 || e.last_use_ns < oldest) oldest = e.last_use_ns;
    newest = std::max(newest, e.last_use_ns);
  }
  if (as_json) {
    json j = {{"dir", dir},           {"entries", count},         {"bytes", bytes},
              {"in_use", in_use},     {"temporaries", temps},     {"temporary_bytes", temp_bytes},
              {"oldest_use", count ? IsoTime(oldest) : ""},
              {"newest_use", count ? IsoTime(newest) : ""}};
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << "cache " << dir << "\n"
              << "  entries:     " << count << " (" << HumanBytes(bytes) << ", " << in_use
              << " in use)\n"
              << "  downloading: " << temps << " (" << HumanBytes(temp_bytes) << ")\n";
    if (count) std::cout << "  last use:    " << IsoTime(oldest) << " .. " << IsoTime(newest) << "\n";
  }
  return 0;
}

int List(const std::string& dir, bool as_json) {
  auto entries = Entries(dir);
  if (!entries.ok()) return Fail(entries.status());
  if (as_json) {
    json arr = json::array();
    for (const auto& e : *entries) {
      arr.push_back({{"key", e.key}, {"url", e.url}, {"size", e.size},
                     {"checksum", e.checksum}, {"last_use", IsoTime(e.last_use_ns)},
                     {"in_use", e.in_use}, {"temporary", e.temporary}});
    }
    std::cout << arr.dump(2) << "\n";
    return 0;
  }
  for (const auto& e : *entries) {
    std::printf("%-20s %12llu  %s%s  %s\n", IsoTime(e.last_use_ns).c_str(),
                static_cast<unsigned long long>(e.size),
                e.temporary ? "downloading" : (e.in_use ? "in-use     " : "           "),
                "", e.url.empty() ? e.key.c_str() : e.url.c_str());
  }
  return 0;
}

int Evict(const std::string& dir, const std::string& to, const std::vector<std::string>& urls,
          bool as_json) {
  if (!IsCache(dir)) return Fail(Entries(dir).status());
  if (to.empty() == urls.empty()) {
    std::cerr << "shardstream cache evict: give either --to SIZE or urls\n";
    return 2;
  }
  ShardCacheOptions options;
  options.dir = dir;
  options.limit_bytes = UINT64_MAX;
  auto cache = ShardCache::Create(options);
  if (!cache.ok()) return Fail(cache.status());
  json report = {{"dir", dir}};
  int rc = 0;
  if (!to.empty()) {
    auto parsed = ParseByteSize(to);
    if (!parsed.ok()) {
      std::cerr << "shardstream cache evict: --to: " << parsed.status().message() << "\n";
      return 2;
    }
    const uint64_t target = *parsed;
    auto left = (*cache)->EvictTo(target);
    if (!left.ok()) return Fail(left.status());
    report["bytes_left"] = *left;
    if (*left > target) rc = 1;  // entries in use kept it above the target
  } else {
    json results = json::object();
    for (const auto& url : urls) {
      Status s = (*cache)->Evict(url);
      results[url] = s.ok() ? "evicted" : s.ToString();
      if (!s.ok()) rc = 1;
    }
    report["urls"] = results;
  }
  CacheStats st = (*cache)->stats();
  report["evicted"] = st.evictions;
  report["evicted_bytes"] = st.evicted_bytes;
  if (as_json) {
    std::cout << report.dump(2) << "\n";
  } else {
    std::cout << "evicted " << st.evictions << " entries (" << HumanBytes(st.evicted_bytes) << ")";
    if (report.contains("bytes_left"))
      std::cout << "; " << HumanBytes(report["bytes_left"].get<uint64_t>()) << " left";
    std::cout << "\n";
    if (report.contains("urls"))
      for (auto& [url, what] : report["urls"].items())
        std::cout << "  " << url << ": " << what.get<std::string>() << "\n";
  }
  return rc;
}

int Clear(const std::string& dir, bool as_json) {
  Status s = ClearCache(dir);
  if (!s.ok()) return Fail(s);
  auto left = ListCacheEntries(dir);
  size_t n = left.ok() ? left->size() : 0;
  if (as_json) {
    std::cout << json{{"dir", dir}, {"entries_left_in_use", n}}.dump(2) << "\n";
  } else {
    std::cout << "cleared " << dir;
    if (n) std::cout << " (" << n << " entries in use were kept)";
    std::cout << "\n";
  }
  return 0;
}

struct CacheArgs {
  std::string dir;
  bool json = false;
  std::string to;
  std::vector<std::string> urls;
};

}  // namespace

SHARDSTREAM_COMMAND(cache, [](CLI::App& app) {
  auto args = std::make_shared<CacheArgs>();
  auto* cache = app.add_subcommand("cache", "Inspect and trim a shard cache directory");
  cache->require_subcommand(1);
  auto add = [&](const char* name, const char* help) {
    auto* sub = cache->add_subcommand(name, help);
    sub->add_option("--dir", args->dir, "Cache directory")->required();
    sub->add_flag("--json", args->json, "Machine-readable output");
    return sub;
  };
  add("stats", "Entries, bytes, downloads in progress")->callback([args] {
    ExitWith(Stats(args->dir, args->json));
  });
  add("ls", "List entries, least recently used first")->callback([args] {
    ExitWith(List(args->dir, args->json));
  });
  auto* evict = add("evict", "Remove entries not in use: down to --to SIZE, or the given urls");
  evict->add_option("--to", args->to, "Target size, e.g. 500M, 20G");
  evict->add_option("urls", args->urls, "Shard urls to evict");
  evict->callback([args] { ExitWith(Evict(args->dir, args->to, args->urls, args->json)); });
  add("clear", "Remove every entry not in use and abandoned downloads")->callback([args] {
    ExitWith(Clear(args->dir, args->json));
  });
});

}  // namespace shardstream::tools
