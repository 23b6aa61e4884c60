// Checksums: the reference values of xxHash (XXH3, seed 0), whichever vector
// code the machine runs, and whatever pieces the bytes arrive in.
#include "shardstream/checksum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace shardstream {
namespace {

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u) >> 13);
  return s;
}

TEST(ChecksumTest, KnownValues) {
  EXPECT_EQ(ChecksumOf("", "xxh3_128"), "xxh3_128:99aa06d3014798d86001c324468d497f");
  EXPECT_EQ(ChecksumOf("", "xxh3_64"), "xxh3_64:2d06800538d394c2");
  EXPECT_EQ(ChecksumOf("abc", "xxh3_128"), "xxh3_128:06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(ChecksumOf("abc", "xxh3_64"), "xxh3_64:78af5f94892f3950");
  // Long enough for the vectorised loop.
  const std::string big = Pattern(1 << 20);
  EXPECT_EQ(ChecksumOf(big, "xxh3_128"), "xxh3_128:490d2e4880066606e2786b358eab4a67");
  EXPECT_EQ(ChecksumOf(big, "xxh3_64"), "xxh3_64:e2786b358eab4a67");
}

TEST(ChecksumTest, PiecesOfAnySizeGiveTheSameValue) {
  const std::string big = Pattern(1 << 20);
  for (const char* algorithm : {"xxh3_128", "xxh3_64"}) {
    const std::string whole = ChecksumOf(big, algorithm);
    for (size_t piece : {1u, 63u, 1000u, 16384u, 262143u}) {
      auto h = Hasher::Create(algorithm);
      ASSERT_TRUE(h.ok()) << h.status();
      for (size_t off = 0; off < big.size(); off += piece)
        (*h)->Update(big.data() + off, std::min(piece, big.size() - off));
      EXPECT_EQ((*h)->Finish(), whole) << algorithm << " in pieces of " << piece;
    }
  }
}

TEST(ChecksumTest, UnknownAlgorithmIsAConfigError) {
  auto h = Hasher::Create("md5");
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kConfig);
  EXPECT_NE(h.status().message().find("xxh3_128"), std::string::npos);
}

}  // namespace
}  // namespace shardstream
