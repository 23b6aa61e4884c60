// Shard cache benchmark (docs/benchmarks-cache.md):
//  1. fill:   read shards from a local source through an empty cache (the
//             reader streams while the cache fills) vs a plain copy of the
//             same files (read + write, 1 MiB buffer), with and without fsync;
//  2. epoch2: read the shards again through the warm cache vs reading the
//             cached files directly; the source must see zero bytes;
//  3. rss:    peak RSS of a child process that streams one shard through the
//             cache, for several shard sizes (it must not grow with them).
//
// Usage: shard_cache_benchmark [--dir DIR] [--shards N] [--shard-mb MB] [--runs R]
// Prints one line per measurement (median over runs) and a JSON summary.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "shardstream/checksum.h"
#include "shardstream/shard_cache.h"

namespace {

using namespace shardstream;
using Clock = std::chrono::steady_clock;
constexpr size_t kBuf = 1 << 20;

void Die(const std::string& what) {
  std::fprintf(stderr, "shard_cache_benchmark: %s\n", what.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Writes a shard of pseudo-random bytes; returns its ref.
ShardRef MakeShard(const std::string& path, uint64_t size, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> buf(kBuf / 8);
  auto hasher = Hasher::Create().value();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) Die("cannot create " + path);
  for (uint64_t done = 0; done < size;) {
    for (auto& w : buf) w = rng();
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBuf, size - done));
    hasher->Update(buf.data(), n);
    if (::write(fd, buf.data(), n) != static_cast<ssize_t>(n)) Die("write " + path);
    done += n;
  }
  ::close(fd);
  return ShardRef(path, static_cast<int64_t>(size), hasher->Finish());
}

uint64_t ReadThrough(ShardCache& cache, const ShardRef& ref, std::vector<char>& buf) {
  auto shard = cache.Open(ref);
  if (!shard.ok()) Die(shard.status().ToString());
  uint64_t total = 0;
  while (true) {
    auto got = (*shard)->Read(buf.size(), buf.data());
    if (!got.ok()) Die(got.status().ToString());
    if (*got == 0) return total;
    total += *got;
  }
}

uint64_t ReadFileDirect(const std::string& path, std::vector<char>& buf) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) Die("open " + path);
  (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  uint64_t total = 0;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) Die("read " + path);
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return total;
}

void CopyFile(const std::string& from, const std::string& to, bool sync, std::vector<char>& buf) {
  int in = ::open(from.c_str(), O_RDONLY);
  int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || out < 0) Die("copy " + from);
  (void)::posix_fadvise(in, 0, 0, POSIX_FADV_SEQUENTIAL);
  while (true) {
    ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) Die("read " + from);
    if (n == 0) break;
    if (::write(out, buf.data(), static_cast<size_t>(n)) != n) Die("write " + to);
  }
  if (sync) ::fdatasync(out);
  ::close(in);
  ::close(out);
}

ShardCacheOptions CacheOptions(const std::string& dir, bool sync) {
  ShardCacheOptions o;
  o.dir = dir;
  o.limit_bytes = uint64_t{1} << 40;
  o.source = LocalSource();
  o.sync_entries = sync;
  return o;
}

// In a fresh process (--rss-child): stream one shard through an empty cache
// (miss, stream-through while filling), then again (hit).
// Prints the process's peak RSS (VmHWM, KiB: this process image only, unlike
// ru_maxrss, which keeps the parent's figure across fork and exec).
int RssChild(const std::string& dir, const ShardRef& ref) {
  {
    auto cache = ShardCache::Create(CacheOptions(dir, false)).value();
    std::vector<char> buf(kBuf);
    ReadThrough(*cache, ref, buf);
    cache->WaitIdle();
    ReadThrough(*cache, ref, buf);
  }
  FILE* f = std::fopen("/proc/self/status", "r");
  char line[256];
  while (f && std::fgets(line, sizeof(line), f))
    if (std::strncmp(line, "VmHWM:", 6) == 0) std::printf("%ld\n", std::atol(line + 6));
  if (f) std::fclose(f);
  return 0;
}

// Returns the peak RSS (KiB) of RssChild for a shard of `size` bytes.
long PeakRssOfOneShard(const std::string& work, uint64_t size) {
  std::string src = work + "/rss-src.bin", dir = work + "/rss-cache";
  ShardRef ref = MakeShard(src, size, 7);
  std::filesystem::remove_all(dir);
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) Die("readlink /proc/self/exe");
  exe[n] = '\0';
  std::string cmd = std::string(exe) + " --rss-child '" + dir + "' '" + src + "' " +
                    std::to_string(ref.size) + " " + ref.checksum;
  FILE* p = ::popen(cmd.c_str(), "r");
  long kib = -1;
  if (p == nullptr || std::fscanf(p, "%ld", &kib) != 1 || ::pclose(p) != 0) Die("rss child failed");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(src);
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::string(argv[1]) == "--rss-child")
    return RssChild(argv[2], ShardRef(argv[3], std::atoll(argv[4]), argv[5]));
  std::string work = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  int shards = 4, runs = 5;
  uint64_t shard_mb = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") work = argv[i + 1];
    else if (a == "--shards") shards = std::atoi(argv[i + 1]);
    else if (a == "--shard-mb") shard_mb = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else Die("unknown option " + a);
  }
  work += "/shardstream-cache-bench";
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work + "/src");
  const uint64_t shard_bytes = shard_mb << 20;
  const double total_mb = static_cast<double>(shard_bytes * static_cast<uint64_t>(shards)) / (1 << 20);
  std::vector<ShardRef> refs;
  for (int i = 0; i < shards; ++i)
    refs.push_back(MakeShard(work + "/src/shard-" + std::to_string(i) + ".tar", shard_bytes,
                             static_cast<uint32_t>(i)));
  std::vector<char> buf(kBuf);
  const std::string cache_dir = work + "/cache";

  std::vector<double> fill_nosync, fill_sync, copy_nosync, copy_sync, epoch2, direct;
  uint64_t epoch2_source_bytes = 0;
  for (int r = 0; r < runs; ++r) {
    for (bool sync : {false, true}) {
      for (int k = 0; k < 2; ++k) {
        ::sync();  // start each measurement without the previous one's dirty pages
        if ((k + r) % 2 == 0) {
          std::filesystem::remove_all(cache_dir);
          auto cache = ShardCache::Create(CacheOptions(cache_dir, sync)).value();
          auto t = Clock::now();
          for (const auto& ref : refs) ReadThrough(*cache, ref, buf);
          cache->WaitIdle();  // the entries are published, not just read
          (sync ? fill_sync : fill_nosync).push_back(total_mb / Seconds(t));
        } else {
          std::filesystem::remove_all(work + "/copy");
          std::filesystem::create_directories(work + "/copy");
          auto t = Clock::now();
          for (int i = 0; i < shards; ++i)
            CopyFile(refs[static_cast<size_t>(i)].url, work + "/copy/" + std::to_string(i), sync,
                     buf);
          (sync ? copy_sync : copy_nosync).push_back(total_mb / Seconds(t));
        }
      }
    }
    std::filesystem::remove_all(work + "/copy");
    // Second epoch: the cache from the last fill is warm.
    // Alternating, three times each, so that neither always meets a colder
    // page cache or a busier machine.
    for (int k = 0; k < 6; ++k) {
      if ((k + r) % 2 == 0) {
        auto cache = ShardCache::Create(CacheOptions(cache_dir, true)).value();
        auto t = Clock::now();
        for (const auto& ref : refs) ReadThrough(*cache, ref, buf);
        epoch2.push_back(total_mb / Seconds(t));
        epoch2_source_bytes += cache->stats().bytes_from_source;
        if (cache->stats().hits != static_cast<uint64_t>(shards) || cache->stats().misses != 0)
          Die("second epoch missed the cache");
      } else {
        auto t = Clock::now();
        for (const auto& ref : refs)
          ReadFileDirect(cache_dir + "/" + CacheKey(ref.url) + ".shard", buf);
        direct.push_back(total_mb / Seconds(t));
      }
    }
  }

  std::vector<std::pair<uint64_t, long>> rss;
  for (uint64_t mb : {16, 256, 1024}) rss.emplace_back(mb, PeakRssOfOneShard(work, mb << 20));
  std::filesystem::remove_all(work);

  auto line = [](const char* what, double v) { std::printf("%-44s %9.0f MiB/s\n", what, v); };
  std::printf("%d shards x %llu MiB, median of %d runs\n", shards,
              static_cast<unsigned long long>(shard_mb), runs);
  line("fill: stream through empty cache (no fsync)", Median(fill_nosync));
  line("fill: plain copy (no fsync)", Median(copy_nosync));
  line("fill: stream through empty cache (fsync)", Median(fill_sync));
  line("fill: plain copy (fsync)", Median(copy_sync));
  line("epoch 2: through the warm cache", Median(epoch2));
  line("epoch 2: cached files read directly", Median(direct));
  std::printf("%-44s %9.1f %%\n", "epoch 2: cache / direct", 100 * Median(epoch2) / Median(direct));
  std::printf("%-44s %9llu\n", "epoch 2: bytes from the source",
              static_cast<unsigned long long>(epoch2_source_bytes));
  for (auto& [mb, kib] : rss)
    std::printf("peak RSS, one %5llu MiB shard (miss + hit)    %9ld KiB\n",
                static_cast<unsigned long long>(mb), kib);

  nlohmann::json j = {{"shards", shards}, {"shard_mib", shard_mb}, {"runs", runs},
                      {"fill_mib_s", Median(fill_nosync)}, {"copy_mib_s", Median(copy_nosync)},
                      {"fill_sync_mib_s", Median(fill_sync)}, {"copy_sync_mib_s", Median(copy_sync)},
                      {"epoch2_mib_s", Median(epoch2)}, {"direct_mib_s", Median(direct)},
                      {"epoch2_source_bytes", epoch2_source_bytes}};
  for (auto& [mb, kib] : rss) j["peak_rss_kib"][std::to_string(mb) + "MiB"] = kib;
  std::printf("%s\n", j.dump().c_str());
  return 0;
}
