// Every source of the credential chain against real servers on loopback:
// moto's STS and S3 with signing enforced and expiry enforced
// (tests/servers/moto_server.py), an EC2 instance metadata and container
// credentials server that hands out real temporary credentials
// (tests/servers/aws_metadata_server.py), and a TCP proxy that breaks a long
// GET in the middle (tests/servers/fault_proxy.py). Credentials expire after
// a few seconds here, so reads and uploads cross real expiries.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "common/log_capture.h"
#include "shardstream/aws_credentials.h"
#include "shardstream/s3.h"
#include "support/aws_env.h"
#include "support/http_server.h"
#include "support/test_util.h"
#include "support/transfer_options.h"

namespace shardstream {
namespace {

using testing::AwsMetadataServer;
using testing::FaultProxy;
using testing::MotoServer;
using testing::ScopedAwsEnv;
using testing::TempDir;
using testing::WriteFile;
using Clock = std::chrono::steady_clock;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

// A request that timed out: curl's low-speed limit or the transfer's own
// watch, whichever fires first.
bool Stalled(const std::string& m) {
  return m.find("Operation too slow") != std::string::npos ||
         m.find("(stalled)") != std::string::npos;
}

class AwsCredentialServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    moto_ = new MotoServer();
    ASSERT_FALSE(moto_->role_arn().empty());
    S3Options o;
    o.endpoint = moto_->endpoint();
    o.access_key = moto_->access_key();
    o.secret_key = moto_->secret_key();
    auto admin = S3Client::Make(o);
    ASSERT_TRUE(admin.ok()) << admin.status();
    admin_ = new std::shared_ptr<S3Client>(*admin);
    ASSERT_TRUE((*admin_)->CreateBucket("creds").ok());
    ASSERT_TRUE((*admin_)->Put("s3://creds/hello.txt", "hello from moto").ok());
  }
  static void TearDownTestSuite() {
    delete admin_;
    delete moto_;
    admin_ = nullptr;
    moto_ = nullptr;
  }
  // A client built as DefaultSource builds it: everything from the environment.
  static Result<std::shared_ptr<S3Client>> EnvClient(S3Options o = {}) {
    o.http.initial_backoff_s = 0.01;
    return S3Client::Make(std::move(o));
  }
  // Reads the object the suite put, and writes one, through `client`.
  static void ExpectReadWrite(S3Client& client, const std::string& key) {
    auto text = client.GetRange("s3://creds/hello.txt", 0, 100);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, "hello from moto");
    ASSERT_TRUE(client.Put("s3://creds/" + key, "written").ok());
    EXPECT_EQ(*(*admin_)->GetRange("s3://creds/" + key, 0, 100), "written");
  }
  static MotoServer* moto_;
  static std::shared_ptr<S3Client>* admin_;
};
MotoServer* AwsCredentialServerTest::moto_ = nullptr;
std::shared_ptr<S3Client>* AwsCredentialServerTest::admin_ = nullptr;

TEST_F(AwsCredentialServerTest, WebIdentityAsOnEksReadsAndWrites) {
  TempDir dir;
  WriteFile(dir.Join("token"), "eyJhbGciOiJSUzI1NiJ9.web-identity-token-value.sig\n");
  ScopedAwsEnv env({{"AWS_WEB_IDENTITY_TOKEN_FILE", dir.Join("token")},
                    {"AWS_ROLE_ARN", moto_->role_arn()},
                    {"AWS_ROLE_SESSION_NAME", "trainer-0"},
                    {"AWS_ENDPOINT_URL", moto_->endpoint()}});
  internal::ScopedLogCapture log;
  auto chain = DefaultAwsCredentialChain();
  auto creds = chain->Get();
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_EQ(creds->source, "web identity (role " + moto_->role_arn() + ")");
  EXPECT_FALSE(creds->session_token.empty());
  ASSERT_TRUE(creds->expiration);
  auto client = EnvClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectReadWrite(**client, "web-identity.txt");
  std::string text = log.Text();
  EXPECT_NE(text.find("AWS credentials from web identity (role " + moto_->role_arn()),
            std::string::npos) << text;
  for (const std::string& secret : {creds->secret_key, creds->session_token,
                                    std::string("web-identity-token-value")})
    EXPECT_EQ(text.find(secret), std::string::npos);
}

TEST_F(AwsCredentialServerTest, AssumeRoleThroughAChainOfSourceProfilesSignsWithTheSource) {
  TempDir dir;
  WriteFile(dir.Join("credentials"), "[base]\naws_access_key_id = " + moto_->access_key() +
                                         "\naws_secret_access_key = " + moto_->secret_key() +
                                         "\n[keyed-source]\naws_access_key_id = " + moto_->access_key() +
                                         "\naws_secret_access_key = " + moto_->secret_key() +
                                         // A role set in the credentials file.
                                         "\n[in-creds]\nrole_arn = " + moto_->role_arn() +
                                         "\nsource_profile = base" +
                                         "\n[wrong]\naws_access_key_id = " + moto_->access_key() +
                                         "\naws_secret_access_key = not-the-secret\n");
  WriteFile(dir.Join("config"),
            "[profile reader]\nrole_arn = " + moto_->role_arn() +
                "\nsource_profile = base\nrole_session_name = reader-session\n"
                "duration_seconds = 900\n"
                "[profile chained]\nrole_arn = " + moto_->role_arn() +
                "\nsource_profile = reader\n"
                "[profile from-env]\nrole_arn = " + moto_->role_arn() +
                "\ncredential_source = Environment\n"
                "[profile rejected]\nrole_arn = " + moto_->role_arn() +
                "\nsource_profile = wrong\n"
                // A source profile with keys and a role of its own: its keys sign
                // (as botocore does), its role (a loop here) is not taken.
                "[profile keyed]\nrole_arn = " + moto_->role_arn() +
                "\nsource_profile = keyed-source\n"
                "[profile keyed-source]\nrole_arn = " + moto_->role_arn() +
                "\nsource_profile = keyed\n"
                "[profile local]\nservices = moto\n"
                "[services moto]\nsts =\n  endpoint_url = " + moto_->endpoint() +
                "\ns3 =\n  endpoint_url = " + moto_->endpoint() + "\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("credentials")},
                    {"AWS_ENDPOINT_URL", moto_->endpoint()}});
  for (const char* profile : {"reader", "chained", "keyed", "in-creds"}) {
    ScopedAwsEnv p({{"AWS_PROFILE", profile}});
    auto c = DefaultAwsCredentialChain()->Get();
    ASSERT_TRUE(c.ok()) << profile << ": " << c.status();
    EXPECT_NE(c->access_key, moto_->access_key());
    EXPECT_EQ(c->source.rfind("assume role " + moto_->role_arn() + " (profile '" + profile + "'", 0),
              0u) << c->source;
    EXPECT_NE(c->source.find(std::string("from profile '") +
                             (std::string(profile) == "keyed" ? "keyed-source" : "base") +
                             "' in " + dir.Join("credentials")),
              std::string::npos) << c->source;
    auto client = EnvClient();
    ASSERT_TRUE(client.ok()) << client.status();
    ExpectReadWrite(**client, std::string("assumed-") + profile + ".txt");
  }
  {
    ScopedAwsEnv p({{"AWS_PROFILE", "from-env"},
                    {"AWS_ACCESS_KEY_ID", moto_->access_key()},
                    {"AWS_SECRET_ACCESS_KEY", moto_->secret_key()}});
    // The environment's keys come first in the chain, so a named profile is
    // what makes the role apply: as with boto3.Session(profile_name=...).
    S3Options o;
    o.profile = "from-env";
    auto client = EnvClient(o);
    ASSERT_TRUE(client.ok()) << client.status();
    ExpectReadWrite(**client, "assumed-from-env.txt");
  }
  {
    ScopedAwsEnv p({{"AWS_PROFILE", "rejected"}});
    auto c = DefaultAwsCredentialChain()->Get();
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), StatusCode::kAuth);
    EXPECT_NE(c.status().message().find("assume role " + moto_->role_arn() + " with STS at " +
                                        moto_->endpoint()),
              std::string::npos) << c.status();
    EXPECT_EQ(c.status().message().find("not-the-secret"), std::string::npos);
  }
  {
    // Endpoints for both services from the profile's services section.
    ScopedAwsEnv p({{"AWS_ENDPOINT_URL", std::nullopt},
                    {"AWS_ACCESS_KEY_ID", moto_->access_key()},
                    {"AWS_SECRET_ACCESS_KEY", moto_->secret_key()},
                    {"AWS_PROFILE", "local"}});
    auto client = EnvClient();
    ASSERT_TRUE(client.ok()) << client.status();
    EXPECT_EQ((*client)->options().endpoint, moto_->endpoint());
    ExpectReadWrite(**client, "services-section.txt");
  }
}

TEST_F(AwsCredentialServerTest, InstanceMetadataUsesAnImdsV2Token) {
  AwsMetadataServer imds(*moto_, 3600, {"--require-token"});
  TempDir dir;
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url("/")},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  internal::ScopedLogCapture log;
  auto client = EnvClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectReadWrite(**client, "imds.txt");
  auto requests = imds.Log();
  // One token, the role, the credentials: then cached for every request
  // until 15 minutes before they expire.
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0]["method"], "PUT");
  EXPECT_EQ(requests[0]["path"], "/latest/api/token");
  for (size_t i = 1; i < requests.size(); ++i) {
    EXPECT_TRUE(requests[i]["token"].get<bool>()) << requests[i];
    EXPECT_EQ(requests[i]["status"], 200) << requests[i];
  }
  EXPECT_NE(log.Text().find("AWS credentials from instance metadata at " + imds.Url()),
            std::string::npos) << log.Text();
}

TEST_F(AwsCredentialServerTest, InstanceMetadataFallsBackToV1UnlessDisabled) {
  AwsMetadataServer imds(*moto_, 900);
  TempDir dir;
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url()},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  imds.AddFault({{"kind", "token_refused"}, {"code", 405}});
  auto client = EnvClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectReadWrite(**client, "imds-v1.txt");
  auto requests = imds.Log();
  EXPECT_EQ(requests[0]["status"], 405);
  EXPECT_FALSE(requests[1]["token"].get<bool>());

  ScopedAwsEnv v1({{"AWS_EC2_METADATA_V1_DISABLED", "true"}});
  imds.AddFault({{"kind", "token_refused"}, {"code", 403}});
  auto refused = DefaultAwsCredentialChain()->Get();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("AWS_EC2_METADATA_V1_DISABLED forbids IMDSv1"),
            std::string::npos) << refused.status();
}

TEST_F(AwsCredentialServerTest, InstanceMetadataFailuresEndTheChainNamingTheCause) {
  AwsMetadataServer imds(*moto_, 900);
  TempDir dir;
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url()}});
  const std::string creds_path = "/latest/meta-data/iam/security-credentials/";
  struct Case {
    nlohmann::json fault;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{{"kind", "status"}, {"code", 404}, {"path_prefix", creds_path}}, "HTTP 404"},
      {{{"kind", "status"}, {"code", 500}, {"path_prefix", creds_path}}, "HTTP 500"},
      {{{"kind", "bad_json"}}, "the response is not JSON"},
      {{{"kind", "expired"}}, "the credentials returned expired at"},
      {{{"kind", "missing_field"}, {"field", "SecretAccessKey"}}, "has no SecretAccessKey"},
      {{{"kind", "stall"}, {"seconds", 20}, {"path_prefix", creds_path}}, "stalled"},
  };
  for (const auto& c : cases) {
    imds.ClearFaults();
    imds.AddFault(c.fault);
    internal::ScopedLogCapture log;
    auto t0 = Clock::now();
    auto got = DefaultAwsCredentialChain()->Get();
    double took = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_FALSE(got.ok()) << c.fault;
    EXPECT_EQ(got.status().code(), StatusCode::kAuth) << got.status();
    const std::string& m = got.status().message();
    EXPECT_NE(m.find("no AWS credentials"), std::string::npos) << m;
    EXPECT_NE(m.find("instance metadata at " + imds.Url()), std::string::npos) << m;
    EXPECT_TRUE(c.expect == "stalled" ? Stalled(m) : m.find(c.expect) != std::string::npos)
        << c.fault << ": " << m;
    // The default is 1 s and one attempt, as in botocore: far below the 20 s
    // stall, with room for a slow sanitizer build.
    EXPECT_LT(took, 10.0) << c.fault;
    for (const auto& r : imds.Log()) {
      if (!r["access_key_id"].is_null()) {
        EXPECT_EQ(m.find(r["access_key_id"].get<std::string>()), std::string::npos);
      }
    }
  }
}

TEST_F(AwsCredentialServerTest, ContainerCredentialsWithAnAuthorizationTokenFile) {
  AwsMetadataServer server(*moto_, 900, {"--container-token", "pod-identity-token-123"});
  TempDir dir;
  WriteFile(dir.Join("token"), "pod-identity-token-123\n");
  WriteFile(dir.Join("wrong"), "some-other-token\n");
  ScopedAwsEnv env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.Url("/container/v1/credentials")},
                    {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.Join("token")},
                    {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "ignored-when-the-file-is-set"},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  auto client = EnvClient();
  ASSERT_TRUE(client.ok()) << client.status();
  ExpectReadWrite(**client, "container.txt");
  EXPECT_TRUE(server.Log().at(0)["authorization"].get<bool>());

  ScopedAwsEnv wrong({{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.Join("wrong")},
                      {"AWS_METADATA_SERVICE_NUM_ATTEMPTS", "1"}});
  auto rejected = DefaultAwsCredentialChain()->Get();
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kAuth);
  EXPECT_NE(rejected.status().message().find("container credentials at " +
                                             server.Url("/container/v1/credentials")),
            std::string::npos) << rejected.status();
  EXPECT_NE(rejected.status().message().find("401"), std::string::npos) << rejected.status();
  EXPECT_EQ(rejected.status().message().find("some-other-token"), std::string::npos);

  ScopedAwsEnv right({{"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.Join("token")},
                      {"AWS_METADATA_SERVICE_TIMEOUT", "1"}});
  server.AddFault({{"kind", "bad_json"}});
  auto bad = DefaultAwsCredentialChain()->Get();
  EXPECT_NE(bad.status().message().find("the response is not JSON"), std::string::npos)
      << bad.status();
  // Containers get 2 s and 3 attempts (botocore's); options can shorten them.
  server.AddFault({{"kind", "stall"}, {"seconds", 20}});
  AwsCredentialOptions quick;
  quick.metadata_timeout_s = 1;
  quick.metadata_attempts = 1;
  auto t0 = Clock::now();
  auto stalled = DefaultAwsCredentialChain(quick)->Get();
  EXPECT_FALSE(stalled.ok());
  // 1 s and one attempt, far below the 20 s stall (3 x 2 s would be 6 s).
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 5.0);
  EXPECT_TRUE(Stalled(stalled.status().message())) << stalled.status();
  EXPECT_NE(stalled.status().message().find("container credentials at"), std::string::npos)
      << stalled.status();
}

// Temporary credentials that live 4 s, refreshed 2 s before expiry.
S3Options ShortLivedOptions() {
  S3Options o;
  o.credential_options.refresh_before_s = 2;
  o.credential_options.required_before_s = 1;
  o.http.initial_backoff_s = 0.01;
  return o;
}

TEST_F(AwsCredentialServerTest, RangedReadsCrossSeveralExpiries) {
  AwsMetadataServer imds(*moto_, 4);
  TempDir dir;
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url()},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  const std::string data = RandomBytes(4 << 20, 7);
  ASSERT_TRUE((*admin_)->Put("s3://creds/ranged.bin", data).ok());
  auto client = EnvClient(ShortLivedOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  // Credentials fixed at the start stop working: moto enforces the expiry.
  auto fixed = DefaultAwsCredentialChain()->Get();
  ASSERT_TRUE(fixed.ok());
  S3Options frozen;
  frozen.endpoint = moto_->endpoint();
  frozen.credentials = StaticAwsCredentials(*fixed);
  auto stale = S3Client::Make(frozen);
  ASSERT_TRUE(stale.ok());

  const size_t before = imds.Log().size();
  auto src = NewS3Source(*client);
  auto file = src->OpenRandomAccess("s3://creds/ranged.bin");
  ASSERT_TRUE(file.ok());
  std::string got(data.size(), '\0');
  const size_t chunk = 256 << 10;
  auto t0 = Clock::now();
  for (size_t off = 0; off < data.size(); off += chunk) {
    auto n = (*file)->ReadAt(off, chunk, &got[off]);
    ASSERT_TRUE(n.ok()) << "at " << off << ": " << n.status();
    ASSERT_EQ(*n, chunk);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // 16 reads over ~10 s
  }
  EXPECT_GT(Clock::now() - t0, std::chrono::seconds(9));
  EXPECT_TRUE(got == data);
  EXPECT_GE(imds.IssuedKeys(before).size(), 2u);  // a refresh for each expiry the read crossed
  auto refused = (*stale)->GetRange("s3://creds/ranged.bin", 0, 10);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kAuth);
  EXPECT_NE(refused.status().message().find("ExpiredToken"), std::string::npos) << refused.status();
}

TEST_F(AwsCredentialServerTest, AStreamBrokenAfterExpiryResumesWithFreshCredentials) {
  // The object's size: large enough to stream for a while (the stream is
  // paused past an expiry, then its connection is reset mid-body).
  const size_t size = size_t{256} << 20;
  // One GET, so that its own connection is the one reset (parts are signed
  // one by one as they are asked for: LaterPartsAreSignedWithFreshKeys).
  testing::ScopedTransferOptions one_get([](TransferOptions& o) { o.part_size = 0; });
  AwsMetadataServer imds(*moto_, 4);
  FaultProxy proxy(moto_->port());
  TempDir dir;
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url()},
                    {"AWS_ENDPOINT_URL_S3", proxy.Url()}});
  {
    std::string data = RandomBytes(size, 11);
    WriteFile(dir.Join("big.bin"), data);
  }
  S3Options up;
  up.endpoint = moto_->endpoint();
  up.access_key = moto_->access_key();
  up.secret_key = moto_->secret_key();
  up.part_size = 32 << 20;
  ASSERT_TRUE((*S3Client::Make(up))->PutFile("s3://creds/big.bin", dir.Join("big.bin")).ok());

  auto client = EnvClient(ShortLivedOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto in = (*client)->Get("s3://creds/big.bin", 0, size);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string expect = RandomBytes(size, 11);
  std::string buf(1 << 20, '\0');
  size_t pos = 0;
  bool broke = false;
  while (true) {
    auto n = (*in)->Read(buf.size(), buf.data());
    ASSERT_TRUE(n.ok()) << "at " << pos << ": " << n.status();
    if (*n == 0) break;
    ASSERT_EQ(std::memcmp(buf.data(), expect.data() + pos, *n), 0) << "at " << pos;
    pos += *n;
    if (!broke && pos >= (size_t{16} << 20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(4500));  // the GET's keys expire
      proxy.ResetAfter(size_t{8} << 20);
      broke = true;
    }
  }
  EXPECT_EQ(pos, size);
  auto stats = proxy.Stats();
  EXPECT_GE(stats["resets"].get<int>(), 1) << stats;
  EXPECT_GE(stats["connections"].get<int>(), 2) << stats;
  EXPECT_GE(imds.IssuedKeys().size(), 2u);
}

TEST_F(AwsCredentialServerTest, LaterPartsAreSignedWithFreshKeys) {
  const size_t size = size_t{64} << 20;
  testing::ScopedTransferOptions options([](TransferOptions& o) {
    o.part_size = 1 << 20;
    o.parts_per_stream = 2;  // parts asked for as the reader goes, across the expiry
  });
  AwsMetadataServer imds(*moto_, 4);
  ScopedAwsEnv env({{"AWS_EC2_METADATA_DISABLED", std::nullopt},
                    {"AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.Url()},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  S3Options up;
  up.endpoint = moto_->endpoint();
  up.access_key = moto_->access_key();
  up.secret_key = moto_->secret_key();
  const std::string data = RandomBytes(size, 12);
  ASSERT_TRUE((*S3Client::Make(up))->Put("s3://creds/parts.bin", data).ok());
  auto client = EnvClient(ShortLivedOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto in = (*client)->Get("s3://creds/parts.bin", 0, size);
  ASSERT_TRUE(in.ok()) << in.status();
  std::string buf(1 << 20, '\0');
  size_t pos = 0;
  while (true) {
    auto n = (*in)->Read(buf.size(), buf.data());
    ASSERT_TRUE(n.ok()) << "at " << pos << ": " << n.status();
    if (*n == 0) break;
    ASSERT_EQ(std::memcmp(buf.data(), data.data() + pos, *n), 0) << "at " << pos;
    pos += *n;
    if (pos == (size_t{8} << 20)) std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  }
  EXPECT_EQ(pos, size);
  EXPECT_GE(imds.IssuedKeys().size(), 2u);  // parts after the pause were signed with new keys
}

TEST_F(AwsCredentialServerTest, AMultipartUploadCrossesExpiries) {
  AwsMetadataServer server(*moto_, 4, {"--container-token", "t0k"});
  TempDir dir;
  WriteFile(dir.Join("token"), "t0k");
  ScopedAwsEnv env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", server.Url("/container/creds")},
                    {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", dir.Join("token")},
                    {"AWS_ENDPOINT_URL_S3", moto_->endpoint()}});
  auto client = EnvClient(ShortLivedOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string url = "s3://creds/multipart.bin";
  auto id = (*client)->CreateMultipartUpload(url);
  ASSERT_TRUE(id.ok()) << id.status();
  std::vector<S3Part> parts;
  std::string all;
  for (int i = 1; i <= 6; ++i) {  // a part every 1.5 s: about 2 expiries
    std::string part = RandomBytes(5 << 20, 100 + i);
    auto etag = (*client)->UploadPart(url, *id, i, part);
    ASSERT_TRUE(etag.ok()) << "part " << i << ": " << etag.status();
    parts.push_back({i, *etag});
    all += part;
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  }
  ASSERT_TRUE((*client)->CompleteMultipartUpload(url, *id, parts).ok());
  auto back = (*admin_)->GetRange(url, 0, all.size());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == all);
  EXPECT_GE(server.IssuedKeys().size(), 3u);
}

// STS throttles with 400 Throttling: retried with backoff, as botocore does.
// Our fault server stands in for STS (moto cannot throttle).
TEST(AwsStsRetryTest, ThrottlingIsRetried) {
  TempDir root, dir;
  testing::HttpTestServer sts(root.path());
  sts.AddFault({{"kind", "status"}, {"code", 400}, {"method", "POST"}, {"count", 2},
                {"body", "<ErrorResponse><Error><Code>Throttling</Code><Message>Rate exceeded"
                         "</Message></Error></ErrorResponse>"}});
  sts.AddFault({{"kind", "status"}, {"code", 403}, {"method", "POST"}, {"count", 1},
                {"body", "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>No "
                         "OpenIDConnect provider found</Message></Error></ErrorResponse>"}});
  WriteFile(dir.Join("token"), "a-token");
  ScopedAwsEnv env({{"AWS_WEB_IDENTITY_TOKEN_FILE", dir.Join("token")},
                    {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r"},
                    {"AWS_ENDPOINT_URL_STS", sts.Url("")}});
  AwsCredentialOptions o;
  o.http.initial_backoff_s = 0.01;
  auto got = DefaultAwsCredentialChain(o)->Get();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kAuth);
  EXPECT_NE(got.status().message().find("InvalidIdentityToken"), std::string::npos) << got.status();
  EXPECT_EQ(got.status().message().find("a-token"), std::string::npos);
  int posts = 0;
  for (const auto& r : sts.Requests()) posts += r["method"] == "POST" && r["path"] == "/";
  EXPECT_EQ(posts, 3);
}

TEST_F(AwsCredentialServerTest, TheCommandLineUsesTheChain) {
  ScopedAwsEnv clean({});  // the commands see only the variables set below
  TempDir dir;
  testing::WriteFile(dir.Join("000.txt"), "one");
  testing::WriteFile(dir.Join("000.cls"), "1");
  ASSERT_EQ(testing::RunCommand("cd " + dir.path() + " && tar cf shard.tar 000.txt 000.cls"), 0);
  S3Options up;
  up.endpoint = moto_->endpoint();
  up.access_key = moto_->access_key();
  up.secret_key = moto_->secret_key();
  ASSERT_TRUE((*S3Client::Make(up))->PutFile("s3://creds/cli/shard.tar", dir.Join("shard.tar")).ok());
  WriteFile(dir.Join("token"), "cli-token");
  std::string env = "env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY AWS_EC2_METADATA_DISABLED=true"
                    " AWS_CONFIG_FILE=" + dir.Join("none") +
                    " AWS_SHARED_CREDENTIALS_FILE=" + dir.Join("none") +
                    " AWS_WEB_IDENTITY_TOKEN_FILE=" + dir.Join("token") +
                    " AWS_ROLE_ARN=" + moto_->role_arn() + " AWS_ENDPOINT_URL=" + moto_->endpoint() +
                    " SHARDSTREAM_LOG_LEVEL=debug ";
  std::string out;
  int rc = testing::RunCommand(env + testing::CliPath() + " ls s3://creds/cli/shard.tar 2>&1", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("000"), std::string::npos) << out;
  EXPECT_NE(out.find("AWS credentials from web identity"), std::string::npos) << out;
  EXPECT_EQ(out.find("cli-token"), std::string::npos) << out;
  rc = testing::RunCommand(env + testing::CliPath() + " manifest s3://creds/cli/shard.tar --out " +
                               dir.Join("m.jsonl") + " 2>&1 && " + env + testing::CliPath() +
                               " verify " + dir.Join("m.jsonl") + " --samples 2>&1",
                           &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out.find("cli-token"), std::string::npos) << out;
  rc = testing::RunCommand(env + testing::CliPath() + " ckpt ls --remote s3://creds/ckpt/ 2>&1", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("no committed checkpoints"), std::string::npos) << out;
  // Without any source the command names what it tried.
  rc = testing::RunCommand("env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY -u AWS_PROFILE "
                           "AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE=" + dir.Join("none") +
                               " AWS_SHARED_CREDENTIALS_FILE=" + dir.Join("none") + " " +
                               testing::CliPath() + " ls s3://creds/cli/shard.tar 2>&1",
                           &out);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("no AWS credentials"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardstream
