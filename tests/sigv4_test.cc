// Our SigV4 signer against botocore's S3SigV4Auth: the golden cases in
// tests/data/sigv4_golden.json (made by tests/tools/make_sigv4_golden.py)
// must be reproduced byte for byte. When botocore is importable, the cases
// are also re-derived live, so the golden file cannot drift from botocore.
#include "s3/sigv4.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "shardstream/s3.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using internal::HttpRequest;

nlohmann::json LoadGolden(const std::string& path) {
  return nlohmann::json::parse(testing::ReadFile(path));
}

// Replays every case; returns the number checked.
int CheckCases(const nlohmann::json& golden) {
  int n = 0;
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto& in = c["input"];
    // Our url for the object must be the one botocore signed.
    S3Options o;
    o.endpoint = in["endpoint"];
    o.access_key = in["access_key"];
    o.secret_key = in["secret_key"];
    o.region = in["region"];
    std::string bucket = in["bucket"], key = in["key"], query = in["query"];
    std::string url;
    if (bucket.empty()) {  // virtual-hosted endpoint given whole
      url = o.endpoint + "/" + internal::S3UriEncode(key, false);
    } else {
      auto client = S3Client::Make(o);
      EXPECT_TRUE(client.ok()) << client.status();
      if (!client.ok()) return n;
      url = (*client)->HttpUrl(bucket, key);
    }
    if (!query.empty()) url += "?" + query;
    EXPECT_EQ(url, c["url"].get<std::string>());

    HttpRequest req;
    req.method = in["method"];
    req.url = c["url"];
    for (const auto& h : in["headers"]) req.headers.emplace_back(h[0], h[1]);
    req.body = in["body"];
    internal::AwsCredentials creds{in["access_key"], in["secret_key"], in["session_token"]};
    auto trace = internal::SignV4(req, creds, in["region"].get<std::string>(),
                                  in["service"].get<std::string>(),
                                  in["amz_date"].get<std::string>(),
                                  internal::Sha256Hex(req.body));
    EXPECT_EQ(trace.canonical_request, c["canonical_request"].get<std::string>());
    EXPECT_EQ(trace.string_to_sign, c["string_to_sign"].get<std::string>());
    std::vector<std::pair<std::string, std::string>> want;
    for (const auto& h : c["headers"]) want.emplace_back(h[0], h[1]);
    EXPECT_EQ(req.headers, want);
    ++n;
  }
  return n;
}

TEST(SigV4Test, MatchesBotocoreGoldenCases) {
  auto golden = LoadGolden(std::string(SHARDSTREAM_TEST_DATA_DIR) + "/sigv4_golden.json");
  EXPECT_GE(CheckCases(golden), 14);
}

TEST(SigV4Test, MatchesBotocoreLive) {
  std::string check;
  if (testing::RunCommand(testing::PythonPath() + " -c 'import botocore'", &check) != 0) {
    // The committed golden file (previous test) still proves compatibility.
    GTEST_SKIP() << "botocore not importable by " << testing::PythonPath();
  }
  testing::TempDir dir;
  std::string out = dir.Join("golden.json");
  std::string log;
  ASSERT_EQ(testing::RunCommand(testing::PythonPath() + " " + SHARDSTREAM_SOURCE_DIR +
                                    "/tests/tools/make_sigv4_golden.py " + out,
                                &log),
            0)
      << log;
  EXPECT_GE(CheckCases(LoadGolden(out)), 14);
}

TEST(SigV4Test, ResigningReplacesHeaders) {
  HttpRequest req;
  req.method = "GET";
  req.url = "http://127.0.0.1:9000/b/k";
  internal::AwsCredentials creds{"AK", "SK", "TOKEN"};
  internal::SignV4(req, creds, "us-east-1", "s3", "20240101T000000Z", internal::kEmptySha256);
  auto first = req.headers;
  internal::SignV4(req, creds, "us-east-1", "s3", "20240101T000001Z", internal::kEmptySha256);
  EXPECT_EQ(req.headers.size(), first.size());
  EXPECT_NE(req.headers, first);
}

TEST(SigV4Test, UriEncoding) {
  EXPECT_EQ(internal::S3UriEncode("a b/c~d", false), "a%20b/c~d");
  EXPECT_EQ(internal::S3UriEncode("a b/c~d", true), "a%20b%2Fc~d");
  EXPECT_EQ(internal::S3UriEncode("\xc3\xbc+=", true), "%C3%BC%2B%3D");
}

}  // namespace
}  // namespace shardstream
