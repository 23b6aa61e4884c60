// The AWS shared config and credentials files (ini), as the SDKs read them:
// [default] / [profile NAME] in the config file, [NAME] in the credentials
// file, [services NAME] sections, and nested keys ("s3 =" followed by
// indented "endpoint_url = ..." lines, stored as "s3.endpoint_url").
// Internal to the s3 module. Thread-safety: immutable after Load.
#ifndef SHARDSTREAM_S3_AWS_CONFIG_FILE_H_
#define SHARDSTREAM_S3_AWS_CONFIG_FILE_H_

#include <map>
#include <string>

#include "shardstream/export.h"

namespace shardstream::internal {

using IniSection = std::map<std::string, std::string>;

// The value of an environment variable, "" when unset.
std::string EnvVar(const char* name);
// `s` without leading and trailing blanks and line ends.
std::string Trim(const std::string& s);
// A true setting, as the SDKs read one ("true" in any case).
bool IsTrueSetting(std::string v);

// ini sections by name; a later section of the same name adds keys.
SHARDSTREAM_EXPORT std::map<std::string, IniSection> ParseIni(const std::string& text);

struct SHARDSTREAM_EXPORT AwsSharedFiles {
  std::string config_path;       // AWS_CONFIG_FILE, else ~/.aws/config
  std::string credentials_path;  // AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials
  std::map<std::string, IniSection> config;       // raw section names
  std::map<std::string, IniSection> credentials;  // raw section names
  // Each profile's settings by profile name: its config section with its
  // credentials section over it, as botocore merges them.
  std::map<std::string, IniSection> profiles;

  // Reads both files; a missing file is empty.
  static AwsSharedFiles Load();

  // The profile's section of the config file ([default] or [profile NAME]),
  // or nullptr.
  const IniSection* ConfigProfile(const std::string& profile) const;
  // The profile's section of the credentials file, or nullptr.
  const IniSection* CredentialsProfile(const std::string& profile) const;
  // A setting of the profile (credentials file over config file), or "".
  std::string ConfigValue(const std::string& profile, const std::string& key) const;
  bool HasProfile(const std::string& profile) const { return profiles.count(profile) > 0; }
  // The endpoint its services section gives a service ("s3", "sts"), or "".
  std::string ServicesEndpoint(const std::string& profile, const std::string& service) const;

  // AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE, else the file under ~/.aws.
  static std::string ConfigPath();
  static std::string CredentialsPath();
};

// The endpoint for `service` as the SDKs choose it: AWS_ENDPOINT_URL_<SERVICE>,
// the profile's services section, AWS_ENDPOINT_URL, the profile's
// endpoint_url; "" when none (or when AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is
// true). Trailing '/' removed.
SHARDSTREAM_EXPORT std::string ConfiguredEndpoint(const AwsSharedFiles& files, const std::string& profile,
                               const std::string& service);

// AWS_PROFILE, else "default".
std::string DefaultProfileName();

// The region: AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else
// "us-east-1".
SHARDSTREAM_EXPORT std::string ConfiguredRegion(const AwsSharedFiles& files, const std::string& profile);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_S3_AWS_CONFIG_FILE_H_
