// ScopedAwsEnv: sets and unsets environment variables for a test and restores
// them afterwards. The outermost one also clears every other AWS_* variable,
// points AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE at files that do not
// exist and sets AWS_EC2_METADATA_DISABLED=true (each unless listed), so the
// chain sees only what the test gives it and never reaches for a real
// metadata server.
#ifndef SHARDSTREAM_TESTS_SUPPORT_AWS_ENV_H_
#define SHARDSTREAM_TESTS_SUPPORT_AWS_ENV_H_

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardstream::testing {

class ScopedAwsEnv {
 public:
  using Var = std::pair<std::string, std::optional<std::string>>;  // nullopt: unset
  explicit ScopedAwsEnv(std::initializer_list<Var> vars);
  ~ScopedAwsEnv();
  ScopedAwsEnv(const ScopedAwsEnv&) = delete;
  ScopedAwsEnv& operator=(const ScopedAwsEnv&) = delete;
  void Set(const std::string& name, std::optional<std::string> value);

 private:
  std::vector<Var> saved_;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_AWS_ENV_H_
