// ShardNames: the redacted urls of the shards one run reads, by their index
// in the epoch's list, for Batch::url. Only the run's own shards: a consumer
// of a million-shard data set keeps its share of names, not one per shard.
// Immutable once built; batches share it.
#ifndef SHARDSTREAM_PIPELINE_SHARD_NAMES_H_
#define SHARDSTREAM_PIPELINE_SHARD_NAMES_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace shardstream::internal {

class ShardNames {
 public:
  ShardNames() = default;
  // `shards` sorted and unique; `urls` redacted, one per shard.
  ShardNames(std::vector<int64_t> shards, std::vector<std::string> urls)
      : shards_(std::move(shards)), urls_(std::move(urls)) {}
  // The url of entry `shard`, or "" when the run does not read it.
  const std::string& Url(int64_t shard) const {
    static const std::string kNone;
    auto it = std::lower_bound(shards_.begin(), shards_.end(), shard);
    if (it == shards_.end() || *it != shard) return kNone;
    return urls_[static_cast<size_t>(it - shards_.begin())];
  }
  size_t size() const { return shards_.size(); }

 private:
  std::vector<int64_t> shards_;
  std::vector<std::string> urls_;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_SHARD_NAMES_H_
