// Tar reader benchmark: writes shard sets of fixed sample sizes with
// ShardWriter (1 KiB, 8 KiB and 1 MiB samples uncompressed; 8 KiB and 1 MiB
// samples zstd-compressed), then runs `shardstream bench` on each: the
// reader copying every field into a batch buffer against the plain
// sequential read of the same files (and `zstd -d -c` for zstd shards),
// medians of several runs. Commands and figures: docs/benchmarks-tar.md.
//
// Usage: tar_reader_benchmark [--dir DIR] [--total-mib N] [--runs N]
//                             [--cli PATH] [--keep]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "shardstream/shard_writer.h"

namespace {

struct Config {
  const char* name;
  size_t sample_bytes;
  shardstream::ShardCompression compression;
};

// Text-like bytes (zstd compresses them about 2x), so the zstd figures are
// not those of incompressible data.
std::string Payload(size_t n, std::mt19937_64& rng) {
  static const char kAlphabet[] = "etaoinshrdlucmfwypvbgkjqxz ETAOIN.,\n0123456789";
  std::string s(n, ' ');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t r = rng();
    for (size_t j = i; j < std::min(n, i + 8); ++j, r >>= 8)
      s[j] = kAlphabet[(r & 0xff) % (sizeof(kAlphabet) - 1)];
  }
  return s;
}

bool Generate(const std::string& dir, const Config& c, uint64_t total) {
  using namespace shardstream;
  ShardWriterOptions o;
  o.compression = c.compression;
  o.max_bytes = uint64_t{256} << 20;
  auto w = ShardWriter::Create(dir, o);
  if (!w.ok()) {
    std::cerr << w.status() << "\n";
    return false;
  }
  std::mt19937_64 rng(42);
  std::string payload;
  uint64_t n = std::max<uint64_t>(1, total / c.sample_bytes);
  char key[32];
  for (uint64_t i = 0; i < n; ++i) {
    Sample s;
    std::snprintf(key, sizeof(key), "s%09llu", static_cast<unsigned long long>(i));
    s.key = key;
    Field f;
    f.name = "bin";
    payload = Payload(c.sample_bytes, rng);  // fresh bytes: no long-range repeats
    f.data = payload;
    s.fields.push_back(std::move(f));
    if (Status st = (*w)->Write(s); !st.ok()) {
      std::cerr << st << "\n";
      return false;
    }
  }
  Status st = (*w)->Close();
  if (!st.ok()) std::cerr << st << "\n";
  return st.ok();
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                    "/shardstream-tar-bench";
  uint64_t total_mib = 1024;
  int runs = 5;
  bool keep = false;
  std::string cli =
      (std::filesystem::path(argv[0]).parent_path().parent_path() / "shardstream").string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--dir") dir = next();
    else if (a == "--total-mib") total_mib = std::stoull(next());
    else if (a == "--runs") runs = std::stoi(next());
    else if (a == "--cli") cli = next();
    else if (a == "--keep") keep = true;
    else {
      std::cerr << "usage: " << argv[0]
                << " [--dir DIR] [--total-mib N] [--runs N] [--cli PATH] [--keep]\n";
      return 2;
    }
  }
  if (::access(cli.c_str(), X_OK) != 0) {
    std::cerr << "cannot run " << cli << " (pass --cli PATH to the shardstream tool)\n";
    return 2;
  }
  using shardstream::ShardCompression;
  const Config configs[] = {
      {"1KiB", 1024, ShardCompression::kNone},
      {"8KiB", 8 << 10, ShardCompression::kNone},
      {"1MiB", 1 << 20, ShardCompression::kNone},
      {"8KiB-zstd", 8 << 10, ShardCompression::kZstd},
      {"1MiB-zstd", 1 << 20, ShardCompression::kZstd},
  };
  for (const Config& c : configs) {
    std::string sub = dir + "/" + c.name;
    if (!std::filesystem::exists(sub + "/manifest.jsonl")) {
      std::filesystem::remove_all(sub);
      std::cerr << "generating " << sub << " (" << total_mib << " MiB)\n";
      if (!Generate(sub, c, total_mib << 20)) return 1;
    }
    std::string shards;
    for (const auto& e : std::filesystem::directory_iterator(sub)) {
      std::string p = e.path().string();
      if (p.find(".tar") != std::string::npos && p.find(".idx") == std::string::npos)
        shards += " '" + p + "'";
    }
    std::string cmd = cli + " bench --runs " + std::to_string(runs) + " --json" + shards;
    std::cout << "== " << c.name << ": " << cmd.substr(0, cmd.find(" '")) << " " << sub
              << "/*.tar*\n" << std::flush;
    if (std::system(cmd.c_str()) != 0) return 1;
  }
  if (!keep) std::filesystem::remove_all(dir);
  return 0;
}
