// Copies into batches: large rows (decoded images) with streaming stores.
#ifndef SHARDSTREAM_MEMORY_STREAM_COPY_H_
#define SHARDSTREAM_MEMORY_STREAM_COPY_H_

#include <cstddef>

#include "shardstream/export.h"

namespace shardstream::internal {

// memcpy, but a copy of at least kStreamCopyMin bytes bypasses the cache
// on its way to `dst` (AVX2 non-temporal stores, then a store fence): a
// batch row is read next by another thread after the batch is handed
// over, not by this one, and a cached write would first read each line
// it fills and evict the decoder's working set.
constexpr size_t kStreamCopyMin = size_t{32} << 10;
SHARDSTREAM_EXPORT void StreamCopy(void* dst, const void* src, size_t n);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_MEMORY_STREAM_COPY_H_
