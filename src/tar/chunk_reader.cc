#include "tar/chunk_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace shardstream::internal {

struct ChunkReader::Pool {
  explicit Pool(size_t size) : size(size), max_free(std::max<size_t>(4, kMaxFreeBytes / size)) {}
  ~Pool() {
    for (char* p : free) delete[] p;
  }
  const size_t size;
  const size_t max_free;
  std::mutex mu;
  std::vector<char*> free;  // at most max_free
  // Free chunks kept per chunk size: enough for a shard switch (the old
  // reader's chunks become the new one's) without holding much memory.
  static constexpr size_t kMaxFreeBytes = size_t{16} << 20;
};

namespace {
// One pool per chunk size for the whole process: a reader per shard would
// otherwise fault in fresh chunks for every shard, which costs more than
// reading a small shard.
std::shared_ptr<ChunkReader::Pool> SharedPool(size_t size) {
  static std::mutex mu;
  static std::map<size_t, std::weak_ptr<ChunkReader::Pool>>* pools =
      new std::map<size_t, std::weak_ptr<ChunkReader::Pool>>();  // never destroyed: exit order
  static std::vector<std::shared_ptr<ChunkReader::Pool>>* keep =
      new std::vector<std::shared_ptr<ChunkReader::Pool>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& w = (*pools)[size];
  if (auto p = w.lock()) return p;
  auto p = std::make_shared<ChunkReader::Pool>(size);
  w = p;
  // The few sizes in use stay pooled; rare sizes beyond that are not kept.
  if (keep->size() < 4) keep->push_back(p);
  return p;
}
}  // namespace

std::shared_ptr<char> ChunkReader::NewChunk() {
  char* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    if (!pool_->free.empty()) {
      p = pool_->free.back();
      pool_->free.pop_back();
    }
  }
  if (p == nullptr) p = new char[chunk_size_];
  // The deleter holds the pool, so a view that outlives the reader still
  // returns (or frees) its chunk safely, from any thread.
  std::shared_ptr<Pool> pool = pool_;
  return std::shared_ptr<char>(p, [pool](char* q) {
    {
      std::lock_guard<std::mutex> lock(pool->mu);
      if (pool->free.size() < pool->max_free) {
        pool->free.push_back(q);
        return;
      }
    }
    delete[] q;
  });
}
namespace {
std::shared_ptr<char> NewBuffer(size_t n) {
  // new char[] leaves the bytes uninitialised: they are read into at once.
  return std::shared_ptr<char>(new char[n], std::default_delete<char[]>());
}
}  // namespace

ChunkReader::ChunkReader(ByteStream* in, size_t chunk_size, uint64_t base_offset)
    : in_(in), chunk_size_(chunk_size), pool_(SharedPool(chunk_size)),
      offset_(base_offset) {}

Result<size_t> ChunkReader::Fill() {
  SHARDSTREAM_ASSIGN_OR_RETURN(size_t n, in_->Read(chunk_size_ - end_, chunk_.get() + end_));
  if (n == 0) eof_ = true;
  end_ += n;
  return n;
}

Result<size_t> ChunkReader::Ensure(size_t n) {
  if (end_ - pos_ >= n || eof_) return end_ - pos_;
  size_t tail = end_ - pos_;
  if (!chunk_ || chunk_.use_count() > 1) {
    // Fields still point into the old chunk: start a new one.
    auto fresh = NewChunk();
    if (tail) std::memcpy(fresh.get(), chunk_.get() + pos_, tail);
    chunk_ = std::move(fresh);
  } else if (pos_ > 0 && tail) {
    std::memmove(chunk_.get(), chunk_.get() + pos_, tail);
  }
  pos_ = 0;
  end_ = tail;
  while (end_ < n && !eof_) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, Fill());
    (void)got;
  }
  return end_ - pos_;
}

Result<bool> ChunkReader::Take(uint64_t n, std::string_view* data,
                               std::shared_ptr<const void>* owner) {
  if (n <= chunk_size_ / 2) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t avail, Ensure(static_cast<size_t>(n)));
    if (avail < n) return false;
    *data = std::string_view(cursor(), static_cast<size_t>(n));
    *owner = chunk_;
    Advance(static_cast<size_t>(n));
    return true;
  }
  // Large members get a buffer of their own, filled by direct large reads.
  auto buf = NewBuffer(static_cast<size_t>(n));
  size_t have = std::min<uint64_t>(available(), n);
  if (have) std::memcpy(buf.get(), cursor(), have);
  Advance(have);
  while (have < n) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in_->Read(static_cast<size_t>(n - have), buf.get() + have));
    if (got == 0) {
      eof_ = true;
      return false;
    }
    have += got;
    offset_ += got;
  }
  *data = std::string_view(buf.get(), static_cast<size_t>(n));
  *owner = std::move(buf);
  return true;
}

Result<bool> ChunkReader::Skip(uint64_t n) {
  while (n > 0) {
    if (available() == 0) {
      SHARDSTREAM_ASSIGN_OR_RETURN(size_t avail, Ensure(1));
      if (avail == 0) return false;
    }
    size_t k = static_cast<size_t>(std::min<uint64_t>(n, available()));
    Advance(k);
    n -= k;
  }
  return true;
}

}  // namespace shardstream::internal
