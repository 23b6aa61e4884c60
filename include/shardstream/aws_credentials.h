// AWS credentials and the chain that finds them, in the order the AWS SDKs
// (botocore, the C++ and Java SDKs) search:
//
//   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//      (skipped when a profile is named in the options);
//   2. assume role: the profile has role_arn with source_profile (chained,
//      cycles refused) or credential_source (Environment, Ec2InstanceMetadata,
//      EcsContainer) -> STS AssumeRole, signed with the source's credentials;
//   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (+
//      AWS_ROLE_SESSION_NAME), or the profile's web_identity_token_file and
//      role_arn -> STS AssumeRoleWithWebIdentity (EKS IRSA);
//   4. the profile's keys in the shared credentials file
//      (AWS_SHARED_CREDENTIALS_FILE, default ~/.aws/credentials);
//   5. the profile's credential_process (run with /bin/sh -c; JSON Version 1);
//   6. the profile's keys in the config file (AWS_CONFIG_FILE, ~/.aws/config);
//   7. container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI (ECS) or
//      _FULL_URI (EKS Pod Identity, Greengrass), with
//      AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE);
//   8. EC2 instance metadata, IMDSv2 token first and IMDSv1 where the token is
//      refused (AWS_EC2_METADATA_SERVICE_ENDPOINT, AWS_EC2_METADATA_DISABLED,
//      AWS_EC2_METADATA_V1_DISABLED).
//
// The first source that applies supplies the credentials from then on. A source
// that applies but fails is an error (kAuth, or kUnavailable where a retry may
// help) naming the source, the variable, file, profile or url, never a secret,
// except instance metadata, after which the chain ends as the SDKs' does.
// Profiles for IAM Identity Center (SSO) and roles with mfa_serial are
// configuration errors: they need a person at a prompt. Temporary
// credentials are refreshed before they expire (AwsCredentialOptions).
// Settings of a profile in the credentials file count as if in the config
// file (botocore merges them). STS is reached at AWS_ENDPOINT_URL_STS, else
// the profile's services section, else AWS_ENDPOINT_URL, else the profile's
// endpoint_url, else https://sts.<region>.amazonaws.com (.com.cn in China);
// its throttling is retried. A debug log line names the source that supplied
// credentials (SHARDSTREAM_LOG_LEVEL=debug), never the secret.
//
// Thread-safety: a provider may be used from many threads; one refresh runs at
// a time, and others wait for it only when their credentials are about to
// expire (see AwsCredentialOptions).
#ifndef SHARDSTREAM_AWS_CREDENTIALS_H_
#define SHARDSTREAM_AWS_CREDENTIALS_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "shardstream/export.h"
#include "shardstream/http_source.h"
#include "shardstream/result.h"

namespace shardstream {

struct AwsCredentials {
  std::string access_key;
  std::string secret_key;
  std::string session_token;  // empty unless temporary credentials
  // When temporary credentials stop working; empty for long-term keys.
  std::optional<std::chrono::system_clock::time_point> expiration;
  // Which source supplied them, e.g. "environment", "web-identity",
  // "instance-metadata", "profile 'ci' (shared credentials file)".
  std::string source;
};

class SHARDSTREAM_EXPORT AwsCredentialProvider {
 public:
  virtual ~AwsCredentialProvider() = default;
  // Current credentials, refreshed first when they are about to expire.
  // kAuth (or kUnavailable) naming the source when none can be had.
  virtual Result<AwsCredentials> Get() = 0;
};

struct AwsCredentialOptions {
  // The profile of the shared files. Naming one skips the environment's keys.
  // Default: AWS_PROFILE, else "default".
  std::string profile;
  // Region for STS. Default: AWS_REGION, AWS_DEFAULT_REGION, the profile's
  // region, else "us-east-1".
  std::string region;
  // Instance metadata and container credential requests: time allowed for
  // each attempt, and attempts. Default: for instance metadata
  // AWS_METADATA_SERVICE_TIMEOUT, else 1 s, and AWS_METADATA_SERVICE_NUM_ATTEMPTS,
  // else 1; for containers 2 s and 3 attempts (as botocore).
  std::optional<double> metadata_timeout_s;
  std::optional<int> metadata_attempts;
  // A refresh is tried this long before expiry, by one thread while the
  // others go on (advisory); a failure keeps the old credentials until
  // `required_before_s` before expiry, from when every caller waits for the
  // refresh and a failure is an error (mandatory). Credentials that live
  // less than the advisory window get half and a quarter of their lifetime.
  // Default: 900 s and 600 s (botocore's advisory and mandatory windows).
  double refresh_before_s = 900;
  double required_before_s = 600;
  // Longest a credential_process may run. Default: 60 s.
  double process_timeout_s = 60;
  // STS requests (timeouts, retries, TLS). Default: HttpOptions defaults.
  HttpOptions http;
};

// The SDKs' default chain (above), resolved on the first Get(). Fails only
// for an unreadable option; a missing credential shows at Get().
SHARDSTREAM_EXPORT std::shared_ptr<AwsCredentialProvider> DefaultAwsCredentialChain(
    AwsCredentialOptions options = {});

// Fixed credentials (never refreshed).
SHARDSTREAM_EXPORT std::shared_ptr<AwsCredentialProvider> StaticAwsCredentials(
    AwsCredentials credentials);

}  // namespace shardstream

#endif  // SHARDSTREAM_AWS_CREDENTIALS_H_
