#include "shardstream/result.h"
#include "shardstream/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace shardstream {
namespace {

TEST(StatusTest, OkIsEmpty) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(s.offset(), -1);
}

TEST(StatusTest, ErrorCarriesCodeUrlAndOffset) {
  Status s(StatusCode::kCorrupt, "bad header", "file:///a.tar", 512);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "corrupt: bad header");
  EXPECT_EQ(s.url(), "file:///a.tar");
  EXPECT_EQ(s.offset(), 512);
  EXPECT_FALSE(s.retryable());
  EXPECT_TRUE(Status::Unavailable("503").retryable());
}

TEST(StatusTest, WithContextKeepsInnermostLocation) {
  Status inner(StatusCode::kIo, "short read", "a.tar", 10);
  Status outer = inner.WithContext("reading shard", "b.tar", 99);
  EXPECT_EQ(outer.code(), StatusCode::kIo);
  EXPECT_EQ(outer.message(), "reading shard: short read");
  EXPECT_EQ(outer.url(), "a.tar");
  EXPECT_EQ(outer.offset(), 10);
  EXPECT_TRUE(Status().WithContext("x").ok());
}

TEST(StatusTest, FromErrnoClassifies) {
  EXPECT_EQ(Status::FromErrno(ENOENT, "open x").code(), StatusCode::kNotFound);
  EXPECT_EQ(Status::FromErrno(EACCES, "open x").code(), StatusCode::kAuth);
  EXPECT_EQ(Status::FromErrno(ENOSPC, "write x").code(), StatusCode::kIo);
  EXPECT_NE(Status::FromErrno(ENOSPC, "write x").message().find("No space"), std::string::npos);
}

Result<int> Half(int x) {
  if (x % 2) return Status::Config("odd");
  return x / 2;
}
Result<int> Quarter(int x) {
  SHARDSTREAM_ASSIGN_OR_RETURN(int h, Half(x));
  SHARDSTREAM_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(ResultTest, AssignOrReturnPropagates) {
  EXPECT_EQ(*Quarter(8), 2);
  Result<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kConfig);
  EXPECT_EQ(r.value_or(-1), -1);
}

}  // namespace
}  // namespace shardstream
