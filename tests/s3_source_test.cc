// S3 against moto's server with SigV4 authentication enforced (a wrong
// signature is rejected), plus S3 retries against our fault-injecting server.
#include "shardstream/s3.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "common/log_capture.h"
#include "shardstream/transfer.h"
#include "support/http_server.h"
#include "support/test_util.h"
#include "support/transfer_options.h"

namespace shardstream {
namespace {

using testing::MotoServer;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

class S3SourceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    moto_ = new MotoServer();
    auto client = S3Client::Make(Options());
    ASSERT_TRUE(client.ok()) << client.status();
    ASSERT_TRUE((*client)->CreateBucket("data").ok());
  }
  static void TearDownTestSuite() {
    delete moto_;
    moto_ = nullptr;
  }
  static S3Options Options() {
    S3Options o;
    o.endpoint = moto_->endpoint();
    o.region = "us-east-1";
    o.access_key = moto_->access_key();
    o.secret_key = moto_->secret_key();
    o.http.initial_backoff_s = 0.001;
    o.http.max_retries = 2;
    return o;
  }
  std::shared_ptr<S3Client> Client(S3Options o = Options()) {
    auto c = S3Client::Make(std::move(o));
    EXPECT_TRUE(c.ok()) << c.status();
    return *c;
  }
  static MotoServer* moto_;
};
MotoServer* S3SourceTest::moto_ = nullptr;

Result<std::string> ReadAll(InputStream& in) {
  std::string out, buf(65536, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.Read(buf.size(), buf.data()));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

TEST_F(S3SourceTest, RightKeysWorkForPutHeadGetRangeAndList) {
  auto client = Client();
  std::string data = RandomBytes(200000, 1);
  ASSERT_TRUE(client->Put("s3://data/shards/a.tar", data).ok());
  ASSERT_TRUE(client->Put("s3://data/shards/b.tar", "bb").ok());
  ASSERT_TRUE(client->Put("s3://data/shards/sub/c.tar", "c").ok());

  auto info = client->Head("s3://data/shards/a.tar");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->size, data.size());
  EXPECT_FALSE(info->etag.empty());

  auto in = client->Get("s3://data/shards/a.tar", 0, data.size());
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAll(**in);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(*all == data);

  auto tail = client->Get("s3://data/shards/a.tar", 150000);
  ASSERT_TRUE(tail.ok()) << tail.status();
  EXPECT_TRUE(*ReadAll(**tail) == data.substr(150000));

  auto range = client->GetRange("s3://data/shards/a.tar", 1000, 500);
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_TRUE(*range == data.substr(1000, 500));

  S3Options small = Options();
  small.list_page_size = 1;  // forces pagination
  auto list = Client(small)->List("s3://data/shards", true);
  ASSERT_TRUE(list.ok()) << list.status() << " ";
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].url, "s3://data/shards/a.tar");
  EXPECT_EQ((*list)[0].size, data.size());
  EXPECT_FALSE((*list)[0].etag.empty());
  EXPECT_EQ((*list)[1].url, "s3://data/shards/b.tar");
  EXPECT_EQ((*list)[2].url, "s3://data/shards/sub/c.tar");

  // moto (werkzeug) verifies signatures over a decoded query string, so a
  // '/' in a query value (%2F, as AWS and botocore require) is rejected
  // there, as it is for botocore itself. The client then lists from the
  // part of the prefix before its first '/', without a delimiter, and groups
  // the keys itself: same answer, across pages. "s3://data/shardsX" must not
  // leak into "s3://data/shards/".
  ASSERT_TRUE(client->Put("s3://data/shardsX/d.tar", "d").ok());
  for (int page : {1, 2, 1000}) {
    S3Options o = Options();
    o.list_page_size = page;
    auto c = Client(o);
    auto level = c->List("s3://data/shards/", false);
    ASSERT_TRUE(level.ok()) << level.status();
    ASSERT_EQ(level->size(), 3u) << page;
    EXPECT_EQ((*level)[0].url, "s3://data/shards/a.tar");
    EXPECT_EQ((*level)[0].size, data.size());
    EXPECT_FALSE((*level)[0].is_dir);
    EXPECT_EQ((*level)[1].url, "s3://data/shards/b.tar");
    EXPECT_EQ((*level)[2].url, "s3://data/shards/sub/");
    EXPECT_TRUE((*level)[2].is_dir);
    auto deep = c->List("s3://data/shards/sub/", true);
    ASSERT_TRUE(deep.ok()) << deep.status();
    ASSERT_EQ(deep->size(), 1u);
    EXPECT_EQ((*deep)[0].url, "s3://data/shards/sub/c.tar");
    auto top = c->List("s3://data/", false);  // a bare delimiter
    ASSERT_TRUE(top.ok()) << top.status();
    std::vector<std::string> urls;
    for (const auto& f : *top) urls.push_back(f.url);
    EXPECT_NE(std::find(urls.begin(), urls.end(), "s3://data/shards/"), urls.end());
    EXPECT_NE(std::find(urls.begin(), urls.end(), "s3://data/shardsX/"), urls.end());
    // Through the Source as well (the checkpoint remotes' path).
    auto src = NewS3Source(c)->List("s3://data/shards");
    ASSERT_TRUE(src.ok()) << src.status();
    EXPECT_EQ(src->size(), 3u);
  }
  ASSERT_TRUE(client->Delete("s3://data/shardsX/d.tar").ok());
}

TEST_F(S3SourceTest, LargeObjectsAreReadInSignedRangedParts) {
  testing::ScopedTransferOptions options([](TransferOptions& o) { o.part_size = 64 << 10; });
  auto client = Client();
  std::string data = RandomBytes(1 << 20, 3);
  ASSERT_TRUE(client->Put("s3://data/parts/big.tar", data).ok());
  auto before = GetTransferStats();
  auto in = client->Get("s3://data/parts/big.tar", 1000, data.size());
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAll(**in);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(*all == data.substr(1000)) << "bytes differ";
  auto after = GetTransferStats();
  EXPECT_EQ(after.parted_streams, before.parted_streams + 1);
  EXPECT_EQ(after.parts - before.parts, 15u);  // every part but the first GET's was signed
}

TEST_F(S3SourceTest, KeysWithSpacesRoundTrip) {
  auto client = Client();
  // (Non-ASCII keys and sub-delimiters such as '+' or '(': moto verifies over
  // a re-quoted path and rejects them, botocore's signatures included;
  // sigv4_test proves ours byte-identical to botocore's for those.)
  for (std::string key : {"my dir/part 1 of 2.tar", "x-y_z.w~v.tar"}) {
    std::string url = "s3://data/" + key;
    Status put = client->Put(url, "payload:" + key);
    ASSERT_TRUE(put.ok()) << put;
    auto in = client->Get(url);
    ASSERT_TRUE(in.ok()) << in.status();
    EXPECT_EQ(*ReadAll(**in), "payload:" + key);
    auto list = client->List("s3://data/" + key.substr(0, 3), true);
    ASSERT_TRUE(list.ok()) << list.status();
    bool found = false;
    for (auto& f : *list) found |= f.url == url;
    EXPECT_TRUE(found) << key;
  }
}

TEST_F(S3SourceTest, WrongSecretIsAClearAuthError) {
  S3Options o = Options();
  o.secret_key = "wrong-secret-value-123";
  auto client = Client(o);
  internal::ScopedLogCapture capture;
  auto in = client->Get("s3://data/anything.tar");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kAuth) << in.status();
  EXPECT_NE(in.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << in.status();
  EXPECT_NE(in.status().message().find("s3://data/anything.tar"), std::string::npos);
  Status put = client->Put("s3://data/x", "x");
  EXPECT_EQ(put.code(), StatusCode::kAuth) << put;
  auto head = client->Head("s3://data/x");
  EXPECT_EQ(head.status().code(), StatusCode::kAuth) << head.status();
  for (const std::string& text : {in.status().ToString(), put.ToString(), capture.Text()}) {
    EXPECT_EQ(text.find("wrong-secret-value-123"), std::string::npos) << text;
    EXPECT_EQ(text.find(moto_->secret_key()), std::string::npos) << text;
    EXPECT_EQ(text.find("Signature="), std::string::npos) << text;
  }
}

TEST_F(S3SourceTest, MissingObjectAndBucketAreNotFound) {
  auto client = Client();
  auto in = client->Get("s3://data/missing.tar");
  ASSERT_FALSE(in.ok());
  EXPECT_EQ(in.status().code(), StatusCode::kNotFound) << in.status();
  EXPECT_NE(in.status().message().find("NoSuchKey"), std::string::npos) << in.status();
  EXPECT_EQ(client->Head("s3://data/missing.tar").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(client->Get("s3://no-such-bucket/k").status().code(), StatusCode::kNotFound);
}

TEST_F(S3SourceTest, MultipartUploadAndListAbort) {
  S3Options o = Options();
  o.multipart_threshold = 1 << 20;
  o.part_size = 5 << 20;
  auto client = Client(o);
  testing::TempDir dir;
  std::string data = RandomBytes((11 << 20) + 123, 2);
  testing::WriteFile(dir.Join("big.bin"), data);
  Status s = client->PutFile("s3://data/ckpt/big.bin", dir.Join("big.bin"));
  ASSERT_TRUE(s.ok()) << s;
  auto in = client->Get("s3://data/ckpt/big.bin");
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAll(**in);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), data.size());
  EXPECT_TRUE(*all == data);

  auto id = client->CreateMultipartUpload("s3://data/ckpt/pending.bin");
  ASSERT_TRUE(id.ok()) << id.status();
  auto etag = client->UploadPart("s3://data/ckpt/pending.bin", *id, 1, "part one");
  ASSERT_TRUE(etag.ok()) << etag.status();
  EXPECT_FALSE(etag->empty());
  auto uploads = client->ListMultipartUploads("s3://data/ckpt");
  ASSERT_TRUE(uploads.ok()) << uploads.status() << " ";
  ASSERT_EQ(uploads->size(), 1u);
  EXPECT_EQ((*uploads)[0].key, "ckpt/pending.bin");
  EXPECT_EQ((*uploads)[0].upload_id, *id);
  ASSERT_TRUE(client->AbortMultipartUpload("s3://data/ckpt/pending.bin", *id).ok());
  EXPECT_TRUE(client->ListMultipartUploads("s3://data/ckpt")->empty());
  // A small upload completes from parts the caller sends itself.
  auto id2 = client->CreateMultipartUpload("s3://data/ckpt/small.bin");
  ASSERT_TRUE(id2.ok());
  auto e1 = client->UploadPart("s3://data/ckpt/small.bin", *id2, 1, "only part");
  ASSERT_TRUE(e1.ok());
  ASSERT_TRUE(client->CompleteMultipartUpload("s3://data/ckpt/small.bin", *id2, {{1, *e1}}).ok());
  EXPECT_EQ(*client->GetRange("s3://data/ckpt/small.bin", 0, 100), "only part");
}

TEST_F(S3SourceTest, DefaultSourceUsesTheEnvironment) {
  testing::TempDir home;
  testing::WriteFile(home.Join("credentials"), "[other]\naws_access_key_id = " +
                                                   moto_->access_key() +
                                                   "\naws_secret_access_key = " +
                                                   moto_->secret_key() + "\n");
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", home.Join("credentials").c_str(), 1);
  ::setenv("AWS_PROFILE", "other", 1);
  ::setenv("AWS_ENDPOINT_URL_S3", moto_->endpoint().c_str(), 1);
  ::setenv("AWS_REGION", "us-east-1", 1);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  auto src = DefaultSource();
  // No rename on S3: WriteFileAtomic writes the final key (an object appears whole).
  Status w = WriteFileAtomic(*src, "s3://data/env/file.txt", "atomic via env");
  ASSERT_TRUE(w.ok()) << w;
  auto atomic = ReadFileToString(*src, "s3://data/env/file.txt");
  ASSERT_TRUE(atomic.ok()) << atomic.status();
  EXPECT_EQ(*atomic, "atomic via env");
  auto file = src->NewWritableFile("s3://data/env/file.txt");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_TRUE((*file)->Append("via env").ok());
  ASSERT_TRUE((*file)->Close().ok());
  auto text = ReadFileToString(*src, "s3://data/env/file.txt");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "via env");
  auto info = src->Stat("s3://data/env/file.txt");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 7u);
  auto ra = src->OpenRandomAccess("s3://data/env/file.txt");
  ASSERT_TRUE(ra.ok());
  char buf[3];
  EXPECT_EQ(*(*ra)->ReadAt(4, 3, buf), 3u);
  EXPECT_EQ(std::string(buf, 3), "env");

  // A prefetch through the default source starts the stream, and the open
  // takes it over: one stream in all.
  const uint64_t streams = GetTransferStats().streams;
  src->Prefetch("s3://data/env/file.txt");
  for (int i = 0; i < 500 && GetTransferStats().streams == streams; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(GetTransferStats().streams, streams + 1);
  auto prefetched = src->OpenInputStream("s3://data/env/file.txt", 0);
  ASSERT_TRUE(prefetched.ok()) << prefetched.status();
  EXPECT_EQ(*ReadAll(**prefetched), "via env");
  EXPECT_EQ(GetTransferStats().streams, streams + 1);

  // Environment keys take precedence over the profile.
  ::setenv("AWS_ACCESS_KEY_ID", moto_->access_key().c_str(), 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret", 1);
  EXPECT_EQ(src->Stat("s3://data/env/file.txt").status().code(), StatusCode::kAuth);
  for (const char* v : {"AWS_SHARED_CREDENTIALS_FILE", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3",
                        "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
    ::unsetenv(v);
}

// SlowDown (503) is retried; our fault server stands in for S3 here since
// moto cannot be told to throttle.
TEST(S3RetryTest, SlowDownIsRetried) {
  testing::TempDir root;
  ::mkdir(root.Join("bucket").c_str(), 0755);
  testing::WriteFile(root.Join("bucket/key.tar"), "object bytes");
  testing::HttpTestServer server(root.path());
  server.AddFault({{"kind", "status"}, {"code", 503}, {"count", 2},
                   {"body", "<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"}});
  S3Options o;
  o.endpoint = server.Url("");
  o.access_key = "AKIDEXAMPLE";
  o.secret_key = "secret";
  o.http.initial_backoff_s = 0.001;
  auto client = S3Client::Make(o);
  ASSERT_TRUE(client.ok());
  auto in = (*client)->Get("s3://bucket/key.tar");
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(*ReadAll(**in), "object bytes");
  EXPECT_EQ(server.Requests().size(), 4u);  // 1 control + 2 SlowDown + 1 success

  server.AddFault({{"kind", "status"}, {"code", 503}, {"count", -1},
                   {"body", "<Error><Code>SlowDown</Code></Error>"}});
  o.http.max_retries = 1;
  auto strict = S3Client::Make(o);
  auto failed = (*strict)->Get("s3://bucket/key.tar");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(failed.status().message().find("SlowDown"), std::string::npos) << failed.status();
}

TEST(S3ConfigTest, MissingCredentialsIsAuthError) {
  testing::TempDir empty;
  ::setenv("AWS_SHARED_CREDENTIALS_FILE", empty.Join("none").c_str(), 1);
  ::unsetenv("AWS_ACCESS_KEY_ID");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  auto client = S3Client::Make();
  EXPECT_EQ(client.status().code(), StatusCode::kAuth);
  EXPECT_EQ(DefaultSource()->Stat("s3://b/k").status().code(), StatusCode::kAuth);
  ::unsetenv("AWS_SHARED_CREDENTIALS_FILE");
}

}  // namespace
}  // namespace shardstream
