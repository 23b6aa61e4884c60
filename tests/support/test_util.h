// Helpers shared by the C++ tests: temporary directories, file contents, and
// the paths of test data and built tools.
#ifndef SHARDSTREAM_TESTS_SUPPORT_TEST_UTIL_H_
#define SHARDSTREAM_TESTS_SUPPORT_TEST_UTIL_H_

#include <string>
#include <string_view>

namespace shardstream::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, std::string_view data);
std::string ReadFile(const std::string& path);
// Runs a shell command; returns its exit status and captures stdout+stderr.
int RunCommand(const std::string& cmd, std::string* output = nullptr);
// Path of the built `shardstream` tool (from $SHARDSTREAM_CLI or the build dir).
std::string CliPath();
// The Python with the project's test packages (moto, torch, ...): $SHARDSTREAM_PYTHON,
// else <source>/.venv/bin/python, else python3.
std::string PythonPath();
// This process's thread count once it has held still for 200 ms, or at once when it is
// `expect` (at most 3 s either way). A thread that pthread_join has returned for stays
// counted until the kernel reaps it a moment later, so a plain count right after a join
// (or a destructor that joins) can be one high.
int SettledThreadCount(int expect = -1);

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_TEST_UTIL_H_
