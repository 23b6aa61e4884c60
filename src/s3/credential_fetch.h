// The fetches behind each source of the credential chain: STS (AssumeRole,
// AssumeRoleWithWebIdentity), EC2 instance metadata, container credentials
// and credential_process. Each call fetches anew; caching and refresh are the
// chain's (credential_chain.cc). Errors name the source and url or command,
// never a secret or a token. Internal to the s3 module.
#ifndef SHARDSTREAM_S3_CREDENTIAL_FETCH_H_
#define SHARDSTREAM_S3_CREDENTIAL_FETCH_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "http/http_client.h"
#include "shardstream/export.h"
#include "shardstream/aws_credentials.h"
#include "shardstream/result.h"

namespace shardstream::internal {

// Seconds since the epoch of an ISO 8601 time ("2026-11-25T21:30:00Z",
// fractions and +hh:mm offsets allowed), or nullopt.
SHARDSTREAM_EXPORT std::optional<std::chrono::system_clock::time_point> ParseIso8601Time(const std::string& s);
SHARDSTREAM_EXPORT std::string FormatIso8601(std::chrono::system_clock::time_point t);

// Credentials from a JSON document (instance metadata, containers,
// credential_process): AccessKeyId, SecretAccessKey, Token or SessionToken,
// Expiration. `what` names the source for errors; `require_expiration` for
// temporary-only sources. Expired credentials are an error.
SHARDSTREAM_EXPORT Result<AwsCredentials> CredentialsFromJson(const std::string& body, const std::string& what,
                                           bool require_expiration);

struct StsRequest {
  std::string endpoint;  // "https://sts.us-east-1.amazonaws.com" or a test server
  std::string region;
  std::string role_arn;
  std::string session_name;
  std::string external_id;             // AssumeRole only; may be empty
  std::optional<int> duration_seconds;  // may be empty
};

// STS AssumeRole, signed with `source`.
Result<AwsCredentials> StsAssumeRole(HttpClient& http, const StsRequest& request,
                                     const AwsCredentials& source);
// STS AssumeRoleWithWebIdentity (unsigned) with the token read from token_file.
Result<AwsCredentials> StsAssumeRoleWithWebIdentity(HttpClient& http, const StsRequest& request,
                                                    const std::string& token_file);

struct MetadataSettings {
  double timeout_s = 1;
  int attempts = 1;
};
// An HttpClient for metadata requests: short timeouts, `attempts` tries.
std::shared_ptr<HttpClient> MetadataHttpClient(const MetadataSettings& settings);

// EC2 instance metadata at `endpoint` (no trailing '/'): an IMDSv2 token, then
// the role and its credentials; IMDSv1 when the token is refused with 403,
// 404 or 405, unless v1_disabled.
Result<AwsCredentials> FetchInstanceMetadata(HttpClient& http, const std::string& endpoint,
                                             bool v1_disabled);

// The container credentials url from AWS_CONTAINER_CREDENTIALS_RELATIVE_URI /
// _FULL_URI ("" when neither is set); kConfig for a full uri the SDKs refuse
// (plain http to a host other than loopback or the ECS/EKS addresses).
SHARDSTREAM_EXPORT Result<std::string> ContainerCredentialsUrl(const std::string& relative_uri,
                                            const std::string& full_uri);
// GET of `url` with the authorization token (AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE,
// read on each call, else AWS_CONTAINER_AUTHORIZATION_TOKEN).
Result<AwsCredentials> FetchContainerCredentials(HttpClient& http, const std::string& url,
                                                 const std::string& token_file,
                                                 const std::string& token);

// Runs `command` with /bin/sh -c and parses its standard output (JSON,
// "Version": 1). `what` names the profile.
SHARDSTREAM_EXPORT Result<AwsCredentials> RunCredentialProcess(const std::string& command, const std::string& what,
                                            double timeout_s);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_S3_CREDENTIAL_FETCH_H_
