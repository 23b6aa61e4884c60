// EpochLayout: the epoch's list of shards when streams are mixed
// (LoaderOptions::streams): each stream's quota of samples for the epoch
// (weights by largest remainders, repeat, choose), its shards kept on the
// nodes they are assigned to for every epoch, whole passes plus a seeded
// part for the rest. Plans, batches and resume states index this list;
// Locate maps an entry back to its manifest shard and first sample.
//
// Thread-safety: a value; LayOut by one thread, then the const calls.
#ifndef SHARDSTREAM_SRC_PLAN_EPOCH_LAYOUT_H_
#define SHARDSTREAM_SRC_PLAN_EPOCH_LAYOUT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/manifest.h"
#include "shardstream/options.h"
#include "shardstream/status.h"

namespace shardstream::internal {

class EpochLayout {
 public:
  // A stream: its name, its manifest shards [begin, end) and their samples.
  struct Stream {
    std::string name;
    size_t begin = 0, end = 0;
    int64_t samples = 0;
  };

  EpochLayout() = default;
  EpochLayout(std::vector<MixStream> options, int64_t epoch_size, uint64_t seed)
      : options_(std::move(options)), epoch_size_(epoch_size), seed_(seed) {}

  // Stream k of the options (their order): its shards are the manifest's
  // [stream.begin, stream.end).
  void AddStream(Stream stream);
  bool mixing() const { return !streams_.empty(); }
  const std::vector<Stream>& streams() const { return streams_; }
  // The stream of manifest shard `shard`.
  int stream_of(int64_t shard) const { return stream_of_[static_cast<size_t>(shard)]; }

  // Lays out epoch e's list for `nodes` nodes: each stream's shards stay on
  // the nodes they are assigned to for all epochs, and each node takes its
  // part of the stream's quota from its own shards.
  Status LayOut(const ShardTable& manifest, int64_t e, int64_t nodes);
  // What resume states carry of the mix ("/mix:...").
  std::string Fingerprint() const;

  // The epoch's list: entries (a manifest shard, nsamples the part taken),
  // and per entry its manifest shard, first sample and node.
  const std::vector<ShardEntry>& shards() const { return shards_; }
  const std::vector<int64_t>& offsets() const { return offset_; }
  const std::vector<uint32_t>& nodes() const { return node_; }
  // Entry v's manifest shard and first sample ((v, 0) when not mixing).
  std::pair<int64_t, int64_t> Locate(int64_t v) const {
    if (!mixing()) return {v, 0};
    return {real_[static_cast<size_t>(v)], offset_[static_cast<size_t>(v)]};
  }

 private:
  std::vector<MixStream> options_;
  int64_t epoch_size_ = 0;
  uint64_t seed_ = 0;
  std::vector<Stream> streams_;
  std::vector<int> stream_of_;
  std::vector<ShardEntry> shards_;
  std::vector<int64_t> real_, offset_;
  std::vector<uint32_t> node_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_PLAN_EPOCH_LAYOUT_H_
