#include "tar/direct_reads.h"

#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shardstream/decode.h"
#include "tar/tar_format.h"

namespace shardstream::internal {
namespace {

// Bytes between two pieces read along (into a scratch buffer) rather than
// skipped with a second read: a read costs about as much as copying 8 KiB.
constexpr uint64_t kMaxGap = uint64_t{16} << 10;
// A job: about this many bytes, so the workers share a batch's reads.
constexpr uint64_t kJobBytes = uint64_t{512} << 10;
constexpr size_t kMaxIov = 1024;  // IOV_MAX on Linux
constexpr uint64_t kMaxHeaders = kDirectMaxHeaders;
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

// Every byte of the pieces, or an error naming the shard and the offset.
Status ReadFully(const DirectShard& s, uint64_t offset, const ReadPiece* pieces, size_t n,
                 size_t bytes) {
  Result<size_t> got = s.file->ReadVAt(offset, pieces, n);
  if (!got.ok())
    return got.status().WithContext("reading shard " + s.url + " at byte " + std::to_string(offset),
                                    s.url, static_cast<int64_t>(offset));
  if (*got < bytes) {
    // A read that began past the end says only that: the file says where.
    uint64_t end = offset + *got;
    if (Result<uint64_t> now = s.file->SizeNow(); now.ok()) end = std::min(end, *now);
    return Status(StatusCode::kCorrupt,
                  "shard " + s.url + " ends at byte " + std::to_string(end) +
                      ", before what its sample index places there (the shard changed "
                      "after it was indexed?)",
                  s.url, static_cast<int64_t>(end));
  }
  return Status::OK();
}

}  // namespace

DirectShard::~DirectShard() {
  if (recycler != nullptr) recycler->Give(this);
}

void DirectRecycler::Take(DirectShard* s) {
  s->recycler = shared_from_this();
  MutexLock lock(&mu_);
  if (free_.empty()) return;
  Kept& k = free_.back();
  kept_bytes_ -= Bytes(k);
  s->docs.swap(k.docs);
  s->keys.swap(k.keys);
  free_.pop_back();
}

uint64_t DirectRecycler::idle_bytes() {
  MutexLock lock(&mu_);
  return kept_bytes_;
}

void DirectRecycler::Give(DirectShard* s) {
  Kept k;
  k.docs.swap(s->docs);
  k.keys.swap(s->keys);
  k.docs.clear();
  k.keys.clear();
  MutexLock lock(&mu_);
  if (kept_bytes_ + Bytes(k) > max_bytes_) return;  // freed as k goes
  kept_bytes_ += Bytes(k);
  free_.push_back(std::move(k));
}

size_t DirectReads::Keep(const DirectDoc& doc) {
  // A batch draws from a few shards at a time.
  for (size_t i = keep_.size(); i > 0; --i)
    if (keep_[i - 1] == doc.shard) return i - 1;
  keep_.push_back(doc.shard);
  if (pieces_.size() < keep_.size()) pieces_.emplace_back();
  group_checked_.resize(keep_.size());
  group_checked_.back() = 0;
  return keep_.size() - 1;
}

void DirectReads::AddCheck(const DirectDoc& doc) {
  const size_t slot = Keep(doc);
  const DirectShard::Doc& d = doc.doc();
  if (d.group_head > 0) {
    // A group's headers, once for the run of its documents in this batch.
    if (group_checked_[slot] == d.field + 1) return;
    group_checked_[slot] = d.field + 1;
  }
  // In place: a Piece built aside is stored, then reloaded whole to copy it
  // (a stalled store forward, half of this function).
  Piece& p = pieces_[slot].emplace_back();
  p.offset = d.field - kTarBlock;
  // At most kMaxHeaders (ChunkSink).
  p.len = static_cast<uint32_t>(d.group_head > 0 ? kTarBlock + d.group_head
                                                 : d.payload - p.offset);
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
  // By shard, each read shard's in file order (so reads merge). The pieces
  // come in by shard already, and a shard's are in file order unless a
  // shuffle buffer mixed its documents: most batches need no sort. A
  // mapped shard's are copied as they come: nothing to merge, and the
  // batch is then written in order.
  auto by_offset = [](const Piece& a, const Piece& b) { return a.offset < b.offset; };
  jobs_.clear();
  for (size_t slot = 0; slot < keep_.size(); ++slot) {
    std::vector<Piece>& v = pieces_[slot];
    const bool reads = keep_[slot]->view.data == nullptr;
    if (reads && !std::is_sorted(v.begin(), v.end(), by_offset))
      std::sort(v.begin(), v.end(), by_offset);
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

Status DirectReads::CopyJob(const DirectShard& shard, const std::vector<Piece>& v,
                            const Job& job) const {
  constexpr size_t kPrefetchAhead = 8;
  const RandomAccessFile::View& view = shard.view;
  // A file cut short since it was mapped would fault where its bytes went:
  // its size now is asked first (one fstat a job of about kJobBytes).
  Result<uint64_t> now = shard.file->SizeNow();
  if (!now.ok()) return now.status().WithContext("reading shard " + shard.url, shard.url, -1);
  const uint64_t size = std::min(view.size, *now);
  uint64_t bytes = 0;
  for (size_t i = job.first; i < job.end; ++i) {
    const Piece& p = v[i];
    if (p.offset > size || size - p.offset < p.len)
      return Status(StatusCode::kCorrupt,
                    "shard " + shard.url + " ends at byte " + std::to_string(size) +
                        ", before what its sample index places there (the shard changed "
                        "after it was indexed?)",
                    shard.url, static_cast<int64_t>(size));
    const char* src = view.data + p.offset;
    // The headers a few pieces on, asked for now: shuffled documents lie
    // apart, so each check would otherwise wait for memory on its own
    // (unmapped pages are not fetched: a prefetch never faults).
    if (i + kPrefetchAhead < job.end) {
      const Piece& q = v[i + kPrefetchAhead];
      if (q.head > 0 && q.offset < size && size - q.offset >= q.head) {
        // Each cache line the check reads: the name, the size (which
        // straddles two lines, the second the type's), the prefix, the .npy
        // header; and the document's record in the index.
        const char* h = view.data + q.offset;
        __builtin_prefetch(h + Ustar::kName);
        __builtin_prefetch(h + Ustar::kSize);
        __builtin_prefetch(h + Ustar::kTypeflag);
        __builtin_prefetch(h + Ustar::kPrefix);
        __builtin_prefetch(h + kTarBlock);
        __builtin_prefetch(h + q.head - 1);
        __builtin_prefetch(&shard.doc(shard.first + q.doc));
      }
    }
    if (p.head > 0) SHARDSTREAM_RETURN_IF_ERROR(Check(shard, p, src));
    if (p.len > p.head) std::memcpy(p.dst, src + p.head, p.len - p.head);
    bytes += p.len;
  }
  shard.file->CountViewBytes(bytes);
  return Status::OK();
}

namespace {

// Per worker, kept: a job allocates nothing. (One thread_local: each costs a
// call to find from a shared library.)
struct Scratch {
  std::vector<ReadPiece> iov;
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

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

void DirectReads::PrepareThread() { ThreadScratch(); }

Status DirectReads::RunJob(size_t j) {
  Scratch& scratch = ThreadScratch();
  std::vector<ReadPiece>& iov = scratch.iov;
  std::vector<const char*>& hdrs = scratch.hdrs;
  char* const gap = scratch.gap.get();
  char* const heads = scratch.heads.get();
  const Job& job = jobs_[j];
  const DirectShard& shard = *keep_[job.slot];
  const std::vector<Piece>& v = pieces_[job.slot];
  if (shard.view.data != nullptr) return CopyJob(shard, v, job);
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
        iov.push_back(ReadPiece{at, static_cast<size_t>(g + p.head)});
        hdrs.push_back(at + g);
        at += g + p.head;
      } else {
        if (g > 0) iov.push_back(ReadPiece{gap, static_cast<size_t>(g)});
        if (p.head > 0) {
          iov.push_back(ReadPiece{at, p.head});
          hdrs.push_back(at);
          at += p.head;
        }
      }
      if (p.len > p.head) iov.push_back(ReadPiece{p.dst, static_cast<size_t>(p.len - p.head)});
      pos = p.offset + p.len;
    }
    SHARDSTREAM_RETURN_IF_ERROR(ReadFully(shard, start, iov.data(), iov.size(), pos - start));
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
  if (d.group_head > 0) return CheckGroup(s, p, h);
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

Status DirectReads::CheckGroup(const DirectShard& s, const Piece& p, const char* h) const {
  // The group's array member: an intact header (checked whole: this runs
  // once for a run of the group's documents) of a file whose name ends in
  // the field's, that holds the document's values, with the .npy header
  // indexed (its hash covers the array's shape). The documents' own keys
  // are not in the tar.
  const int64_t sample = s.first + p.doc;
  const DirectShard::Doc& d = s.doc(sample);
  if (!ChecksumMatches(h))
    return Mismatch(s, p.offset, sample, "no intact tar header there (bad checksum)");
  const char type = h[Ustar::kTypeflag];
  const auto size = ParseNumber(h + Ustar::kSize, Ustar::kSizeLen);
  const uint64_t end = d.payload + d.count * DTypeSize(s.dtype);
  const bool file = (type == '0' || type == '\0' || type == '7') && size && end >= d.field &&
                    *size >= end - d.field;
  const std::string_view name = FieldString(h + Ustar::kName, Ustar::kNameLen);
  const bool long_name = name.size() == Ustar::kNameLen || h[Ustar::kPrefix] != '\0';
  const bool named = long_name || (name.size() > s.field.size() &&
                                   name.substr(name.size() - s.field.size()) == s.field &&
                                   name[name.size() - s.field.size() - 1] == '.');
  if (!file)
    return Mismatch(s, p.offset, sample,
                    "the tar header is not that of a file holding the document's values "
                    "(its group's array)");
  if (!named)
    return Mismatch(s, p.offset, sample, "the member there is not a ." + s.field + " array");
  const size_t npy_len = static_cast<size_t>(p.head) - kTarBlock;
  if (XXH3_64bits(h + kTarBlock, npy_len) == d.header_hash) return Status::OK();
  return Mismatch(s, d.field, sample, "its group's .npy header differs from the indexed one");
}

void DirectReads::Clear() {
  for (size_t slot = 0; slot < keep_.size(); ++slot) pieces_[slot].clear();
  keep_.clear();
  count_ = 0;
  jobs_.clear();
}

}  // namespace shardstream::internal
