// ParseByteSize: the one parser of sizes for the command line and Python.
#include "shardstream/byte_size.h"

#include <gtest/gtest.h>

namespace shardstream {
namespace {

uint64_t Parse(const char* text) {
  auto r = ParseByteSize(text);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status();
  return r.ok() ? *r : 0;
}

TEST(ByteSizeTest, DecimalAndBinaryUnits) {
  EXPECT_EQ(Parse("0"), 0u);
  EXPECT_EQ(Parse("1000"), 1000u);
  EXPECT_EQ(Parse("12B"), 12u);
  EXPECT_EQ(Parse("1KB"), 1000u);
  EXPECT_EQ(Parse("1k"), 1000u);
  EXPECT_EQ(Parse("1KiB"), 1024u);
  EXPECT_EQ(Parse("1Ki"), 1024u);
  EXPECT_EQ(Parse("512MiB"), 512ull << 20);
  EXPECT_EQ(Parse("4GB"), 4000000000ull);
  EXPECT_EQ(Parse("4 gb"), 4000000000ull);
  EXPECT_EQ(Parse("2G"), 2000000000ull);
  EXPECT_EQ(Parse("2GiB"), 2ull << 30);
  EXPECT_EQ(Parse("3TB"), 3000000000000ull);
  EXPECT_EQ(Parse("3TiB"), 3ull << 40);
  EXPECT_EQ(Parse("1PB"), 1000000000000000ull);
  EXPECT_EQ(Parse("1PiB"), 1ull << 50);
  EXPECT_EQ(Parse("  7 MiB  "), 7ull << 20);
}

TEST(ByteSizeTest, DecimalsRoundDown) {
  EXPECT_EQ(Parse("0.2MB"), 200000u);
  EXPECT_EQ(Parse("1.5GiB"), 3ull << 29);
  EXPECT_EQ(Parse(".5KiB"), 512u);
  EXPECT_EQ(Parse("0.3KiB"), 307u);  // 307.2
  EXPECT_EQ(Parse("1.000000001GB"), 1000000001u);
}

TEST(ByteSizeTest, BadSizesAreConfigErrorsNamingTheText) {
  for (const char* bad : {"", "lots", "MB", "-1MB", "12parsecs", "1.5.2GB", "1 2", "1e9",
                          "1.0000000001GB", "18446744073709551616", "20EB", "1Mbit"}) {
    auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kConfig) << bad;
    EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << r.status();
  }
  auto r = ParseByteSize("12parsecs");
  EXPECT_NE(r.status().message().find("KiB"), std::string::npos) << r.status();
  EXPECT_EQ(*ParseByteSize("18446744073709551615"), ~uint64_t{0});
}

TEST(ByteSizeTest, FormatReadsBack) {
  EXPECT_EQ(FormatByteSize(0), "0 B");
  EXPECT_EQ(FormatByteSize(512ull << 20), "512 MiB");
  EXPECT_EQ(FormatByteSize(1500000000), "1.5 GB");
  EXPECT_EQ(FormatByteSize(999999999), "1 GB");
  EXPECT_EQ(FormatByteSize(uint64_t{1} << 60), "1 EiB");
  EXPECT_EQ(*ParseByteSize("1EiB"), uint64_t{1} << 60);
  EXPECT_EQ(*ParseByteSize("2EB"), 2000000000000000000ull);
  for (uint64_t v : {uint64_t{1} << 30, uint64_t{3} << 40, uint64_t{999}, uint64_t{2000000},
                     uint64_t{1} << 62, uint64_t{5000000000000000000ull}}) {
    auto back = ParseByteSize(FormatByteSize(v));
    ASSERT_TRUE(back.ok()) << FormatByteSize(v);
    EXPECT_EQ(*back, v) << FormatByteSize(v);
  }
}

}  // namespace
}  // namespace shardstream
