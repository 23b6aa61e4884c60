// FaultSource: a SourceWrapper that injects failures and simulates power loss
// (leveldb's fault_injection_test and SpecialEnv ideas), for any test that
// writes through a Source.
//
// Failures: a rule fails the n-th call of one operation (counted from when
// the rule is added), optionally only for urls containing a substring, and
// optionally every call from then on (sticky). "No space" fails appends once
// more than a byte budget was written. Crash: after a number of mutating
// calls every later call fails, as if the process had died there. Latency:
// every mutating call sleeps a while.
//
// Power loss (when tracking is on): the wrapper remembers, per file, how many
// bytes were synced, and, per directory, the entries (created files and
// directories, renames) not yet made durable by SyncDir. DropUnsyncedData()
// truncates files to their synced size and undoes those entries, newest
// first, leaving what a machine would find after losing power. Removals are
// treated as durable at once (a crash never resurrects a file). Renames of
// directories carry the tracked state of everything below them.
//
// Thread-safety: every method may be called concurrently.
#ifndef SHARDSTREAM_TESTS_SUPPORT_FAULT_SOURCE_H_
#define SHARDSTREAM_TESTS_SUPPORT_FAULT_SOURCE_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shardstream/source.h"

namespace shardstream::testing {

class FaultSource : public SourceWrapper {
 public:
  enum class Op {
    kOpen, kStat, kList, kNewFile, kAppend, kSync, kClose,
    kRename, kRemove, kCreateDir, kRemoveDir, kSyncDir,
    kRead,  // ReadAt or ReadVAt of a file from OpenRandomAccess
  };
  explicit FaultSource(std::shared_ptr<Source> target) : SourceWrapper(std::move(target)) {}

  // Fails the nth (1-based) call of `op` from now with `error`; with sticky,
  // also every later one. url_filter: only calls whose url contains it count
  // (for a rename, "from -> to").
  void FailNth(Op op, int nth, Status error, bool sticky = false, std::string url_filter = {});
  // Fails `op` with an errno-style error (Status::FromErrno) at the nth call.
  void FailNthErrno(Op op, int nth, int err, bool sticky = false, std::string url_filter = {});
  // Appends fail with ENOSPC once more than `bytes` were appended from now.
  void SetSpaceLimit(int64_t bytes);
  // After `n` more mutating calls, every call fails ("the process died").
  void CrashAfter(int64_t n);
  bool crashed() const { return crashed_.load(); }
  // Random-access reads of urls ending in `url_filter` see the file end at
  // byte `bytes` (a file cut short after it was opened: Size() is unchanged,
  // reads past it come back short). -1: off.
  void TruncateReads(int64_t bytes, std::string url_filter = {});
  // Random-access reads of urls ending in `url_filter` see the byte at
  // `offset` inverted. -1: off.
  void CorruptReadByte(int64_t offset, std::string url_filter = {});
  // Random-access reads so far (ReadAt and ReadVAt calls).
  int64_t reads() const { return reads_.load(); }
  // Used by the wrapped random-access files: the cut and the corrupt byte
  // that apply to `url` (-1: none).
  void ReadFaults(const std::string& url, int64_t* truncate_at, int64_t* corrupt_at);
  void CountRead() { reads_++; }

  // Sleeps this long in every call but reads. 0: none.
  void SetDelayMicros(int64_t us) { delay_us_.store(us); }
  void ClearFaults();

  // Mutating calls (new file, append, sync, close, rename, remove, mkdir,
  // rmdir, syncdir) seen so far.
  int64_t mutating_calls() const { return mutating_.load(); }

  // Power loss.
  void SetTracking(bool on) { tracking_.store(on); }
  // With tracking, durability is simulated: skip the real fsyncs (fast).
  // Default: forward them.
  void SetForwardSyncs(bool on) { forward_syncs_.store(on); }
  bool forward_syncs() const { return !tracking_.load() || forward_syncs_.load(); }
  // Drops everything not durable (see above), then clears the crash, the
  // faults and the tracked state. Call with no file open for writing.
  // keep_newest > 0 keeps the newest that many pending directory entries, as
  // a file system may persist later changes before earlier ones when nothing
  // orders them (no SyncDir in between).
  Status DropUnsyncedData(int keep_newest = 0);
  // Directory entries not yet durable.
  int pending_entries();

  // Source overrides.
  Result<std::unique_ptr<RandomAccessFile>> OpenRandomAccess(const std::string& url) override;
  Result<std::unique_ptr<InputStream>> OpenInputStream(const std::string& url,
                                                       uint64_t offset) override;
  Result<FileInfo> Stat(const std::string& url) override;
  Result<std::vector<FileInfo>> List(const std::string& url) override;
  Result<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& url) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status Remove(const std::string& url) override;
  Status CreateDir(const std::string& url) override;
  Status RemoveDir(const std::string& url) override;
  Status SyncDir(const std::string& url) override;

  // Used by the wrapped files.
  Status Check(Op op, const std::string& url);
  void OnAppend(const std::string& url, uint64_t new_size);
  void OnSync(const std::string& url, uint64_t size);
  Status CheckSpace(size_t n);

 private:
  struct Rule {
    Op op;
    int remaining;  // calls until it fires
    Status error;
    bool sticky;
    std::string filter;
    bool fired = false;
  };
  // A directory-entry change, with the names it had when it happened. It
  // becomes durable when the directory holding its entry (under that
  // directory's current name) is synced.
  struct Entry {
    enum Kind { kCreate, kMkdir, kRename } kind;
    std::string a, b;             // the url; for a rename from a to b
    bool had_old = false;         // a rename replaced an existing file b ...
    std::string old_content;      // ... whose content this was
    bool durable = false;
  };
  // `url` as named after the renames log_[from..] (durable_only: only those
  // made durable), applied in order.
  // With `self`, nullopt when a later durable rename moved url itself (its
  // entry then survives under the new name).
  std::optional<std::string> Follow(std::string url, size_t from, bool durable_only,
                                    bool self = false) const;
  void Prune();

  std::mutex mu_;
  std::vector<Rule> rules_;
  int64_t space_left_ = -1;
  int64_t crash_after_ = -1;
  std::atomic<bool> crashed_{false};
  std::atomic<int64_t> delay_us_{0};
  std::atomic<int64_t> mutating_{0};
  std::atomic<int64_t> reads_{0};
  int64_t truncate_at_ = -1, corrupt_at_ = -1;  // guarded by mu_
  std::string truncate_filter_, corrupt_filter_;  // guarded by mu_
  std::atomic<bool> tracking_{false};
  std::atomic<bool> forward_syncs_{true};
  std::map<std::string, std::pair<uint64_t, uint64_t>> files_;  // url -> (size, synced)
  std::vector<Entry> log_;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_FAULT_SOURCE_H_
