// FillSeq: the doc_ids / positions stores of token batches, shared by the
// packer and bench-loader's ideal pack so the bound stores exactly as the
// loader does. Vectorized also in -O2 builds (clang does at -O2 already).
#ifndef SHARDSTREAM_PIPELINE_FILL_SEQ_H_
#define SHARDSTREAM_PIPELINE_FILL_SEQ_H_

#include <cstddef>
#include <cstdint>

namespace shardstream::internal {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize")
#endif
// first, first + step, ... into dst[0..n). Ordinary stores: non-temporal
// ones (bypassing the cache) measured 10-15% slower on token batches, as
// the slots of a small pool stay in the last-level cache.
inline void FillSeq(int32_t* dst, int32_t first, int32_t step, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = first + step * static_cast<int32_t>(i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_PIPELINE_FILL_SEQ_H_
