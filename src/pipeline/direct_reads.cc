#include "pipeline/direct_reads.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shardstream/decode.h"
#include "shardstream/url.h"
#include "tar/index_records.h"
#include "tar/tar_format.h"

namespace shardstream::internal {
namespace {

// Bytes between two pieces read along (into a scratch buffer) rather than
// skipped with a second read: a read costs about as much as copying 8 KiB.
constexpr uint64_t kMaxGap = uint64_t{16} << 10;
// A job: about this many bytes, so the workers share a batch's reads.
constexpr uint64_t kJobBytes = uint64_t{512} << 10;
constexpr size_t kMaxIov = 1024;  // IOV_MAX on Linux
constexpr uint64_t kMaxHeaders = 4096 + kTarBlock;
constexpr size_t kMaxPieceValues = size_t{1} << 30;

Status Mismatch(const DirectShard& s, uint64_t offset, int64_t sample, const std::string& what) {
  return Status(StatusCode::kCorrupt,
                "shard " + s.url + " does not match its sample index at byte " +
                    std::to_string(offset) + " (sample '" + std::string(s.key(sample)) +
                    "'): " + what + "; rebuild the index with `shardstream index`",
                s.url, static_cast<int64_t>(offset));
}

// Whether the ustar name (and prefix) of `h` spell `key`.`field` exactly,
// without building the string (this runs once per document).
bool NameIs(const char* h, std::string_view key, std::string_view field) {
  // The usual header first: no prefix, the whole name in the name field.
  const size_t want = key.size() + 1 + field.size();
  if (h[Ustar::kPrefix] == '\0' && want <= Ustar::kNameLen) {
    return std::memcmp(h, key.data(), key.size()) == 0 && h[key.size()] == '.' &&
           std::memcmp(h + key.size() + 1, field.data(), field.size()) == 0 &&
           (want == Ustar::kNameLen || h[want] == '\0');
  }
  std::string_view name = FieldString(h + Ustar::kName, Ustar::kNameLen);
  std::string_view prefix;
  if (std::memcmp(h + Ustar::kMagic, "ustar", 5) == 0)
    prefix = FieldString(h + Ustar::kPrefix, Ustar::kPrefixLen);
  const size_t have = prefix.empty() ? name.size() : prefix.size() + 1 + name.size();
  if (want != have) return false;
  // Walk "<prefix>/<name>" against "<key>.<field>".
  std::string_view path[3] = {prefix, prefix.empty() ? std::string_view() : "/", name};
  std::string_view expect[3] = {key, ".", field};
  size_t pi = 0, ei = 0;
  while (pi < 3 && ei < 3) {
    if (path[pi].empty()) {
      ++pi;
      continue;
    }
    if (expect[ei].empty()) {
      ++ei;
      continue;
    }
    const size_t n = std::min(path[pi].size(), expect[ei].size());
    if (path[pi].substr(0, n) != expect[ei].substr(0, n)) return false;
    path[pi].remove_prefix(n);
    expect[ei].remove_prefix(n);
  }
  return true;
}

// Whether the ustar size field holds `want`: the usual 11 octal digits
// and a NUL or space compared as they are, anything else parsed.
bool SizeIs(const char* field, uint64_t want) {
  char canon[12];
  uint64_t v = want;
  for (int i = 10; i >= 0; --i, v >>= 3) canon[i] = static_cast<char>('0' + (v & 7));
  if (v == 0 && std::memcmp(field, canon, 11) == 0 && (field[11] == '\0' || field[11] == ' '))
    return true;
  const auto got = ParseNumber(field, Ustar::kSizeLen);
  return got && *got == want;
}

// preadv until every byte of `iov` is in, or an error naming the shard.
Status ReadFully(const DirectShard& s, uint64_t offset, iovec* iov, size_t n) {
  while (n > 0) {
    const ssize_t got = ::preadv(s.fd, iov, static_cast<int>(n), static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kIo,
                    "reading shard " + s.url + " at byte " + std::to_string(offset) + ": " +
                        std::strerror(errno),
                    s.url, static_cast<int64_t>(offset));
    }
    if (got == 0)
      return Status(StatusCode::kCorrupt,
                    "shard " + s.url + " ends at byte " + std::to_string(offset) +
                        ", before what its sample index places there (the shard changed "
                        "after it was indexed?)",
                    s.url, static_cast<int64_t>(offset));
    offset += static_cast<uint64_t>(got);
    size_t left = static_cast<size_t>(got);
    while (n > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --n;
    }
    if (n > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::OK();
}

}  // namespace

DirectShard::~DirectShard() {
  if (recycler != nullptr) recycler->Give(this);
}

void DirectRecycler::Take(DirectShard* s) {
  s->recycler = shared_from_this();
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) return;
  Kept& k = free_.back();
  kept_bytes_ -= Bytes(k);
  s->docs.swap(k.docs);
  s->keys.swap(k.keys);
  free_.pop_back();
}

uint64_t DirectRecycler::idle_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return kept_bytes_;
}

void DirectRecycler::Give(DirectShard* s) {
  Kept k;
  k.docs.swap(s->docs);
  k.keys.swap(s->keys);
  k.docs.clear();
  k.keys.clear();
  std::lock_guard<std::mutex> lock(mu_);
  if (kept_bytes_ + Bytes(k) > max_bytes_) return;  // freed as k goes
  kept_bytes_ += Bytes(k);
  free_.push_back(std::move(k));
}

DirectRange::Mapping::~Mapping() {
  if (data != nullptr) ::munmap(data, size);
}

namespace {

// Closes a shard's file with the last chunk of records read from it.
struct FileCloser {
  explicit FileCloser(int f) : fd(f) {}
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;
  ~FileCloser() { ::close(fd); }
  int fd;
};

// Skips the samples before a range.
struct SkipSink {
  bool Sample(uint64_t, const IndexSampleRecord&) { return true; }
  void Field(uint64_t, uint32_t, const IndexFieldRecord&) {}
};

// Fills a chunk with the records of the samples it walks, up to `max_docs`
// of them and `max_keys` bytes of keys. A sample that cannot be read
// directly ends the chunk before it, with the reason in `why`.
class ChunkSink {
 public:
  ChunkSink(DirectShard* s, size_t max_docs, size_t max_keys)
      : s_(s), max_docs_(max_docs), max_keys_(max_keys) {}
  size_t count = 0;  // records filled
  std::string why;   // set: the sample after them cannot be read directly

  bool Sample(uint64_t i, const IndexSampleRecord& r) {
    if (!why.empty()) return false;
    if (count > 0 && !found_) return Missing(i - 1);
    if (count == max_docs_ || s_->keys.size() + r.key.size() > max_keys_ ||
        r.key.size() > UINT32_MAX) {
      if (count == 0)  // not even one: read the usual way
        why = "sample " + std::to_string(i) + "'s key takes more than " +
              std::to_string(max_keys_) + " bytes";
      return false;
    }
    DirectShard::Doc& d = s_->docs[count++];
    d.offset = r.offset;
    d.length = r.length;
    d.key_at = static_cast<uint32_t>(s_->keys.size());
    d.key_len = static_cast<uint32_t>(r.key.size());
    s_->keys.append(r.key.data(), r.key.size());
    found_ = false;
    return true;
  }

  void Field(uint64_t i, uint32_t, const IndexFieldRecord& f) {
    if (found_ || !why.empty() || f.name != s_->field) return;
    found_ = true;
    DirectShard::Doc& d = s_->docs[count - 1];
    if (f.ndim != 1 || f.dtype != s_->dtype || f.payload - f.offset + kTarBlock > kMaxHeaders ||
        f.offset < d.offset + kTarBlock) {
      Missing(i);
      return;
    }
    d.field = f.offset;
    d.payload = f.payload;
    d.count = f.count;
    d.header_hash = f.header_hash;
  }

  // After the walk stopped: whether the last sample walked had its field.
  void Done() {
    if (why.empty() && count > 0 && !found_) Missing(s_->first + count - 1);
  }

 private:
  // Sample i cannot be read directly: the chunk ends before it.
  bool Missing(uint64_t i) {
    why = "sample " + std::to_string(i) + " has no 1-D " + std::string(DTypeName(s_->dtype)) +
          " field '" + s_->field + "' with headers of at most 4 KiB by its index";
    count = static_cast<size_t>(static_cast<int64_t>(i) - s_->first);
    s_->keys.resize(count == 0 ? 0 : s_->docs[count - 1].key_at + s_->docs[count - 1].key_len);
    return false;
  }
  DirectShard* s_;
  size_t max_docs_, max_keys_;
  bool found_ = false;  // the current sample's field
};

}  // namespace

std::unique_ptr<DirectRange> DirectRange::Open(const std::string& url, const std::string& field,
                                               DType dtype, int64_t first, int64_t end,
                                               std::string* why) {
  const std::string path = LocalPath(url);
  if (path.empty()) {
    *why = "not a local file";
    return nullptr;
  }
  auto r = std::unique_ptr<DirectRange>(new DirectRange());
  const std::string index_path = IndexUrlFor(path);
  const int ifd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (ifd < 0) {
    *why = "no sample index " + index_path + " (" + std::strerror(errno) + ")";
    return nullptr;
  }
  struct stat st;
  bool ok = ::fstat(ifd, &st) == 0;
  if (ok && st.st_size > 0) {
    // Mapped, not read: walked once, straight from the page cache, and the
    // pages walked are let go as it goes (Next).
    r->map_.size = static_cast<size_t>(st.st_size);
    void* p = ::mmap(nullptr, r->map_.size, PROT_READ, MAP_PRIVATE, ifd, 0);
    ok = p != MAP_FAILED;
    r->map_.data = ok ? p : nullptr;
    if (ok) (void)::madvise(p, r->map_.size, MADV_SEQUENTIAL);
  }
  if (!ok) *why = "reading its sample index " + index_path + " failed (" + std::strerror(errno) + ")";
  ::close(ifd);
  if (!ok) return nullptr;
  std::string_view data(static_cast<const char*>(r->map_.data), r->map_.size);
  Status opened = r->walk_.Open(data, IndexUrlFor(url));
  if (!opened.ok()) {
    *why = opened.ToString();
    return nullptr;
  }
  const IndexHeader& h = r->walk_.header();
  const uint64_t last = end < 0 ? h.samples : static_cast<uint64_t>(end);
  if (h.compressed) {
    *why = "compressed";
  } else if (h.version < 2) {
    *why = "its index is version 1 (`shardstream index` rebuilds it)";
  } else if (first < 0 || static_cast<uint64_t>(first) > last || last > h.samples) {
    *why = "the index lists " + std::to_string(h.samples) + " samples, fewer than the plan";
  } else {
    why->clear();
  }
  if (!why->empty()) return nullptr;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = std::strerror(errno);
    return nullptr;
  }
  r->file_ = std::make_shared<FileCloser>(fd);
  r->fd_ = fd;
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != h.shard_size) {
    *why = "its index is stale";
    return nullptr;
  }
  SkipSink skip;
  Status skipped = r->walk_.Walk(&skip, static_cast<uint64_t>(first));
  if (!skipped.ok()) {
    *why = skipped.ToString();
    return nullptr;
  }
  // The checksum read every page: let them all go, so the mapping holds
  // only what the chunks walk (the walk maps back what it reads).
  (void)::madvise(r->map_.data, r->map_.size, MADV_DONTNEED);
  r->Release(r->walk_.position());
  r->url_ = RedactUrl(url);
  r->field_ = field;
  r->dtype_ = dtype;
  r->next_ = first;
  r->end_ = static_cast<int64_t>(last);
  return r;
}

void DirectRange::Release(size_t upto) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t done = upto / page * page;
  if (done > released_) {
    (void)::madvise(static_cast<char*>(map_.data) + released_, done - released_, MADV_DONTNEED);
    released_ = done;
  }
}

std::shared_ptr<const DirectShard> DirectRange::Next(uint64_t max_bytes,
                                                     const std::shared_ptr<DirectRecycler>& recycler,
                                                     std::string* why) {
  if (!why_.empty() || next() == end_) {
    *why = why_;
    return nullptr;
  }
  auto s = std::make_shared<DirectShard>();
  if (recycler != nullptr) recycler->Take(s.get());
  s->fd = fd_;
  s->file = file_;
  s->url = url_;
  s->field = field_;
  s->dtype = dtype_;
  s->first = next();
  // Records and keys share the bound, half each; sized once (built one by
  // one, each Doc cleared with a rep stos took half of the walk).
  const size_t max_docs = std::max<size_t>(1, max_bytes / 2 / sizeof(DirectShard::Doc));
  s->docs.resize(max_docs);
  s->keys.clear();
  ChunkSink sink(s.get(), max_docs, static_cast<size_t>(max_bytes / 2));
  Status walked = walk_.Walk(&sink, static_cast<uint64_t>(end_));
  if (!walked.ok()) {
    sink.why = walked.ToString();
    sink.count = 0;  // a broken index: none of this chunk either
  } else {
    sink.Done();
  }
  s->docs.resize(sink.count);
  if (!sink.why.empty()) why_ = sink.why;
  next_ = s->first + static_cast<int64_t>(sink.count);
  // The records walked are in the chunk now: their pages can go.
  Release(walk_.position());
  *why = why_;
  if (sink.count == 0) return nullptr;
  return s;
}

size_t DirectReads::Keep(const DirectDoc& doc) {
  // A batch draws from a few shards at a time.
  for (size_t i = keep_.size(); i > 0; --i)
    if (keep_[i - 1] == doc.shard) return i - 1;
  keep_.push_back(doc.shard);
  if (pieces_.size() < keep_.size()) pieces_.emplace_back();
  return keep_.size() - 1;
}

void DirectReads::AddCheck(const DirectDoc& doc) {
  const size_t slot = Keep(doc);
  const DirectShard::Doc& d = doc.doc();
  // In place: a Piece built aside is stored, then reloaded whole to copy it
  // (a stalled store forward, half of this function).
  Piece& p = pieces_[slot].emplace_back();
  p.offset = d.field - kTarBlock;
  p.len = static_cast<uint32_t>(d.payload - p.offset);  // at most kMaxHeaders (ChunkSink)
  p.head = p.len;
  p.doc = static_cast<uint32_t>(doc.sample - doc.shard->first);
  ++count_;
}

void DirectReads::AddValues(const DirectDoc& doc, uint64_t from, char* dst, size_t bytes) {
  if (bytes == 0) return;
  const size_t slot = Keep(doc);
  std::vector<Piece>& v = pieces_[slot];
  uint64_t offset = doc.doc().payload + from;
  const uint32_t sample = static_cast<uint32_t>(doc.sample - doc.shard->first);
  if (!v.empty()) {
    Piece& last = v.back();
    if (last.head > 0 && last.doc == sample && last.len == last.head &&
        last.offset + last.len == offset && bytes <= kMaxPieceValues) {
      last.len += static_cast<uint32_t>(bytes);  // right after its headers
      last.dst = dst;
      return;
    }
  }
  // (A piece's length is 32 bits: a longer run of values is cut.)
  while (bytes > 0) {
    const size_t n = std::min<size_t>(bytes, kMaxPieceValues);
    Piece& p = v.emplace_back();
    p.offset = offset;
    p.len = static_cast<uint32_t>(n);
    p.dst = dst;
    ++count_;
    offset += n;
    dst += n;
    bytes -= n;
  }
}

void DirectReads::Plan() {
  // By shard, each in file order. The pieces come in by shard already, and
  // a shard's are in file order unless a shuffle buffer mixed its
  // documents: most batches need no sort.
  auto by_offset = [](const Piece& a, const Piece& b) { return a.offset < b.offset; };
  jobs_.clear();
  for (size_t slot = 0; slot < keep_.size(); ++slot) {
    std::vector<Piece>& v = pieces_[slot];
    if (!std::is_sorted(v.begin(), v.end(), by_offset)) std::sort(v.begin(), v.end(), by_offset);
    uint64_t bytes = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i == 0 || bytes >= kJobBytes) {
        if (i > 0) jobs_.back().end = i;
        jobs_.push_back(Job{slot, i, v.size()});
        bytes = 0;
      }
      bytes += v[i].len;
    }
  }
}

Status DirectReads::RunJob(size_t j) {
  // Per worker, kept: a job allocates nothing. (One thread_local: each
  // costs a call to find from a shared library.)
  struct Scratch {
    std::vector<iovec> iov;
    std::vector<const char*> hdrs;
    std::unique_ptr<char[]> gap;
    // One read's headers, each with the tar padding before it: a document
    // takes two pieces of a read, not three, and the checks find its
    // headers in a buffer this core used for the read before, not in one
    // per batch. Room for the most one read can hold; only the pages used
    // are resident.
    std::unique_ptr<char[]> heads;
    Scratch() : gap(new char[kMaxGap]), heads(new char[kMaxIov * (kTarBlock + kMaxHeaders)]) {
      iov.reserve(kMaxIov);
      hdrs.reserve(kMaxIov);
    }
  };
  thread_local Scratch scratch;
  std::vector<iovec>& iov = scratch.iov;
  std::vector<const char*>& hdrs = scratch.hdrs;
  char* const gap = scratch.gap.get();
  char* const heads = scratch.heads.get();
  const Job& job = jobs_[j];
  const DirectShard& shard = *keep_[job.slot];
  const std::vector<Piece>& v = pieces_[job.slot];
  for (size_t i = job.first; i < job.end;) {
    // The pieces of one read: file order, gaps of at most kMaxGap.
    const uint64_t start = v[i].offset;
    uint64_t pos = start;
    char* at = heads;
    iov.clear();
    hdrs.clear();
    size_t k = i;
    for (; k < job.end; ++k) {
      const Piece& p = v[k];
      if (k > i && (p.offset < pos || p.offset - pos > kMaxGap || iov.size() + 3 > kMaxIov)) break;
      const uint64_t g = p.offset - pos;
      if (p.head > 0 && g <= kTarBlock) {
        iov.push_back(iovec{at, static_cast<size_t>(g + p.head)});
        hdrs.push_back(at + g);
        at += g + p.head;
      } else {
        if (g > 0) iov.push_back(iovec{gap, static_cast<size_t>(g)});
        if (p.head > 0) {
          iov.push_back(iovec{at, p.head});
          hdrs.push_back(at);
          at += p.head;
        }
      }
      if (p.len > p.head) iov.push_back(iovec{p.dst, static_cast<size_t>(p.len - p.head)});
      pos = p.offset + p.len;
    }
    SHARDSTREAM_RETURN_IF_ERROR(ReadFully(shard, start, iov.data(), iov.size()));
    size_t h = 0;
    for (size_t c = i; c < k; ++c)
      if (v[c].head > 0) SHARDSTREAM_RETURN_IF_ERROR(Check(shard, v[c], hdrs[h++]));
    i = k;
  }
  return Status::OK();
}

Status DirectReads::Check(const DirectShard& s, const Piece& p, const char* h) const {
  const int64_t sample = s.first + p.doc;
  const DirectShard::Doc& d = s.doc(sample);
  const std::string_view key = s.key(sample);
  const uint64_t size = d.payload - d.field + d.count * DTypeSize(s.dtype);
  // What placing the values relies on: a file of that size and name there.
  // (The header's checksum only tells a damaged header from another one.)
  const char type = h[Ustar::kTypeflag];
  const bool file = (type == '0' || type == '\0' || type == '7') && SizeIs(h + Ustar::kSize, size);
  // A long name lives in a pax or GNU header before this one; the index
  // was made from it, and the ustar name here may be cut short.
  const bool named = key.size() + 1 + s.field.size() > Ustar::kNameLen || NameIs(h, key, s.field);
  if (!file || !named) {
    if (!ChecksumMatches(h))
      return Mismatch(s, p.offset, sample, "no intact tar header there (bad checksum)");
    if (!file)
      return Mismatch(s, p.offset, sample,
                      "the tar header is not that of a " + std::to_string(size) + "-byte file");
    return Mismatch(s, p.offset, sample,
                    "the member there is not " + std::string(key) + "." + s.field);
  }
  // The .npy header as indexed, byte for byte; else say what is wrong.
  const size_t npy_len = static_cast<size_t>(p.head) - kTarBlock;
  if (XXH3_64bits(h + kTarBlock, npy_len) == d.header_hash) return Status::OK();
  size_t payload = 0;
  auto npy = DecodeNpyHeader(std::string_view(h + kTarBlock, npy_len), size,
                             FieldContext{key, s.field, s.url, d.field}, &payload);
  if (!npy.ok()) return npy.status();
  return Mismatch(s, d.field, sample, "its .npy header differs from the indexed one");
}

void DirectReads::Clear() {
  for (size_t slot = 0; slot < keep_.size(); ++slot) pieces_[slot].clear();
  keep_.clear();
  count_ = 0;
  jobs_.clear();
}

}  // namespace shardstream::internal
