// The credential chain's parts that need no server: the shared files, the
// environment, credential_process (real child processes), refresh and its
// failure windows, and the errors of bad configuration. The sources that talk
// to STS, instance metadata and containers are tested against real servers
// in aws_credentials_server_test.cc.
#include "shardstream/aws_credentials.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "shardstream/s3.h"
#include "common/log_capture.h"
#include "s3/aws_config_file.h"
#include "s3/credential_fetch.h"
#include "support/aws_env.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::ScopedAwsEnv;
using testing::TempDir;
using testing::WriteFile;

TEST(AwsConfigFileTest, ProfilesNestedKeysAndServicesSections) {
  auto ini = internal::ParseIni(
      "[default]\nregion = eu-west-1\n# comment\n; other\n"
      "[profile gcs]\nendpoint_url = https://storage.googleapis.com\ns3 =\n"
      "  addressing_style = path\n  signature_version = s3v4\nregion=auto\n"
      "[profile local]\nservices = local-svc\n"
      "[services local-svc]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n"
      "sts =\n  endpoint_url = http://127.0.0.1:9001\n");
  EXPECT_EQ(ini["default"]["region"], "eu-west-1");
  EXPECT_EQ(ini["profile gcs"]["s3.addressing_style"], "path");
  EXPECT_EQ(ini["profile gcs"]["s3.signature_version"], "s3v4");
  EXPECT_EQ(ini["profile gcs"]["region"], "auto");  // a top-level key after the nested ones
  EXPECT_EQ(ini["services local-svc"]["sts.endpoint_url"], "http://127.0.0.1:9001");

  TempDir dir;
  WriteFile(dir.Join("config"),
            "[profile gcs]\nendpoint_url = https://storage.googleapis.com/\n"
            "[profile local]\nservices = local-svc\nendpoint_url = http://ignored\n"
            "[services local-svc]\ns3 =\n  endpoint_url = http://127.0.0.1:9000\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")}});
  auto files = internal::AwsSharedFiles::Load();
  EXPECT_EQ(internal::ConfiguredEndpoint(files, "gcs", "s3"), "https://storage.googleapis.com");
  EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "s3"), "http://127.0.0.1:9000");
  EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "sts"), "http://ignored");
  {
    ScopedAwsEnv more({{"AWS_ENDPOINT_URL_S3", "http://env-s3"}});
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "s3"), "http://env-s3");
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "sts"), "http://ignored");
  }
  {
    // botocore's order: the service's variable, the services section, the
    // global variable, the profile's endpoint_url.
    ScopedAwsEnv more({{"AWS_ENDPOINT_URL", "http://env-global"}});
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "s3"), "http://127.0.0.1:9000");
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "local", "sts"), "http://env-global");
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "gcs", "s3"), "http://env-global");
  }
  {
    ScopedAwsEnv more({{"AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"}});
    EXPECT_EQ(internal::ConfiguredEndpoint(files, "gcs", "s3"), "");
  }
}

TEST(AwsConfigFileTest, S3OptionsTakeTheProfilesEndpointRegionAndAddressing) {
  TempDir dir;
  WriteFile(dir.Join("config"),
            "[profile gcs]\nendpoint_url = https://storage.googleapis.com\nregion = auto\n"
            "s3 =\n  addressing_style = virtual\n");
  WriteFile(dir.Join("credentials"), "[gcs]\naws_access_key_id = GOOG1EXAMPLE\n"
                                     "aws_secret_access_key = hmac-secret\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("credentials")},
                    {"AWS_PROFILE", "gcs"}});
  auto client = S3Client::Make();
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ((*client)->options().endpoint, "https://storage.googleapis.com");
  EXPECT_EQ((*client)->options().region, "auto");
  EXPECT_EQ((*client)->HttpUrl("bucket", "a/b.tar"), "https://bucket.storage.googleapis.com/a/b.tar");
  S3Options path;
  path.path_style = true;
  auto c2 = S3Client::Make(path);
  ASSERT_TRUE(c2.ok());
  EXPECT_EQ((*c2)->HttpUrl("bucket", "a/b.tar"), "https://storage.googleapis.com/bucket/a/b.tar");
}

TEST(AwsTimeTest, Iso8601WithZoneFractionAndOffset) {
  using std::chrono::system_clock;
  auto base = internal::ParseIso8601Time("2026-11-25T21:30:00Z");
  ASSERT_TRUE(base);
  EXPECT_EQ(system_clock::to_time_t(*base), 1795642200);
  EXPECT_EQ(internal::ParseIso8601Time("2026-11-25T21:30:00.123456Z"), base);
  EXPECT_EQ(internal::ParseIso8601Time("2026-11-25T22:30:00+01:00"), base);
  EXPECT_EQ(internal::ParseIso8601Time("2026-11-25T20:30:00-01:00"), base);
  EXPECT_EQ(internal::ParseIso8601Time("2026-11-25T22:30:00+0100"), base);
  EXPECT_EQ(internal::ParseIso8601Time("2026-11-25 21:30:00Z"), base);
  // Past what the clock holds: never expires (no overflow).
  EXPECT_EQ(internal::ParseIso8601Time("9999-12-31T23:59:59Z"),
            std::chrono::system_clock::time_point::max());
  EXPECT_FALSE(internal::ParseIso8601Time("tomorrow"));
  EXPECT_FALSE(internal::ParseIso8601Time("2026-11-25T21:30:00+1"));
  EXPECT_FALSE(internal::ParseIso8601Time("2026-11-25T21:30:00 PST"));
  EXPECT_EQ(internal::FormatIso8601(*base), "2026-11-25T21:30:00Z");
}

TEST(AwsCredentialJsonTest, MalformedResponsesNameTheFieldNeverTheBody) {
  auto bad = internal::CredentialsFromJson(
      "{\"AccessKeyId\": \"AKIDX\", \"SecretAccessKey\": \"topsecret", "test source", false);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kAuth);
  EXPECT_NE(bad.status().message().find("test source: the response is not JSON"),
            std::string::npos) << bad.status();
  EXPECT_EQ(bad.status().message().find("topsecret"), std::string::npos);
  EXPECT_EQ(bad.status().message().find("AKIDX"), std::string::npos);
  auto missing = internal::CredentialsFromJson("{\"AccessKeyId\": \"AK\", \"Token\": \"t\"}",
                                               "test source", false);
  EXPECT_NE(missing.status().message().find("has no SecretAccessKey"), std::string::npos);
  auto expired = internal::CredentialsFromJson(
      R"({"AccessKeyId":"AK","SecretAccessKey":"very-secret","Expiration":"2020-01-01T00:00:00Z"})",
      "test source", false);
  EXPECT_NE(expired.status().message().find("expired at 2020-01-01T00:00:00Z"), std::string::npos);
  EXPECT_EQ(expired.status().message().find("very-secret"), std::string::npos);
  auto no_exp = internal::CredentialsFromJson(R"({"AccessKeyId":"AK","SecretAccessKey":"S"})",
                                              "imds", true);
  EXPECT_NE(no_exp.status().message().find("has no Expiration"), std::string::npos);
  auto code = internal::CredentialsFromJson(R"({"Code":"AssumeRoleUnauthorizedAccess"})", "imds",
                                            true);
  EXPECT_NE(code.status().message().find("Code AssumeRoleUnauthorizedAccess"), std::string::npos);
}

TEST(AwsContainerUrlTest, RelativeAndFullUrisAsTheSdksAllowThem) {
  EXPECT_EQ(*internal::ContainerCredentialsUrl("/v2/credentials/abc", ""),
            "http://169.254.170.2/v2/credentials/abc");
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", "http://127.0.0.1:51679/creds"),
            "http://127.0.0.1:51679/creds");
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", "http://169.254.170.23/v1/credentials"),
            "http://169.254.170.23/v1/credentials");
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", "http://[fd00:ec2::23]/v1/credentials"),
            "http://[fd00:ec2::23]/v1/credentials");
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", "https://creds.example.com/x"),
            "https://creds.example.com/x");
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", ""), "");
  EXPECT_EQ(internal::ContainerCredentialsUrl("", "http://127.0.0.1.nip.io/creds").status().code(),
            StatusCode::kConfig);  // a name, not a loopback address
  EXPECT_EQ(*internal::ContainerCredentialsUrl("", "http://127.8.9.10:80/c"), "http://127.8.9.10:80/c");
  {
    // A token with a line break would forge headers: refused before any request.
    ScopedAwsEnv env({{"AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/creds"},
                      {"AWS_CONTAINER_AUTHORIZATION_TOKEN", "abc\r\nX-Forged: 1"}});
    Status s = DefaultAwsCredentialChain()->Get().status();
    EXPECT_EQ(s.code(), StatusCode::kConfig);
    EXPECT_NE(s.message().find("the authorization token holds a line break"), std::string::npos)
        << s;
  }
  auto refused = internal::ContainerCredentialsUrl("", "http://10.0.0.5/creds");
  EXPECT_EQ(refused.status().code(), StatusCode::kConfig);
  EXPECT_NE(refused.status().message().find("AWS_CONTAINER_CREDENTIALS_FULL_URI"),
            std::string::npos);
}

TEST(AwsEnvironmentCredentialsTest, KeysTokenAndPartialKeys) {
  ScopedAwsEnv env({{"AWS_ACCESS_KEY_ID", "AKENV"},
                    {"AWS_SECRET_ACCESS_KEY", "env-secret"},
                    {"AWS_SESSION_TOKEN", "env-token"}});
  auto c = DefaultAwsCredentialChain()->Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "AKENV");
  EXPECT_EQ(c->session_token, "env-token");
  EXPECT_EQ(c->source, "environment");
  ScopedAwsEnv partial({{"AWS_SECRET_ACCESS_KEY", std::nullopt}});
  auto p = DefaultAwsCredentialChain()->Get();
  EXPECT_EQ(p.status().code(), StatusCode::kAuth);
  EXPECT_NE(p.status().message().find("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"),
            std::string::npos) << p.status();
}

TEST(AwsProfileCredentialsTest, CredentialsFileThenConfigFileAndAnExplicitProfileSkipsTheEnvironment) {
  TempDir dir;
  WriteFile(dir.Join("credentials"), "[default]\naws_access_key_id = AKFILE\n"
                                     "aws_secret_access_key = file-secret\n"
                                     "[half]\naws_access_key_id = AKHALF\n");
  WriteFile(dir.Join("config"), "[profile cfg]\naws_access_key_id = AKCFG\n"
                                "aws_secret_access_key = cfg-secret\n");
  ScopedAwsEnv env({{"AWS_SHARED_CREDENTIALS_FILE", dir.Join("credentials")},
                    {"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_ACCESS_KEY_ID", "AKENV"},
                    {"AWS_SECRET_ACCESS_KEY", "env-secret"}});
  EXPECT_EQ(DefaultAwsCredentialChain()->Get()->access_key, "AKENV");
  AwsCredentialOptions named;
  named.profile = "default";
  auto c = DefaultAwsCredentialChain(named)->Get();
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->access_key, "AKFILE");
  EXPECT_NE(c->source.find("profile 'default' in " + dir.Join("credentials")), std::string::npos);
  named.profile = "cfg";
  EXPECT_EQ(DefaultAwsCredentialChain(named)->Get()->access_key, "AKCFG");
  named.profile = "half";
  auto half = DefaultAwsCredentialChain(named)->Get();
  EXPECT_NE(half.status().message().find("aws_secret_access_key is missing"), std::string::npos)
      << half.status();
  named.profile = "nowhere";
  auto none = DefaultAwsCredentialChain(named)->Get();
  EXPECT_EQ(none.status().code(), StatusCode::kConfig);
  EXPECT_NE(none.status().message().find("AWS profile 'nowhere' (S3Options::profile) is in neither"),
            std::string::npos) << none.status();
}

// What the chain says for a named profile.
Status ChainStatusFor(const std::string& profile) {
  AwsCredentialOptions o;
  o.profile = profile;
  return DefaultAwsCredentialChain(o)->Get().status();
}

TEST(AwsProfileCredentialsTest, AssumeRoleMisconfigurationsAreConfigErrors) {
  TempDir dir;
  WriteFile(dir.Join("config"),
            "[profile missing-source]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
            "source_profile = ghost\n"
            "[profile no-source]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
            "[profile both]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
            "source_profile = a\ncredential_source = Environment\n"
            "[profile a]\nrole_arn = arn:aws:iam::123456789012:role/r\nsource_profile = b\n"
            "[profile b]\nrole_arn = arn:aws:iam::123456789012:role/r\nsource_profile = a\n"
            "[profile odd-source]\nrole_arn = arn:aws:iam::123456789012:role/r\n"
            "credential_source = Laptop\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("none")}});
  Status s = ChainStatusFor("missing-source");
  EXPECT_EQ(s.code(), StatusCode::kConfig);
  EXPECT_NE(s.message().find("source_profile 'ghost' is in neither"), std::string::npos) << s;
  s = ChainStatusFor("no-source");
  EXPECT_NE(s.message().find("role_arn needs source_profile, credential_source or "
                             "web_identity_token_file"),
            std::string::npos) << s;
  s = ChainStatusFor("both");
  EXPECT_NE(s.message().find("source_profile and credential_source are both set"),
            std::string::npos) << s;
  s = ChainStatusFor("a");
  EXPECT_NE(s.message().find("leads back to itself"), std::string::npos) << s;
  s = ChainStatusFor("odd-source");
  EXPECT_NE(s.message().find("credential_source 'Laptop' is not Environment"), std::string::npos)
      << s;
}

// A credential_process script that counts its runs in `dir`/n and prints keys
// AKPROC<n> that expire `lifetime` seconds from now; with `fail_from` > 0,
// runs from that one on fail.
std::string CountingProcess(const TempDir& dir, int lifetime, int fail_from = 0) {
  std::string script = dir.Join("creds.sh");
  WriteFile(script,
            "#!/bin/sh\nn=$(( $(cat " + dir.Join("n") + " 2>/dev/null || echo 0) + 1 ))\n"
            "echo $n > " + dir.Join("n") + "\n"
            "if [ " + std::to_string(fail_from) + " -gt 0 ] && [ $n -ge " +
            std::to_string(fail_from) + " ]; then echo 'token service down' >&2; exit 3; fi\n"
            "exp=$(date -u -d \"+" + std::to_string(lifetime) + " seconds\" +%Y-%m-%dT%H:%M:%SZ)\n"
            "printf '{\"Version\": 1, \"AccessKeyId\": \"AKPROC%s\", \"SecretAccessKey\": "
            "\"proc-secret-%s\", \"SessionToken\": \"tok\", \"Expiration\": \"%s\"}' $n $n $exp\n");
  return "sh " + script;
}

TEST(AwsCredentialProcessTest, ProcessCredentialsAreRefreshedBeforeTheyExpire) {
  TempDir dir;
  WriteFile(dir.Join("config"), "[default]\ncredential_process = " + CountingProcess(dir, 10) + "\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("none")}});
  internal::ScopedLogCapture log;
  AwsCredentialOptions o;
  o.refresh_before_s = 4;
  o.required_before_s = 1;
  auto chain = DefaultAwsCredentialChain(o);
  auto first = chain->Get();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->access_key, "AKPROC1");
  EXPECT_EQ(first->source, "credential_process of profile 'default'");
  EXPECT_EQ(chain->Get()->access_key, "AKPROC1");  // cached: 9-10 s left, refresh from 4 s
  std::this_thread::sleep_for(std::chrono::milliseconds(7000));  // 2-3 s left
  EXPECT_EQ(chain->Get()->access_key, "AKPROC2");
  EXPECT_EQ(chain->Get()->access_key, "AKPROC2");
  std::string text = log.Text();
  EXPECT_NE(text.find("AWS credentials from credential_process of profile 'default'"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("proc-secret"), std::string::npos) << text;
}

TEST(AwsCredentialProcessTest, AFailedRefreshKeepsValidCredentialsThenFails) {
  TempDir dir;
  WriteFile(dir.Join("config"),
            "[default]\ncredential_process = " + CountingProcess(dir, 30, 2) + "\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("none")}});
  internal::ScopedLogCapture log;
  AwsCredentialOptions o;
  o.refresh_before_s = 12;
  o.required_before_s = 4;
  auto chain = DefaultAwsCredentialChain(o);
  ASSERT_EQ(chain->Get()->access_key, "AKPROC1");  // expires in 29-30 s
  std::this_thread::sleep_for(std::chrono::milliseconds(20000));
  // In the advisory window (9-10 s left; a run slowed down by 5 s is still
  // in it): the refresh fails, the current keys are kept, and the next call
  // within 5 s does not try again.
  auto kept = chain->Get();
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->access_key, "AKPROC1");
  EXPECT_NE(log.Text().find("keeping the current ones"), std::string::npos);
  EXPECT_EQ(chain->Get()->access_key, "AKPROC1");
  std::string runs;
  ASSERT_EQ(testing::RunCommand("cat " + dir.Join("n"), &runs), 0);
  EXPECT_EQ(std::stoi(runs), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(7000));  // 2-3 s left
  // In the mandatory window (or past the expiry, on a slow run: the same
  // refresh, the same failure): the failure is the caller's.
  auto failed = chain->Get();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kAuth);
  EXPECT_NE(failed.status().message().find(
                "profile 'default' (credential_process sh): exited with status 3: token service down"),
            std::string::npos) << failed.status();
}

TEST(AwsCredentialProcessTest, BadOutputsAreErrorsNamingTheProfile) {
  TempDir dir;
  auto run = [&](const std::string& body) {
    WriteFile(dir.Join("p.sh"), "#!/bin/sh\n" + body + "\n");
    return internal::RunCredentialProcess("sh " + dir.Join("p.sh") + " --secret-arg hunter2",
                                          "profile 'x'", 2).status();
  };
  Status s = run("echo not json");
  EXPECT_NE(s.message().find("profile 'x' (credential_process sh): the response is not JSON"),
            std::string::npos) << s;
  EXPECT_EQ(s.message().find("hunter2"), std::string::npos);
  s = run("echo '{\"AccessKeyId\": \"A\", \"SecretAccessKey\": \"S\"}'");
  EXPECT_NE(s.message().find("lacks \"Version\": 1"), std::string::npos) << s;
  s = run("echo '{\"Version\": 1, \"AccessKeyId\": \"A\"}'");
  EXPECT_NE(s.message().find("has no SecretAccessKey"), std::string::npos) << s;
  auto t0 = std::chrono::steady_clock::now();
  s = run("sleep 30");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  EXPECT_NE(s.message().find("still running after"), std::string::npos) << s;
  auto ok = internal::RunCredentialProcess(
      "printf '{\"Version\": 1, \"AccessKeyId\": \"A\", \"SecretAccessKey\": \"S\"}'", "p", 5);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE(ok->expiration);  // long-term keys
}

TEST(AwsCredentialChainTest, NothingFoundNamesWhatWasTried) {
  TempDir dir;
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("none")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("none2")}});
  auto s = DefaultAwsCredentialChain()->Get().status();
  EXPECT_EQ(s.code(), StatusCode::kAuth);
  EXPECT_NE(s.message().find("no AWS credentials"), std::string::npos) << s;
  EXPECT_NE(s.message().find(dir.Join("none2")), std::string::npos) << s;
  EXPECT_NE(s.message().find("AWS_EC2_METADATA_DISABLED"), std::string::npos) << s;
}

TEST(AwsWebIdentityTest, TokenFileWithoutRoleOrUnreadableIsAnErrorNamingIt) {
  TempDir dir;
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("none")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("none")},
                    {"AWS_WEB_IDENTITY_TOKEN_FILE", dir.Join("token")},
                    {"AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9"}});
  auto s = DefaultAwsCredentialChain()->Get().status();
  EXPECT_EQ(s.code(), StatusCode::kConfig);
  EXPECT_NE(s.message().find("AWS_WEB_IDENTITY_TOKEN_FILE is set but no role is"),
            std::string::npos) << s;
  ScopedAwsEnv role({{"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r"}});
  s = DefaultAwsCredentialChain()->Get().status();
  EXPECT_EQ(s.code(), StatusCode::kAuth);
  EXPECT_NE(s.message().find("web identity (token file " + dir.Join("token") +
                             ", role arn:aws:iam::123456789012:role/r): cannot read"),
            std::string::npos) << s;
  WriteFile(dir.Join("token"), "\n");
  s = DefaultAwsCredentialChain()->Get().status();
  EXPECT_NE(s.message().find("the token file is empty"), std::string::npos) << s;
}

TEST(AwsProfileCredentialsTest, SettingsInTheCredentialsFileCountAndInteractiveProfilesAreRefused) {
  TempDir dir;
  WriteFile(dir.Join("config"),
            "[profile dev]\nsso_session = corp\nsso_account_id = 1\n"
            "[profile mfa]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = keys\n"
            "mfa_serial = arn:aws:iam::1:mfa/me\n");
  // role_arn in the credentials file, as the AWS CLI accepts it.
  WriteFile(dir.Join("credentials"),
            "[keys]\naws_access_key_id = AK\naws_secret_access_key = S\n"
            "[creds-role]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = ghost\n"
            "[creds-region]\naws_access_key_id = AK2\naws_secret_access_key = S2\n"
            "region = eu-north-1\n");
  ScopedAwsEnv env({{"AWS_CONFIG_FILE", dir.Join("config")},
                    {"AWS_SHARED_CREDENTIALS_FILE", dir.Join("credentials")}});
  Status s = ChainStatusFor("dev");
  EXPECT_EQ(s.code(), StatusCode::kConfig);
  EXPECT_NE(s.message().find("uses IAM Identity Center (SSO)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("aws configure export-credentials --profile dev"), std::string::npos);
  s = ChainStatusFor("mfa");
  EXPECT_NE(s.message().find("mfa_serial"), std::string::npos) << s;
  s = ChainStatusFor("creds-role");  // seen: the role is tried, and its source is missing
  EXPECT_NE(s.message().find("source_profile 'ghost' is in neither"), std::string::npos) << s;
  auto files = internal::AwsSharedFiles::Load();
  EXPECT_EQ(internal::ConfiguredRegion(files, "creds-region"), "eu-north-1");
}

}  // namespace
}  // namespace shardstream
