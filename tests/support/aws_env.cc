#include "support/aws_env.h"

#include <cstdlib>
#include <cstring>

extern char** environ;

namespace shardstream::testing {
namespace {
int depth = 0;
}  // namespace

ScopedAwsEnv::ScopedAwsEnv(std::initializer_list<Var> vars) {
  if (depth++ == 0) {
    std::vector<std::string> names;
    for (char** e = environ; *e; ++e) {
      if (std::strncmp(*e, "AWS_", 4) == 0) {
        const char* eq = std::strchr(*e, '=');
        if (eq) names.emplace_back(*e, eq - *e);
      }
    }
    for (const auto& n : names) Set(n, std::nullopt);
    Set("AWS_EC2_METADATA_DISABLED", std::string("true"));
    // No shared files unless the test writes its own (never the user's ~/.aws).
    Set("AWS_CONFIG_FILE", std::string("/nonexistent/shardstream-test/aws-config"));
    Set("AWS_SHARED_CREDENTIALS_FILE", std::string("/nonexistent/shardstream-test/aws-credentials"));
  }
  for (const auto& [name, value] : vars) Set(name, value);
}

void ScopedAwsEnv::Set(const std::string& name, std::optional<std::string> value) {
  const char* old = std::getenv(name.c_str());
  saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
  if (value) {
    ::setenv(name.c_str(), value->c_str(), 1);
  } else {
    ::unsetenv(name.c_str());
  }
}

ScopedAwsEnv::~ScopedAwsEnv() {
  for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
    if (it->second) {
      ::setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      ::unsetenv(it->first.c_str());
    }
  }
  --depth;
}

}  // namespace shardstream::testing
