#include "memory/stream_copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace shardstream {
namespace {

TEST(StreamCopyTest, CopiesEveryByteAndNothingBeyondAtAnyAlignment) {
  // Sizes below, at and above the streaming threshold (and an image row of
  // 224 x 224 x 3), from and to every offset within a 32-byte line: the
  // head and tail copies meet the streamed middle exactly.
  const size_t min = internal::kStreamCopyMin;
  std::vector<uint8_t> src(min * 8 + 256), dst(min * 8 + 256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  for (size_t n : {size_t{0}, size_t{1}, size_t{31}, min - 1, min, min + 1, min + 127,
                   size_t{150528}, min * 8 - 5}) {
    for (size_t from : {0, 1, 7, 31}) {
      for (size_t to : {0, 3, 16, 29}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        internal::StreamCopy(dst.data() + 64 + to, src.data() + from, n);
        for (size_t i = 0; i < 64 + to; ++i) ASSERT_EQ(dst[i], 0xEE) << n << " " << from << " " << to;
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(dst[64 + to + i], src[from + i]) << "byte " << i << " of " << n;
        for (size_t i = 64 + to + n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xEE) << n;
      }
    }
  }
}

}  // namespace
}  // namespace shardstream
