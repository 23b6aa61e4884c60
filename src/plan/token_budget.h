// TokenBudget: what token documents make of a consumer's plan, counted
// before a byte is read: each shard's documents' token counts (prefix sums
// from the sample indexes, loaded once, kept for every epoch), the rows of
// [B, L] the packer makes from a plan (packed, or one document padded per
// row), and the batches they fill. Equal batches cap every consumer at the
// least of these over all consumers; len() and the cut counters ask it too.
//
// Thread-safety: a value; Load once, then the const calls from any thread.
#ifndef SHARDSTREAM_SRC_PLAN_TOKEN_BUDGET_H_
#define SHARDSTREAM_SRC_PLAN_TOKEN_BUDGET_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "manifest/shard_table.h"
#include "shardstream/manifest.h"
#include "shardstream/options.h"
#include "shardstream/shard_split.h"
#include "shardstream/source.h"

namespace shardstream::internal {

class TokenBudget {
 public:
  // Entry v of the epoch's shard list -> (manifest shard, its first sample):
  // a mixed epoch takes parts of shards (EpochLayout); else (v, 0).
  using Locate = std::function<std::pair<int64_t, int64_t>(int64_t)>;
  // Documents partly delivered before a restore: (entry, sample) -> tokens.
  using Partial = std::map<std::pair<int64_t, int64_t>, int64_t>;

  TokenBudget(const TokenOptions& tokens, int64_t batch_size)
      : pack_(tokens.layout == TokenLayout::kPack),
        eod_(pack_ && tokens.eod_token >= 0 ? 1 : 0),
        seq_len_(tokens.seq_len),
        batch_size_(batch_size) {}

  // Reads (or, for local shards, builds and keeps) every shard's sample
  // index and sums its documents' `field` counts (raw fields: bytes over
  // `input_dtype`'s size). On failure returns what the index lacks, naming
  // the shard. Once loaded, later calls do nothing.
  Status Load(const ShardTable& manifest, const TokenOptions& tokens, Source* source,
              const std::string& index_dir);
  bool loaded() const { return loaded_; }

  // Tokens of manifest shard `shard`'s samples [first, end) (eod not counted).
  int64_t Tokens(int64_t shard, int64_t first, int64_t end) const {
    const std::vector<int64_t>& pre = prefix_[static_cast<size_t>(shard)];
    return pre[static_cast<size_t>(end)] - pre[static_cast<size_t>(first)];
  }
  // Rows of [B, L] the packer makes from plan `p` (documents partly
  // delivered start where they stopped).
  int64_t Rows(const ConsumerPlan& p, const Locate& locate, const Partial& partial) const;
  // The packer never drops (drop_last is for sample batches): the last
  // batch may be short.
  int64_t Batches(int64_t rows) const { return (rows + batch_size_ - 1) / batch_size_; }
  // The least count of batches over every consumer of `all`.
  int64_t LeastBatches(const EpochPlan& all, int world_size, int num_workers,
                       const Locate& locate, const Partial& partial) const;

 private:
  bool pack_;
  int64_t eod_, seq_len_, batch_size_;
  std::vector<std::vector<int64_t>> prefix_;  // per manifest shard
  bool loaded_ = false;
};

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_SRC_PLAN_TOKEN_BUDGET_H_
