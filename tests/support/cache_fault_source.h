// Test doubles for the shard cache: a source wrapper that counts fetches in a
// file (so fetches by several processes add up), maps fake remote urls to
// local files, and can be slowed, gated, corrupted or made to fail; and a
// file-system wrapper with a byte capacity that fails writes with ENOSPC.
#ifndef SHARDSTREAM_TESTS_SUPPORT_CACHE_FAULT_SOURCE_H_
#define SHARDSTREAM_TESTS_SUPPORT_CACHE_FAULT_SOURCE_H_

#include <atomic>
#include <limits>
#include <cstdint>
#include <algorithm>
#include <map>
#include <vector>
#include <memory>
#include <string>

#include "shardstream/source.h"

namespace shardstream::testing {

struct CacheFaultKnobs {
  // Each OpenInputStream/OpenRandomAccess appends "<url>\n" here (O_APPEND).
  std::string fetch_log;
  // Urls starting with remote_prefix are read from local_dir + the rest.
  std::string remote_prefix;
  std::string local_dir;
  // Bytes per Read at most, and a sleep before each Read.
  std::atomic<size_t> max_read{0};
  std::atomic<int> delay_us{0};
  // Reads beyond this offset block until the file `gate_file` exists.
  std::atomic<int64_t> gate_after{-1};
  std::string gate_file;
  // The first `corrupt_fetches` fetches of this process flip a byte at 100.
  std::atomic<int> corrupt_fetches{0};
  std::atomic<int> fetches{0};
  // Reads fail with kUnavailable after this many bytes (per stream), in the
  // first `fail_fetches` fetches from now (default: all of them).
  std::atomic<int64_t> fail_after{-1};
  std::atomic<int> fail_fetches{std::numeric_limits<int>::max()};
  // Streams answer ReadWithin as a network stream does (otherwise: 0, as a
  // stream that cannot bound its wait).
  std::atomic<bool> read_within{true};
};

class CacheFaultSource final : public SourceWrapper {
 public:
  CacheFaultSource(std::shared_ptr<Source> target, std::shared_ptr<CacheFaultKnobs> knobs)
      : SourceWrapper(std::move(target)), knobs_(std::move(knobs)) {}
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override;
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override;
  Result<FileInfo> Stat(const std::string& url) override;
  std::string Map(const std::string& url) const;

 private:
  void LogFetch(const std::string& url);
  std::shared_ptr<CacheFaultKnobs> knobs_;
};

// Lines of a fetch log, counted by url.
std::map<std::string, int> CountFetches(const std::string& fetch_log);

// A file system of `capacity` bytes: appends beyond it fail with ENOSPC
// (nothing written), removals and aborted files give the space back.
class SmallDiskFs final : public SourceWrapper {
 public:
  explicit SmallDiskFs(int64_t capacity)
      : SourceWrapper(LocalSource()), free_(std::make_shared<std::atomic<int64_t>>(capacity)) {}
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override;
  Status Remove(const std::string& url) override;
  int64_t free_bytes() const { return free_->load(); }
  std::atomic<int> nospace_errors{0};
  std::atomic<int64_t> appended_bytes{0};  // by every file, failed appends excluded
  std::atomic<int> appends{0};             // successful Append calls
  // Appends that cross a multiple of `chunk` in their file (when set).
  std::atomic<int64_t> chunk{0};
  std::atomic<int> chunk_crossings{0};

 private:
  std::shared_ptr<std::atomic<int64_t>> free_;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_CACHE_FAULT_SOURCE_H_
