// shardstream bench-loader MANIFEST: runs the Loader over a data set for a
// few epochs and reports batches/s, samples/s, GB/s and peak RSS, next to two
// figures measured in the same run over the same files: the plain
// sequential read (the bandwidth ceiling) and the bare tar reader's
// samples/s (one thread). --make-tokens / --make-samples write a synthetic
// data set first.
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "pipeline/fill_seq.h"
#include "pipeline/shuffle_buffer.h"
#include "shardstream/decode.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/loader.h"
#include "shardstream/shard_cache.h"
#include "shardstream/shard_index.h"
#include "shardstream/shard_writer.h"
#include "shardstream/tar_reader.h"
#include "shardstream/url.h"
#include "tools/bench_util.h"
#include "tools/command.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

struct Args {
  std::string manifest;
  std::string make_tokens, make_samples;  // output directories
  int64_t make_count = 0;                 // documents / samples to write
  int64_t mean_tokens = 1024, sample_bytes = 1024;
  uint64_t shard_mib = 256;
  std::string layout = "documents";  // of --make-tokens: or "compact" (document groups)
  std::string tokens_field;
  std::vector<std::string> fields;
  int64_t batch_size = 256, seq_len = 2048, shuffle = 0, prefetch = 4;
  int threads = 2, open_shards = 4, runs = 3;
  int64_t shard_queue = 256;
  std::string chunk_size = "512KiB";
  std::string mapped_keep;  // empty: the loader's default
  bool json = false;
  bool no_metadata = false, no_direct = false;
  bool loader_only = false;
  bool reread = false;    // drop the shards' pages first and read them back in
  std::string cache_dir;  // read through a shard cache here (filled first)
  // An image field decoded by the loader (--image-field).
  std::string image_field;
  std::string image_size = "224";
  std::string crop = "random_resized";
  double flip = 0.5;
  int resize = 0;
  bool chw = false;
};

// "224" or "224x160" (height x width).
bool ParseImageSize(const std::string& s, int* h, int* w) {
  char* end = nullptr;
  long a = std::strtol(s.c_str(), &end, 10);
  long b = a;
  if (*end == 'x' || *end == 'X') b = std::strtol(end + 1, &end, 10);
  if (*end != '\0' || a < 1 || b < 1 || a > 65535 || b > 65535) return false;
  *h = static_cast<int>(a);
  *w = static_cast<int>(b);
  return true;
}

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

Status MakeData(const Args& a) {
  const bool tokens = !a.make_tokens.empty();
  ShardWriterOptions wo;
  wo.max_bytes = a.shard_mib << 20;
  wo.write_index = true;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto w, ShardWriter::Create(tokens ? a.make_tokens : a.make_samples, wo));
  uint64_t x = 88172645463325252ULL;
  std::vector<int32_t> t;
  std::string payload;
  // --layout compact: documents gathered into groups of about 128 KiB of
  // tokens, as shardstream.convert writes them (docs/shards.md).
  const bool compact = tokens && a.layout == "compact";
  std::string group_values, group_tokens, group_bounds;
  std::vector<uint32_t> bounds{0};
  std::string group_key;
  auto write_group = [&]() -> Status {
    if (bounds.size() == 1) return Status::OK();
    group_tokens = EncodeNpy(DType::kInt32, {static_cast<int64_t>(bounds.back())}, group_values);
    group_bounds = EncodeNpy(DType::kUint32, {static_cast<int64_t>(bounds.size())},
                             std::string_view(reinterpret_cast<const char*>(bounds.data()),
                                              bounds.size() * 4));
    Sample g;
    g.key = group_key;
    g.fields.resize(2);
    g.fields[0].name = "tokens.npy";
    g.fields[0].data = group_tokens;
    g.fields[1].name = "doc_offsets.npy";
    g.fields[1].data = group_bounds;
    group_values.clear();
    bounds.assign(1, 0);
    return w->Write(g);
  };
  for (int64_t i = 0; i < a.make_count; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    Sample s;
    char key[32];
    std::snprintf(key, sizeof(key), "%09lld", static_cast<long long>(i));
    s.key = key;
    Field f;
    if (tokens) {
      // Lengths uniform in [mean/2, 3*mean/2].
      int64_t n = a.mean_tokens / 2 + static_cast<int64_t>(x % static_cast<uint64_t>(a.mean_tokens + 1));
      t.resize(static_cast<size_t>(n));
      for (int64_t k = 0; k < n; ++k) t[static_cast<size_t>(k)] = static_cast<int32_t>((x >> 20) + k) & 0xffff;
      if (compact) {
        if (bounds.size() == 1) group_key = key;
        group_values.append(reinterpret_cast<const char*>(t.data()), t.size() * 4);
        bounds.push_back(bounds.back() + static_cast<uint32_t>(n));
        if (group_values.size() >= (size_t{128} << 10)) SHARDSTREAM_RETURN_IF_ERROR(write_group());
        continue;
      }
      payload = EncodeNpy(DType::kInt32, {n},
                          std::string_view(reinterpret_cast<const char*>(t.data()), t.size() * 4));
      f.name = "tokens.npy";
    } else {
      payload.assign(static_cast<size_t>(a.sample_bytes), static_cast<char>(x));
      f.name = "bin";
    }
    f.data = payload;
    s.fields.push_back(f);
    if (!tokens) {
      Field c;
      c.name = "cls";
      std::string label = std::to_string(x % 1000);
      c.data = label;
      s.fields.push_back(c);
      SHARDSTREAM_RETURN_IF_ERROR(w->Write(s));
      continue;
    }
    SHARDSTREAM_RETURN_IF_ERROR(w->Write(s));
  }
  SHARDSTREAM_RETURN_IF_ERROR(write_group());
  return w->Close();
}

// `threads` threads reading every file in `chunk` reads, thread t the t-th
// of `threads` equal parts of each (so every thread reads the same number
// of bytes whatever the files' count and sizes), handing each read to
// consume(t, data, n). A file of unknown size (-1) is read whole by one
// thread. Returns the seconds it took, or the first read error.
//
// The buffer is in huge pages where the kernel allows (madvise): in 4 KiB
// pages its place in the CPU caches (physically indexed) depends on which
// pages the allocator hands out, and the plain read ran at 14 or at 20 GB/s
// on the same files from one process to the next.
struct HugeBuffer {
  explicit HugeBuffer(size_t n) : n_(n) {
    const size_t huge = size_t{2} << 20, size = (n + huge - 1) / huge * huge;
    p_ = static_cast<char*>(std::aligned_alloc(huge, size));
    if (p_ == nullptr) throw std::bad_alloc();
    (void)::madvise(p_, size, MADV_HUGEPAGE);
    std::memset(p_, 0, n);
  }
  ~HugeBuffer() { std::free(p_); }
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  char* data() { return p_; }
  size_t size() const { return n_; }

 private:
  char* p_;
  size_t n_;
};

template <typename Consume>
Result<double> ReadOnThreads(const std::vector<std::string>& urls,
                             const std::vector<int64_t>& sizes, int threads, size_t chunk,
                             Consume consume) {
  const auto t0 = Clock::now();
  std::vector<Status> failed(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      HugeBuffer b(chunk);
      for (size_t i = 0; i < urls.size(); ++i) {
        uint64_t begin = 0, left = UINT64_MAX;
        if (sizes[i] >= 0) {
          const uint64_t size = static_cast<uint64_t>(sizes[i]), n = static_cast<uint64_t>(threads);
          begin = size * static_cast<uint64_t>(t) / n;
          left = size * static_cast<uint64_t>(t + 1) / n - begin;
        } else if (i % static_cast<size_t>(threads) != static_cast<size_t>(t)) {
          continue;
        }
        auto in = DefaultSource()->OpenInputStream(urls[i], begin);
        if (!in.ok()) { failed[static_cast<size_t>(t)] = in.status(); return; }
        while (left > 0) {
          auto n = (*in)->Read(static_cast<size_t>(std::min<uint64_t>(b.size(), left)), b.data());
          if (!n.ok()) { failed[static_cast<size_t>(t)] = n.status(); return; }
          if (*n == 0) break;
          left -= std::min<uint64_t>(left, *n);
          consume(t, b.data(), *n);
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  for (const Status& s : failed) SHARDSTREAM_RETURN_IF_ERROR(s);
  return Since(t0);
}

// The bytes of an open file that are in the page cache (mincore).
Result<uint64_t> ResidentBytes(int fd, const std::string& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, "stat " + path);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return uint64_t{0};
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::FromErrno(errno, "mmap " + path);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  const int err = ::mincore(p, size, in.data()) == 0 ? 0 : errno;
  ::munmap(p, size);
  if (err != 0) return Status::FromErrno(err, "mincore " + path);
  uint64_t resident = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] & 1) resident += std::min(page, size - i * page);
  return resident;
}

// --reread, first half: drops the files' pages from the page cache (the
// caller reads them back in). How pages entered the cache matters: pages read
// in sequentially are kept in large folios (up to 2 MiB), which map and copy
// faster than the small ones that pages paged out and faulted back in come
// in, so the same files measure differently after they have aged in the
// cache. Returns the bytes resident before and right after the drop: a file
// system that ignores the request (tmpfs) drops nothing.
Result<std::pair<uint64_t, uint64_t>> DropPages(const std::vector<std::string>& urls) {
  struct Fd {
    int fd;
    ~Fd() { if (fd >= 0) ::close(fd); }
  };
  std::pair<uint64_t, uint64_t> resident{0, 0};
  for (const std::string& u : urls) {
    const std::string path = LocalPath(u);
    if (path.empty()) return Status::Config("--reread needs local shards, not " + RedactUrl(u));
    Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (f.fd < 0) return Status::FromErrno(errno, "open " + path);
    SHARDSTREAM_ASSIGN_OR_RETURN(uint64_t before, ResidentBytes(f.fd, path));
    const int err = ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
    if (err != 0) return Status::FromErrno(err, "posix_fadvise " + path);
    SHARDSTREAM_ASSIGN_OR_RETURN(uint64_t after, ResidentBytes(f.fd, path));
    resident.first += before;
    resident.second += after;
  }
  return resident;
}

// The plain read, the bandwidth ceiling: as many threads as the loader has
// readers (the same cores). *bytes receives what was read.
Result<double> PlainReadSeconds(const std::vector<std::string>& urls,
                                const std::vector<int64_t>& sizes, int threads, size_t chunk,
                                uint64_t* bytes) {
  std::atomic<uint64_t> read{0};
  auto seconds = ReadOnThreads(urls, sizes, threads, chunk,
                               [&](int, const char*, size_t n) { read += n; });
  *bytes = read.load();
  return seconds;
}

// The bare tar reader on one thread: samples only, no copy. *samples
// receives how many.
Result<double> TarReaderSeconds(const std::vector<std::string>& urls, size_t chunk,
                                uint64_t* samples) {
  const auto t0 = Clock::now();
  TarReaderOptions to;
  to.chunk_size = chunk;
  Sample s;
  *samples = 0;
  for (const std::string& u : urls) {
    SHARDSTREAM_ASSIGN_OR_RETURN(auto r, TarReader::Open(u, to));
    while (true) {
      SHARDSTREAM_ASSIGN_OR_RETURN(bool more, r->Next(&s));
      if (!more) break;
      ++*samples;
    }
  }
  return Since(t0);
}

// The least memory work token batches of these files need, with no parsing
// and no pipeline: `threads` threads each read their files in `chunk` reads
// and write every 4 bytes read as one token into [batch, seq_len] slots
// (three per thread, reused), plus the doc_ids and positions the loader
// writes when `metadata`. An upper bound for any loader on this machine:
// it shows how much of the plain read the memory system leaves for batches.
Result<double> IdealPackSeconds(const std::vector<std::string>& urls,
                                const std::vector<int64_t>& sizes, int threads, size_t chunk,
                                int64_t batch, int64_t seq_len, bool metadata) {
  const size_t slot = static_cast<size_t>(batch * seq_len);
  struct Lane {
    std::vector<int32_t> tok, doc, pos;  // three slots each, touched before timing
    size_t at = 0;                       // next token in the three slots
    int32_t doc_id = 0;
  };
  std::vector<Lane> lanes(static_cast<size_t>(threads));
  for (Lane& l : lanes) {
    l.tok.assign(3 * slot, 0);
    if (metadata) l.doc.assign(3 * slot, 0), l.pos.assign(3 * slot, 0);
  }
  return ReadOnThreads(urls, sizes, threads, chunk, [&](int t, const char* data, size_t n) {
    Lane& l = lanes[static_cast<size_t>(t)];
    // In documents of 1024 tokens, as the loader places them.
    for (size_t done = 0, total = n / 4; done < total;) {
      const size_t k = std::min<size_t>({total - done, 1024, 3 * slot - l.at});
      std::memcpy(l.tok.data() + l.at, data + done * 4, k * 4);
      if (metadata) {
        internal::FillSeq(l.doc.data() + l.at, l.doc_id++, 0, k);
        internal::FillSeq(l.pos.data() + l.at, 0, 1, k);
      }
      done += k;
      l.at = (l.at + k) % (3 * slot);
    }
  });
}

// Each shard's token documents (--shuffle's limit): where their values lie,
// from the shards' version 2 sample indexes, read before any clock starts
// (16 bytes a document, kept for the run).
struct TokenDocs {
  struct Doc {
    uint64_t at = 0, bytes = 0;
  };
  std::vector<std::vector<Doc>> per_file;
  std::vector<uint64_t> ends;  // per file: the end of its last document's values
  size_t value_bytes = 0;
  uint64_t documents = 0;
};

// `index_urls[i]`: where shard i's index is (its own url; through a shard
// cache the cached file, `map_urls[i]`, has none beside it).
Result<TokenDocs> ReadTokenDocs(const std::vector<std::string>& index_urls,
                                const std::vector<std::string>& map_urls,
                                const std::string& field) {
  TokenDocs d;
  for (size_t i = 0; i < index_urls.size(); ++i) {
    const std::string& u = index_urls[i];
    if (LocalPath(map_urls[i]).empty())
      return Status::Config("the shuffle's limit maps local shards, and " +
                            RedactUrl(map_urls[i]) + " is not one");
    SHARDSTREAM_ASSIGN_OR_RETURN(SampleIndex index, ReadSampleIndex(u));
    if (index.compressed)
      return Status::Config("the shuffle's limit needs uncompressed shards, and " + RedactUrl(u) +
                            " is compressed");
    if (!index.samples.empty() && index.fields.empty())
      return Status::Config("the shuffle's limit needs version 2 sample indexes "
                            "(`shardstream index`), and " + RedactUrl(u) + "'s is version 1");
    std::vector<TokenDocs::Doc>& docs = d.per_file.emplace_back();
    uint64_t& end = d.ends.emplace_back(0);
    for (const SampleIndexEntry& e : index.samples)
      for (uint32_t f = 0; f < e.nfields; ++f) {
        const SampleIndexField& x = index.fields[e.first_field + f];
        if (x.name != field || x.ndim != 1) continue;
        const size_t vb = DTypeSize(x.dtype);
        if (d.value_bytes != 0 && vb != d.value_bytes)
          return Status::Config("the shuffle's limit needs one dtype for every document, and " +
                                RedactUrl(u) + "'s sample '" + e.key + "' has another");
        d.value_bytes = vb;
        docs.push_back(TokenDocs::Doc{x.payload, x.count * vb});
        end = std::max(end, x.payload + x.count * vb);
        ++d.documents;
      }
  }
  if (d.documents == 0)
    return Status::Config("the shuffle's limit found no 1-D " + field + " array in the shards' "
                          "indexes");
  return d;
}

// The least memory work shuffled token batches need, with no loader: every
// document's values copied from its mapped shard (MapView, as the loader's
// shuffled path reads) into [batch, seq_len] slots (three per thread,
// reused), in the order a `shuffle`-document buffer lets them out (the
// loader's ShuffleBuffer), or in file order with shuffle <= 1; plus the
// doc_ids and positions when `metadata`. Thread t takes the t-th of
// `threads` equal parts of every file's documents (as the plain read splits
// the bytes), and draws from `open` files at a time, one document from each
// in turn, as the loader's lanes feed its buffer. The mappings are made
// within the clock, as the loader makes them every epoch. The two orders
// side by side say what the shuffle costs the memory system alone:
// shuffled documents lie apart, and every one of them starts with a wait on
// memory that a copy in file order does not have.
Result<double> MappedPackSeconds(const std::vector<std::string>& urls, const TokenDocs& docs,
                                 int threads, int open_files, int64_t batch, int64_t seq_len,
                                 int64_t shuffle, bool metadata, uint64_t* copied) {
  const size_t slot = static_cast<size_t>(batch * seq_len);
  const size_t vb = docs.value_bytes;
  const size_t nt = static_cast<size_t>(threads);
  std::vector<Status> failed(nt);
  struct alignas(64) Lane {
    std::vector<char> tok;  // three slots, touched before timing
    std::vector<int32_t> doc, pos;
    uint64_t bytes = 0;
  };
  std::vector<Lane> lanes(nt);
  for (Lane& l : lanes) {
    l.tok.assign(3 * slot * vb, 0);
    if (metadata) l.doc.assign(3 * slot, 0), l.pos.assign(3 * slot, 0);
  }
  struct Item {
    const char* p = nullptr;
    uint64_t bytes = 0;
    size_t file = 0;
  };
  const auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (size_t t = 0; t < nt; ++t) {
    pool.emplace_back([&, t] {
      Lane& l = lanes[t];
      char* const tok = l.tok.data();
      size_t at = 0;  // next token in the three slots
      int32_t doc_id = 0;
      uint64_t bytes = 0;
      // A file's mapping goes once its last document here is copied, so
      // the pages it touched leave this process.
      struct File {
        std::unique_ptr<RandomAccessFile> file;
        const char* data = nullptr;
        size_t next = 0, end = 0;  // its documents of this thread's part
        size_t left = 0;           // not yet copied
      };
      std::vector<File> files(urls.size());
      auto copy = [&](const Item& it) {
        const size_t total = static_cast<size_t>(it.bytes / vb);
        for (size_t done = 0; done < total;) {
          const size_t k = std::min(total - done, 3 * slot - at);
          std::memcpy(tok + at * vb, it.p + done * vb, k * vb);
          if (metadata) {
            internal::FillSeq(l.doc.data() + at, doc_id, 0, k);
            internal::FillSeq(l.pos.data() + at, static_cast<int32_t>(done), 1, k);
          }
          done += k;
          at = (at + k) % (3 * slot);
        }
        ++doc_id;
        bytes += it.bytes;
        if (--files[it.file].left == 0) files[it.file].file.reset();  // unmapped
      };
      auto open = [&](size_t i) -> Status {
        File& f = files[i];
        const size_t n = docs.per_file[i].size();
        f.next = n * t / nt;
        f.end = n * (t + 1) / nt;
        f.left = f.end - f.next;
        if (f.left == 0) return Status::OK();
        SHARDSTREAM_ASSIGN_OR_RETURN(f.file, DefaultSource()->OpenRandomAccess(urls[i]));
        auto v = f.file->MapView();
        if (!v.ok()) return v.status().WithContext("mapping " + RedactUrl(urls[i]));
        if (v->size < docs.ends[i])  // one compare, not one per document in the clock
          return Status::Corrupt("shard " + RedactUrl(urls[i]) + " is shorter than its sample "
                                 "index says (" + std::to_string(v->size) + " bytes, documents "
                                 "up to byte " + std::to_string(docs.ends[i]) + ")");
        f.data = v->data;
        return Status::OK();
      };
      internal::ShuffleBuffer<Item> buffer(static_cast<size_t>(std::max<int64_t>(shuffle, 1)),
                                           static_cast<size_t>(std::max<int64_t>(shuffle, 1)), 0,
                                           t);
      std::vector<size_t> active;  // files drawn from, in turn
      size_t next_file = 0, turn = 0;
      Item in, out;
      while (true) {
        while (active.size() < static_cast<size_t>(std::max(open_files, 1)) &&
               next_file < urls.size()) {
          Status s = open(next_file);
          if (!s.ok()) {
            failed[t] = std::move(s);
            return;
          }
          if (files[next_file].left > 0) active.push_back(next_file);
          ++next_file;
        }
        if (active.empty()) break;
        turn %= active.size();
        File& f = files[active[turn]];
        const TokenDocs::Doc& d = docs.per_file[active[turn]][f.next];
        in = Item{f.data + d.at, d.bytes, active[turn]};
        if (++f.next == f.end) {
          active.erase(active.begin() + static_cast<std::ptrdiff_t>(turn));
        } else {
          ++turn;
        }
        if (buffer.Put(&in, &out)) copy(out);
      }
      while (buffer.Drain(&out)) copy(out);
      l.bytes = bytes;
    });
  }
  for (auto& th : pool) th.join();
  const double seconds = Since(t0);
  for (const Status& s : failed) SHARDSTREAM_RETURN_IF_ERROR(s);
  *copied = 0;
  for (const Lane& l : lanes) *copied += l.bytes;
  return seconds;
}

// The round trip of one cache line between two threads pinned to the first
// two CPUs this process may use, in ns (0, not measured, with fewer than two
// CPUs or when one of them was not free for a second). A VM's
// host may place its vCPUs on cores that share a cache or far apart, and
// change that from minute to minute; the loader hands every sample from a
// reader to the assembler, so it slows down far more than a plain read
// when they are far. Measured in every run, so a run's figures can be told
// apart by it.
double CrossCoreRoundTripNs() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return 0;
  int cpus[2], found = 0;
  for (int c = 0; c < CPU_SETSIZE && found < 2; ++c)
    if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  if (found < 2) return 0;
  constexpr int kTrips = 20000;
  alignas(64) std::atomic<int> flag{0};
  std::atomic<bool> give_up{false};
  double ns = 0;
  auto pin = [](int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
  };
  // Waits for the flag to reach v; false if the other side gave up.
  auto await = [&](int v) {
    for (uint32_t spins = 0; flag.load(std::memory_order_acquire) != v; ++spins)
      if ((spins & 0xffff) == 0 && give_up.load(std::memory_order_relaxed)) return false;
    return true;
  };
  std::thread echo([&] {
    pin(cpus[1]);
    for (int i = 0; i < kTrips; ++i) {
      if (!await(2 * i + 1)) return;
      flag.store(2 * i + 2, std::memory_order_release);
    }
  });
  std::thread ping([&] {
    pin(cpus[0]);
    const auto t0 = Clock::now();
    for (int i = 0; i < kTrips; ++i) {
      flag.store(2 * i + 1, std::memory_order_release);
      for (uint32_t spins = 1; flag.load(std::memory_order_acquire) != 2 * i + 2; ++spins) {
        // The other CPU may not be ours to use (taken, throttled): give up
        // after a second rather than spin on.
        if ((spins & 0xfff) == 0 && Since(t0) > 1.0) {
          give_up = true;
          return;
        }
      }
    }
    ns = Since(t0) / kTrips * 1e9;
  });
  ping.join();
  echo.join();
  return ns;
}

int Run(const Args& a) {
  if (!a.make_tokens.empty() || !a.make_samples.empty()) {
    Status s = MakeData(a);
    if (!s.ok()) {
      std::cerr << "bench-loader: " << s << "\n";
      return 1;
    }
    if (a.manifest.empty()) return 0;
  }
  auto manifest = ResolveDataset({a.manifest});
  auto chunk = ParseByteSize(a.chunk_size);
  if (!manifest.ok() || !chunk.ok()) {
    std::cerr << "bench-loader: " << (manifest.ok() ? chunk.status() : manifest.status()) << "\n";
    return 1;
  }
  LoaderOptions o;
  o.manifest = a.manifest;
  o.batch_size = a.batch_size;
  o.shuffle_buffer = a.shuffle;
  o.prefetch = a.prefetch;
  o.reader_threads = a.threads;
  o.open_shards = a.open_shards;
  o.shard_queue = a.shard_queue;
  o.read_chunk = static_cast<size_t>(*chunk);
  if (!a.tokens_field.empty()) {
    o.tokens.field = a.tokens_field;
    o.tokens.seq_len = a.seq_len;
    o.tokens.document_metadata = !a.no_metadata;
    o.direct_reads = !a.no_direct;
    if (!a.mapped_keep.empty()) {
      auto keep = ParseByteSize(a.mapped_keep);
      if (!keep.ok()) {
        std::cerr << "bench-loader: --mapped-keep: " << keep.status() << "\n";
        return 1;
      }
      o.mapped_keep_bytes = *keep;
    }
  } else {
    if (!a.image_field.empty()) {
      FieldSpec f;
      f.name = a.image_field;
      f.decode = FieldDecode::kImage;
      if (!ParseImageSize(a.image_size, &f.image.height, &f.image.width)) {
        std::cerr << "bench-loader: --image-size '" << a.image_size << "': expected N or HxW\n";
        return 2;
      }
      if (a.crop == "random_resized") f.image.crop = ImageCrop::kRandomResized;
      else if (a.crop == "center") f.image.crop = ImageCrop::kCenter;
      else if (a.crop == "none") f.image.crop = ImageCrop::kNone;
      else {
        std::cerr << "bench-loader: --crop '" << a.crop << "': expected random_resized, center or none\n";
        return 2;
      }
      f.image.flip = f.image.crop == ImageCrop::kRandomResized ? a.flip : 0;
      f.image.resize = a.resize;
      if (a.chw) f.image.layout = ImageLayout::kCHW;
      o.fields.push_back(f);
    }
    for (const std::string& f : a.fields) o.fields.push_back(FieldSpec{f});
  }
  uint64_t file_bytes = 0;
  std::vector<std::string> urls;
  std::vector<int64_t> sizes;
  for (const ShardEntry& e : manifest->shards) {
    urls.push_back(e.resolved.empty() ? e.url : e.resolved);
    sizes.push_back(e.size);
    file_bytes += static_cast<uint64_t>(std::max<int64_t>(e.size, 0));
  }
  std::vector<std::string> shard_urls = urls;  // through a cache, the indexes are theirs
  if (!a.cache_dir.empty()) {
    ShardCacheOptions co;
    co.dir = a.cache_dir;
    co.limit_bytes = std::max<uint64_t>(2 * file_bytes, uint64_t{1} << 30);
    auto cache = ShardCache::Create(co);
    if (!cache.ok()) {
      std::cerr << "bench-loader: " << cache.status() << "\n";
      return 1;
    }
    o.cache = std::shared_ptr<ShardCache>(std::move(*cache));
  }
  auto loader = Loader::Create(o);
  if (!loader.ok()) {
    std::cerr << "bench-loader: " << loader.status() << "\n";
    return 1;
  }
  if (o.cache != nullptr) {
    // An epoch fills the cache; the timed ones read its entries, and the
    // plain read and the tar reader read the same entry files (the shards
    // may be remote: the entries are their local copies).
    while (true) {
      auto b = (*loader)->next();
      if (!b.ok()) { std::cerr << "bench-loader: " << b.status() << "\n"; return 1; }
      if (b->empty()) break;
    }
    o.cache->WaitIdle();
    for (std::string& u : urls) u = a.cache_dir + "/" + CacheKey(u) + ".shard";
  }
  std::pair<uint64_t, uint64_t> resident{0, 0};
  if (a.reread) {
    // Read back one file after another, through the source, as `cat` would.
    auto r = DropPages(urls);
    Result<double> back = r.ok() ? ReadOnThreads(urls, sizes, 1, static_cast<size_t>(*chunk),
                                                 [](int, const char*, size_t) {})
                                 : r.status();
    if (!back.ok()) { std::cerr << "bench-loader: " << back.status() << "\n"; return 1; }
    resident = *r;
    if (resident.first > 0 && resident.second == resident.first)
      std::cerr << "bench-loader: --reread: the file system kept every page of the shards "
                   "(tmpfs does): the figures are on the pages as they were\n";
  }
  // With --shuffle, the shuffle's limit: the same documents copied from the
  // mapped shards in the buffer's order and in file order (MappedPackSeconds).
  TokenDocs token_docs;
  std::string limit_error;
  const bool limit = !a.loader_only && !a.tokens_field.empty() && a.shuffle > 1;
  if (limit) {
    auto d = ReadTokenDocs(shard_urls, urls, a.tokens_field);
    if (d.ok()) {
      token_docs = std::move(*d);
    } else {
      limit_error = d.status().ToString();
      std::cerr << "bench-loader: the shuffle's limit is not measured: " << limit_error << "\n";
    }
  }
  std::vector<double> plain_s, reader_s, loader_s, loader_cores, ideal_s, round_trip_ns;
  std::vector<double> mapped_s, shuffled_s;
  int64_t peak_rss = 0;  // of the loader's epochs
  bool peak_reset = true;  // false: the process's peak
  uint64_t limit_bytes = 0;
  double loader_total = 0;
  uint64_t batches = 0, samples = 0, tensor_bytes = 0, reader_samples = 0;
  for (int run = 0; run <= a.runs; ++run) {  // run 0 warms the page cache
    double plain = 0, reader = 0, ideal = 0;
    uint64_t rs = 0;
    if (!a.loader_only) {
      uint64_t read = 0;
      auto p = PlainReadSeconds(urls, sizes, a.threads, static_cast<size_t>(*chunk), &read);
      auto r = p.ok() ? TarReaderSeconds(urls, static_cast<size_t>(*chunk), &rs) : p;
      if (!r.ok()) { std::cerr << "bench-loader: " << r.status() << "\n"; return 1; }
      plain = *p;
      reader = *r;
      if (file_bytes == 0) file_bytes = read;
      if (!a.tokens_field.empty()) {
        auto i = IdealPackSeconds(urls, sizes, a.threads, static_cast<size_t>(*chunk), a.batch_size,
                                  a.seq_len, !a.no_metadata);
        if (!i.ok()) { std::cerr << "bench-loader: " << i.status() << "\n"; return 1; }
        ideal = *i;
      }
      if (limit && limit_error.empty()) {
        // A failure here leaves the limit out (said why), not the run.
        uint64_t in_order = 0, shuffled = 0;
        auto m = MappedPackSeconds(urls, token_docs, a.threads, a.open_shards, a.batch_size,
                                   a.seq_len, 1, !a.no_metadata, &in_order);
        auto sh = m.ok() ? MappedPackSeconds(urls, token_docs, a.threads, a.open_shards,
                                             a.batch_size, a.seq_len, a.shuffle, !a.no_metadata,
                                             &shuffled)
                         : m;
        if (!sh.ok()) {
          limit_error = sh.status().ToString();
        } else if (in_order != shuffled) {
          limit_error = "the shuffled copy moved " + std::to_string(shuffled) + " bytes, the " +
                        "copy in file order " + std::to_string(in_order);
        } else if (run > 0) {
          mapped_s.push_back(*m);
          shuffled_s.push_back(*sh);
          limit_bytes = in_order;
        }
        if (!limit_error.empty()) {
          std::cerr << "bench-loader: the shuffle's limit is not measured: " << limit_error << "\n";
          mapped_s.clear();
          shuffled_s.clear();
        }
      }
    }
    (void)(*loader)->set_epoch(run);
    peak_reset = ResetPeakRss() && peak_reset;
    const double cpu0 = CpuSeconds();
    const auto t0 = Clock::now();
    uint64_t nb = 0, ns = 0, tb = 0;
    while (true) {
      auto b = (*loader)->next();
      if (!b.ok()) { std::cerr << "bench-loader: " << b.status() << "\n"; return 1; }
      if (b->empty()) break;
      ++nb;
      ns += static_cast<uint64_t>(b->num_samples());
      tb += b->nbytes();
    }
    double lt = Since(t0);
    const double cpu = CpuSeconds() - cpu0;
    peak_rss = std::max(peak_rss, PeakRssBytes());
    loader_total += lt;
    if (run == 0) continue;
    // 0: not measured, left out of the median.
    if (const double rt = CrossCoreRoundTripNs(); rt > 0) round_trip_ns.push_back(rt);
    loader_cores.push_back(cpu / lt);
    ideal_s.push_back(ideal);
    plain_s.push_back(plain);
    reader_s.push_back(reader);
    loader_s.push_back(lt);
    batches = nb; samples = ns; tensor_bytes = tb; reader_samples = rs;
  }
  const double plain = Median(plain_s), reader = Median(reader_s), lt = Median(loader_s);

  const double plain_gbs = plain > 0 ? static_cast<double>(file_bytes) / plain / 1e9 : 0;
  const double loader_gbs = static_cast<double>(file_bytes) / lt / 1e9;
  const double ideal = Median(ideal_s);
  const double ideal_gbs = ideal > 0 ? static_cast<double>(file_bytes) / ideal / 1e9 : 0;
  // Also the share of the loader's time (all epochs) its assembler spent
  // waiting for the readers, and for this loop.
  const LoaderStats st = (*loader)->stats();
  nlohmann::json j = {
      {"manifest", a.manifest},
      {"shards", urls.size()},
      {"file_bytes", file_bytes},
      {"runs", a.runs},
      {"batch_size", a.batch_size},
      {"seq_len", a.tokens_field.empty() ? 0 : a.seq_len},
      {"reader_threads", a.threads},
      {"open_shards", a.open_shards},
      {"shard_queue", a.shard_queue},
      {"shuffle_buffer", a.shuffle},
      {"document_metadata", !a.tokens_field.empty() && !a.no_metadata},
      {"direct_reads", !a.tokens_field.empty() && !a.no_direct},
      {"mapped_keep_bytes", o.mapped_keep_bytes},
      {"batches_per_s", static_cast<double>(batches) / lt},
      {"samples_per_s", static_cast<double>(samples) / lt},
      {"image_field", a.image_field},
      {"loader_file_gb_per_s", loader_gbs},
      {"loader_tensor_gb_per_s", static_cast<double>(tensor_bytes) / lt / 1e9},
      {"wait_p50_us", st.wait_p50_us},
      {"wait_p99_us", st.wait_p99_us},
      {"loader_cpu_cores", Median(loader_cores)},
      {"assembler_waiting_for_readers", st.reader_wait_seconds / loader_total},
      {"assembler_waiting_for_caller", st.caller_wait_seconds / loader_total},
      {"memory_kind", HostMemoryKindName(st.memory_kind)},
      {"direct_samples", st.direct_samples},  // all epochs, warm-up included
      {"cross_core_round_trip_ns", Median(round_trip_ns)},
      {"cross_core_round_trip_ns_max",
       round_trip_ns.empty() ? 0 : *std::max_element(round_trip_ns.begin(), round_trip_ns.end())},
      {"peak_rss_bytes", peak_rss},
      {"peak_rss_of", peak_reset ? "loader epochs" : "process"},
  };
  j["page_cache"] = a.reread ? "reread" : "as found";
  if (a.reread) {
    j["resident_bytes_before_drop"] = resident.first;
    j["resident_bytes_after_drop"] = resident.second;
  }
  if (o.cache != nullptr) {
    j["cache_dir"] = a.cache_dir;
    j["cache_hit_rate"] = st.cache_hit_rate;
    j["read_bytes"] = st.read_bytes;
  }
  const double reader_sps = reader > 0 ? static_cast<double>(reader_samples) / reader : 0;
  if (!a.loader_only) {
    j["plain_read_gb_per_s"] = plain_gbs;
    j["plain_read_threads"] = a.threads;
    j["ratio_to_plain_read"] = loader_gbs / plain_gbs;
    j["tar_reader_samples_per_s"] = reader_sps;
    j["ratio_to_tar_reader_samples"] = (static_cast<double>(samples) / lt) / reader_sps;
    if (ideal_gbs > 0) {
      j["ideal_pack_gb_per_s"] = ideal_gbs;
      j["ratio_ideal_pack_to_plain_read"] = ideal_gbs / plain_gbs;
    }
    if (!limit_error.empty()) j["shuffle_limit_error"] = limit_error;
    if (!shuffled_s.empty()) {
      const double in_order = static_cast<double>(file_bytes) / Median(mapped_s) / 1e9;
      const double shuffled = static_cast<double>(file_bytes) / Median(shuffled_s) / 1e9;
      j["ideal_mapped_pack_gb_per_s"] = in_order;
      j["ideal_shuffled_pack_gb_per_s"] = shuffled;
      j["ideal_shuffle_cost"] = 1 - shuffled / in_order;
      j["ratio_ideal_shuffled_pack_to_plain_read"] = shuffled / plain_gbs;
      j["ratio_to_ideal_shuffled_pack"] = loader_gbs / shuffled;
      j["shuffle_limit_documents"] = token_docs.documents;
      j["shuffle_limit_bytes"] = limit_bytes;
    }
  }
  if (a.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << "loader:      " << j["batches_per_s"].get<double>() << " batches/s, "
            << j["samples_per_s"].get<double>() << " samples/s, " << loader_gbs
            << " GB/s of shard files\n";
  if (!a.loader_only) {
    std::cout << "plain read:  " << plain_gbs << " GB/s  (loader/plain " << loader_gbs / plain_gbs
              << ")\n";
    if (ideal_gbs > 0)
      std::cout << "ideal pack:  " << ideal_gbs << " GB/s  (ideal/plain " << ideal_gbs / plain_gbs
                << "; read + copy + metadata, no parsing)\n";
    if (j.contains("ideal_shuffled_pack_gb_per_s"))
      std::cout << "shuffle limit: " << j["ideal_shuffled_pack_gb_per_s"].get<double>()
                << " GB/s copying the documents from the mapped shards in a " << a.shuffle
                << "-document buffer's order, " << j["ideal_mapped_pack_gb_per_s"].get<double>()
                << " in file order (the shuffle costs the memory system alone "
                << 100 * j["ideal_shuffle_cost"].get<double>() << "%; loader/limit "
                << j["ratio_to_ideal_shuffled_pack"].get<double>() << ")\n";
    std::cout << "tar reader:  " << reader_sps << " samples/s (loader/reader "
              << j["ratio_to_tar_reader_samples"].get<double>() << ")\n";
  }
  std::cout << "assembler waited: " << 100 * j["assembler_waiting_for_readers"].get<double>()
            << "% of the time for readers, " << 100 * j["assembler_waiting_for_caller"].get<double>()
            << "% for this loop; " << j["loader_cpu_cores"].get<double>() << " cores busy"
            << "\ncross-core:  " << j["cross_core_round_trip_ns"].get<double>()
            << " ns round trip between two CPUs (median of the runs; max "
            << j["cross_core_round_trip_ns_max"].get<double>() << ")"
            << "\npeak RSS:    " << HumanBytes(static_cast<uint64_t>(peak_rss))
            << (peak_reset ? " (the loader's epochs)" : " (the process)") << "\n";
  if (a.reread) {
    const uint64_t dropped = resident.first - std::min(resident.first, resident.second);
    std::cout << "page cache:  " << HumanBytes(dropped)
              << " of the shards' pages dropped and read back in before the warm-up epoch, "
              << HumanBytes(resident.second) << " kept\n";
  }
  return 0;
}

}  // namespace

SHARDSTREAM_COMMAND(bench_loader, [](CLI::App& app) {
  auto a = std::make_shared<Args>();
  auto* sub = app.add_subcommand(
      "bench-loader",
      "Time the Loader over a data set against a plain read and the bare tar reader, same run");
  sub->add_option("MANIFEST", a->manifest, "Manifest or brace pattern of the data set");
  sub->add_option("--make-tokens", a->make_tokens, "First write a token data set (tokens.npy) here");
  sub->add_option("--make-samples", a->make_samples, "First write a data set of fixed-size samples (bin, cls) here");
  sub->add_option("--count", a->make_count, "Documents or samples to write");
  sub->add_option("--mean-tokens", a->mean_tokens, "Mean document length")->capture_default_str();
  sub->add_option("--sample-bytes", a->sample_bytes, "Bytes of each sample's bin field")->capture_default_str();
  sub->add_option("--shard-mib", a->shard_mib, "Shard size when writing")->capture_default_str();
  sub->add_option("--layout", a->layout,
                  "--make-tokens: one sample per document, or compact document groups "
                  "(as shardstream.convert writes by default)")
      ->check(CLI::IsMember({"documents", "compact"}))
      ->capture_default_str();
  sub->add_option("--tokens", a->tokens_field, "Token field: pack [batch, seq_len] batches");
  sub->add_option("--fields", a->fields, "Fields to batch (without --tokens)")->delimiter(',');
  sub->add_option("--batch-size", a->batch_size, "Rows per batch")->capture_default_str();
  sub->add_option("--seq-len", a->seq_len, "Token row length")->capture_default_str();
  sub->add_option("--threads", a->threads, "Reader threads")->capture_default_str();
  sub->add_option("--open-shards", a->open_shards, "Shards open at once")->capture_default_str();
  sub->add_option("--shard-queue", a->shard_queue, "Samples buffered per open shard")->capture_default_str();
  sub->add_option("--shuffle", a->shuffle, "Shuffle buffer (0: none)")->capture_default_str();
  sub->add_option("--prefetch", a->prefetch, "Batches ready ahead")->capture_default_str();
  sub->add_option("--chunk-size", a->chunk_size, "Read size")->capture_default_str();
  sub->add_option("--runs", a->runs, "Timed epochs (after one warm-up); medians")->capture_default_str();
  sub->add_flag("--json", a->json, "Print JSON");
  sub->add_option("--image-field", a->image_field,
                  "Decode this field as an image (JPEG/PNG/WebP) in the reader threads");
  sub->add_option("--image-size", a->image_size, "Image output size: N or HxW")->capture_default_str();
  sub->add_option("--crop", a->crop, "random_resized, center or none")->capture_default_str();
  sub->add_option("--flip", a->flip, "Flip probability (random_resized)")->capture_default_str();
  sub->add_option("--resize", a->resize, "Shorter side before a center crop (0: the crop's)");
  sub->add_flag("--chw", a->chw, "Images as [3, H, W] instead of [H, W, 3]");
  sub->add_flag("--no-document-metadata", a->no_metadata, "Token batches without doc_ids/positions");
  sub->add_flag("--no-direct-reads", a->no_direct,
                "Token batches: read through read buffers (two copies), not straight into the batch");
  sub->add_option("--mapped-keep", a->mapped_keep,
                  "Token batches with --shuffle: bytes of shards kept mapped across epochs "
                  "(LoaderOptions::mapped_keep_bytes; 0: off; default the loader's)");
  sub->add_option("--cache-dir", a->cache_dir,
                  "Read through a shard cache in this directory (an epoch fills it first; the "
                  "plain read and the tar reader then read its entry files)");
  sub->add_flag("--reread", a->reread,
                "First drop the shards' pages from the page cache and read them back in, file by "
                "file, so that figures do not depend on how long the pages have been cached");
  sub->add_flag("--loader-only", a->loader_only,
                "Time only the loader (for profiling; no plain read, no ratios)");
  sub->callback([a] { ExitWith(Run(*a)); });
});

}  // namespace shardstream::tools
