#include "shardstream/url.h"

#include <gtest/gtest.h>

namespace shardstream {
namespace {

TEST(UrlTest, Scheme) {
  EXPECT_EQ(UrlScheme("/data/a.tar"), "file");
  EXPECT_EQ(UrlScheme("rel/a.tar"), "file");
  EXPECT_EQ(UrlScheme("file:///data/a.tar"), "file");
  EXPECT_EQ(UrlScheme("HTTPS://h/a.tar"), "https");
  EXPECT_EQ(UrlScheme("s3://b/k"), "s3");
  EXPECT_EQ(UrlScheme("pipe:curl -s http://x"), "pipe");
}

TEST(UrlTest, LocalPath) {
  EXPECT_EQ(LocalPath("file:///data/a.tar"), "/data/a.tar");
  EXPECT_EQ(LocalPath("file://localhost/data/a.tar"), "/data/a.tar");
  EXPECT_EQ(LocalPath("a.tar"), "a.tar");
  EXPECT_EQ(LocalPath("http://h/a.tar"), "");
}

TEST(UrlTest, DirnameBasenameJoin) {
  EXPECT_EQ(UrlDirname("s3://bucket/ds/manifest.jsonl"), "s3://bucket/ds");
  EXPECT_EQ(UrlDirname("/ds/manifest.jsonl"), "/ds");
  EXPECT_EQ(UrlDirname("manifest.jsonl"), ".");
  EXPECT_EQ(UrlBasename("http://h/ds/a.tar?x=1"), "a.tar");
  EXPECT_EQ(JoinUrl("s3://bucket/ds", "shard-0.tar"), "s3://bucket/ds/shard-0.tar");
  EXPECT_EQ(JoinUrl("/ds/", "./shard-0.tar"), "/ds/shard-0.tar");
  EXPECT_EQ(JoinUrl(".", "shard-0.tar"), "shard-0.tar");
  EXPECT_EQ(JoinUrl("/ds", "/abs/x.tar"), "/abs/x.tar");
  EXPECT_EQ(JoinUrl("/ds", "http://h/x.tar"), "http://h/x.tar");
}

TEST(UrlTest, RedactsCredentialsAndSignatures) {
  EXPECT_EQ(RedactUrl("https://user:hunter2@h.example/a.tar"),
            "https://user:REDACTED@h.example/a.tar");
  EXPECT_EQ(RedactUrl("https://tok@h/a"), "https://REDACTED@h/a");
  std::string presigned =
      "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4-HMAC-SHA256"
      "&X-Amz-Credential=AKIDEXAMPLE%2F2026&X-Amz-Signature=deadbeef&X-Amz-Security-Token=tok#f";
  std::string r = RedactUrl(presigned);
  EXPECT_EQ(r.find("AKIDEXAMPLE"), std::string::npos) << r;
  EXPECT_EQ(r.find("deadbeef"), std::string::npos) << r;
  EXPECT_EQ(r.find("=tok"), std::string::npos) << r;
  EXPECT_NE(r.find("X-Amz-Algorithm=AWS4-HMAC-SHA256"), std::string::npos) << r;
  EXPECT_EQ(RedactUrl("/plain/path.tar"), "/plain/path.tar");
}

}  // namespace
}  // namespace shardstream
