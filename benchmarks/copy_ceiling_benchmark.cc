// Copy ceiling: how fast token batches could be filled from cached shards
// by the reads alone, with no pipeline, so the loader's figure can be set
// against what its design allows and against a design that copies once.
//
// On the same uncompressed token shards, each thread runs in turn:
//   plain     512 KiB reads into one buffer (the limit of bench-loader)
//   readcopy  the same reads, then every token span copied into cycling
//             [256, 2048] int32 batch buffers (the loader's two copies)
//   onecopy   vectored reads (preadv, up to 4 MiB and 1,024 pieces each)
//             that put the token spans straight into the batch buffers and
//             the bytes between them into a scratch buffer: one copy, but it
//             needs every span's place in the file before reading
//   headers   one 640-byte read per sample at its tar header: what learning
//             those places by reading costs, without a version 2 index
// Each thread reads every shard (starting at a different one), so the work
// is even; GB/s count the file bytes all threads covered. The span layout
// is taken once, untimed, from the sample index TarReader builds.
//
// Usage: copy_ceiling_benchmark [--threads N] [--runs N] [--field NAME]
//                               SHARD.tar ...
// Prints one JSON object. Commands and figures: docs/benchmarks-pipe.md.
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardstream/shard_index.h"
#include "shardstream/tar_reader.h"
#include "tools/bench_util.h"

namespace {

using namespace shardstream;
using tools::Median;

struct Span {
  uint64_t header = 0;  // the sample's first tar header
  uint64_t offset = 0;  // its token bytes
  uint64_t size = 0;
};

struct Shard {
  std::string path;
  int fd = -1;
  uint64_t size = 0;
  std::vector<Span> spans;
};

constexpr size_t kChunk = size_t{512} << 10;
constexpr size_t kBatchBytes = size_t{256} * 2048 * 4;
constexpr size_t kBatches = 4;
constexpr size_t kMaxRun = size_t{4} << 20;
constexpr size_t kMaxGap = size_t{64} << 10;
constexpr size_t kHeaderRead = 640;  // a tar header and a .npy header

bool Scan(const std::string& path, const std::string& field, Shard* out) {
  auto index = BuildSampleIndex(path);
  if (!index.ok()) {
    std::cerr << index.status() << "\n";
    return false;
  }
  for (const SampleIndexEntry& e : index->samples) {
    for (uint64_t j = e.first_field; j < e.first_field + e.nfields; ++j) {
      const SampleIndexField& f = index->fields[j];
      if (f.name != field) continue;
      if (f.ndim < 0) {
        std::cerr << path << ": field '" << field << "' of sample '" << e.key
                  << "' is not an .npy array\n";
        return false;
      }
      out->spans.push_back(Span{e.offset, f.payload, f.offset + f.size - f.payload});
    }
  }
  out->path = path;
  out->fd = ::open(path.c_str(), O_RDONLY);
  if (out->fd < 0 || out->spans.empty()) return false;
  out->size = index->shard_size;
  return true;
}

// One thread's buffers, touched before timing.
struct Buffers {
  std::unique_ptr<char[]> chunk{new char[kChunk]};
  std::unique_ptr<char[]> batches{new char[kBatches * kBatchBytes]};
  std::unique_ptr<char[]> scratch{new char[kMaxGap]};
  size_t at = 0;  // next free byte in the batch buffers
  Buffers() {
    std::memset(chunk.get(), 0, kChunk);
    std::memset(batches.get(), 0, kBatches * kBatchBytes);
    std::memset(scratch.get(), 0, kMaxGap);
  }
  // Where the next document's tokens go (and one end-of-document token).
  char* Place(uint64_t n) {
    if (at + n + 4 > kBatches * kBatchBytes) at = 0;
    char* p = batches.get() + at;
    at += n + 4;
    return p;
  }
};

void Plain(const Shard& s, Buffers* b) {
  for (uint64_t off = 0; off < s.size; off += kChunk)
    (void)!::pread(s.fd, b->chunk.get(), kChunk, static_cast<off_t>(off));
}

void ReadCopy(const Shard& s, Buffers* b) {
  size_t next = 0;        // first span not yet fully copied
  char* dst = nullptr;    // its destination, once started
  for (uint64_t off = 0; off < s.size; off += kChunk) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, s.size - off));
    (void)!::pread(s.fd, b->chunk.get(), n, static_cast<off_t>(off));
    const uint64_t end = off + n;
    while (next < s.spans.size() && s.spans[next].offset < end) {
      const Span& sp = s.spans[next];
      if (dst == nullptr) dst = b->Place(sp.size);
      const uint64_t from = std::max(sp.offset, off);
      const uint64_t to = std::min(sp.offset + sp.size, end);
      std::memcpy(dst + (from - sp.offset), b->chunk.get() + (from - off), to - from);
      if (to < sp.offset + sp.size) break;  // the rest is in the next chunk
      dst = nullptr;
      ++next;
    }
  }
}

void OneCopy(const Shard& s, Buffers* b) {
  std::vector<iovec> iov;
  iov.reserve(1024);
  uint64_t start = 0, pos = 0;  // the run's first byte, and the byte after its last piece
  auto flush = [&] {
    if (!iov.empty()) (void)!::preadv(s.fd, iov.data(), static_cast<int>(iov.size()), static_cast<off_t>(start));
    iov.clear();
  };
  for (const Span& sp : s.spans) {
    const uint64_t gap = sp.offset - pos;
    if (iov.empty() || gap > kMaxGap || iov.size() + 2 > 1024 || sp.offset + sp.size - start > kMaxRun) {
      flush();
      start = pos = sp.offset;
    }
    if (pos < sp.offset) iov.push_back(iovec{b->scratch.get(), static_cast<size_t>(sp.offset - pos)});
    iov.push_back(iovec{b->Place(sp.size), static_cast<size_t>(sp.size)});
    pos = sp.offset + sp.size;
  }
  flush();
}

void Headers(const Shard& s, Buffers* b) {
  for (const Span& sp : s.spans) (void)!::pread(s.fd, b->scratch.get(), kHeaderRead, static_cast<off_t>(sp.header));
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, runs = 5;
  std::string field = "tokens.npy";
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--field" && i + 1 < argc) {
      field = argv[++i];
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "usage: copy_ceiling_benchmark [--threads N] [--runs N] [--field NAME] SHARD.tar ...\n";
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) {
    std::cerr << "no shards given\n";
    return 2;
  }
  std::vector<Shard> shards(paths.size());
  uint64_t file_bytes = 0, token_bytes = 0, samples = 0;
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!Scan(paths[i], field, &shards[i])) return 1;
    file_bytes += shards[i].size;
    samples += shards[i].spans.size();
    for (const Span& sp : shards[i].spans) token_bytes += sp.size;
  }
  // A check that the one-copy reads place what the two-copy path places.
  {
    Buffers a, b;
    ReadCopy(shards[0], &a);
    OneCopy(shards[0], &b);
    if (a.at != b.at || std::memcmp(a.batches.get(), b.batches.get(), kBatches * kBatchBytes) != 0) {
      std::cerr << "onecopy and readcopy placed different bytes\n";
      return 1;
    }
  }
  std::vector<std::unique_ptr<Buffers>> bufs;
  for (int t = 0; t < threads; ++t) bufs.push_back(std::make_unique<Buffers>());
  const char* names[] = {"plain", "readcopy", "onecopy", "headers"};
  void (*modes[])(const Shard&, Buffers*) = {Plain, ReadCopy, OneCopy, Headers};
  nlohmann::json out;
  out["threads"] = threads;
  out["runs"] = runs;
  out["shards"] = shards.size();
  out["samples"] = samples;
  out["file_bytes"] = file_bytes;
  out["token_bytes"] = token_bytes;
  // The modes take turns within each run, so a drift in the machine's
  // speed (common here) reaches all of them alike.
  std::vector<std::vector<double>> gbps(4);
  for (int r = 0; r < runs; ++r) {
    for (int m = 0; m < 4; ++m) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&, t, m] {
          for (size_t k = 0; k < shards.size(); ++k)
            modes[m](shards[(k + static_cast<size_t>(t)) % shards.size()], bufs[static_cast<size_t>(t)].get());
        });
      }
      for (auto& th : ts) th.join();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      gbps[static_cast<size_t>(m)].push_back(static_cast<double>(file_bytes) * threads / s / 1e9);
    }
  }
  const double plain = Median(gbps[0]);
  for (int m = 0; m < 4; ++m) {
    const double med = Median(gbps[static_cast<size_t>(m)]);
    out[std::string(names[m]) + "_gb_per_s"] = med;
    out[std::string(names[m]) + "_vs_plain"] = med / plain;
    out[std::string(names[m]) + "_ns_per_sample_per_thread"] =
        1e9 * static_cast<double>(file_bytes) / (med * 1e9 / threads) / static_cast<double>(samples);
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}
