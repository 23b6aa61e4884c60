#include "cache/cache_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string_view>

namespace shardstream::internal {
namespace {

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

bool EndsWith(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// Parses "<key>.<size|u>.<pid>.<rand>.tmp".
bool ParseTempName(const std::string& name, DirItem* item) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? dot : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() != 5 || parts[4] != "tmp") return false;
  item->key = parts[0];
  if (parts[1] == "meta") {
    item->reserved = 0;
  } else if (parts[1] != "u") {
    char* end = nullptr;
    item->reserved = std::strtoull(parts[1].c_str(), &end, 10);
    if (end == nullptr || *end != '\0') return false;
  }
  item->pid = static_cast<pid_t>(std::strtol(parts[2].c_str(), nullptr, 10));
  return item->pid > 0;
}

}  // namespace

std::string EntryPath(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".shard";
}
std::string MetaPath(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".json";
}
std::string LockPath(const std::string& dir, const std::string& key) {
  return dir + "/" + key + ".lock";
}
std::string NewTempPath(const std::string& dir, const std::string& key, int64_t size) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char rand_hex[17];
  std::snprintf(rand_hex, sizeof(rand_hex), "%016llx", static_cast<unsigned long long>(rng()));
  return dir + "/" + key + "." + (size >= 0 ? std::to_string(size) : std::string("u")) + "." +
         std::to_string(::getpid()) + "." + rand_hex + ".tmp";
}

Status WriteSmallFileAtomic(Source& fs, const std::string& dir, const std::string& stem,
                            const std::string& path, std::string_view text, bool sync) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char rand_hex[17];
  std::snprintf(rand_hex, sizeof(rand_hex), "%016llx", static_cast<unsigned long long>(rng()));
  std::string temp = dir + "/" + stem + ".meta." + std::to_string(::getpid()) + "." + rand_hex + ".tmp";
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, fs.NewWritableFile(temp));
  Status s = file->Append(text);
  if (s.ok() && sync) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (s.ok()) s = fs.Rename(temp, path);
  if (!s.ok()) {
    (void)file->Abort();
    (void)fs.Remove(temp);
  }
  return s;
}

void FileLock::Release() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor drops the flock
  fd_ = -1;
}

Result<FileLock> LockFile(const std::string& path, bool exclusive, bool block, bool create) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    int fd = create ? ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)
                    : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::FromErrno(errno, "open lock file " + path);
    FileLock lock(fd);
    int op = (exclusive ? LOCK_EX : LOCK_SH) | (block ? 0 : LOCK_NB);
    int rc = 0;
    // SHARDSTREAM_CACHE_NO_FLOCK=1 behaves like a file system whose flock
    // does nothing (tests prove the cache stays correct without locks).
    const char* no_flock = std::getenv("SHARDSTREAM_CACHE_NO_FLOCK");
    if (no_flock == nullptr || std::strcmp(no_flock, "1") != 0) {
      do {
        rc = ::flock(fd, op);
      } while (rc != 0 && errno == EINTR);
    }
    if (rc != 0) {
      if (errno == EWOULDBLOCK) return FileLock();
      // A file system without flock: go on unlocked (a duplicate download at
      // worst, see shard_cache.h).
      if (errno != ENOLCK && errno != EOPNOTSUPP) return Status::FromErrno(errno, "flock " + path);
    }
    // An evictor may have unlinked the path between open and flock: the lock
    // then guards an orphan. Lock what the path names now.
    struct stat by_fd, by_path;
    if (::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 &&
        by_fd.st_ino == by_path.st_ino && by_fd.st_dev == by_path.st_dev) {
      return lock;
    }
  }
  return Status::Io("cannot lock " + path + ": it keeps being replaced");
}

void SetLockContent(const FileLock& lock, const std::string& text) {
  if (!lock.held()) return;
  // Best effort: readers that cannot find the temporary fall back to waiting.
  if (::pwrite(lock.fd(), text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()))
    (void)::ftruncate(lock.fd(), static_cast<off_t>(text.size()));
}

std::string ReadLockContent(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[4096];
  ssize_t n = ::pread(fd, buf, sizeof(buf), 0);
  ::close(fd);
  if (n <= 0) return {};
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

Result<std::vector<DirItem>> ScanDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(errno, "list cache directory " + dir);
  std::vector<DirItem> items;
  while (struct dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    DirItem item;
    if (EndsWith(name, ".shard")) {
      item.kind = DirItem::kEntry;
      item.key = name.substr(0, name.size() - 6);
    } else if (EndsWith(name, ".tmp") && ParseTempName(name, &item)) {
      item.kind = DirItem::kTemp;
    } else {
      continue;
    }
    item.path = dir + "/" + name;
    struct stat st;
    if (::stat(item.path.c_str(), &st) != 0) continue;  // raced with a removal
    item.size = static_cast<uint64_t>(st.st_size);
    item.reserved = std::max(item.reserved, item.size);
    item.mtime_ns = MtimeNs(st);
    items.push_back(std::move(item));
  }
  ::closedir(d);
  std::sort(items.begin(), items.end(), [](const DirItem& a, const DirItem& b) {
    return a.mtime_ns != b.mtime_ns ? a.mtime_ns < b.mtime_ns : a.path < b.path;
  });
  return items;
}

uint64_t Usage(const std::vector<DirItem>& items) {
  uint64_t total = 0;
  for (const auto& item : items) total += item.kind == DirItem::kOther ? 0 : item.reserved;
  return total;
}

bool TempAbandoned(const DirItem& temp) {
  int fd = ::open(temp.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;  // gone already
  bool locked_by_writer = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  if (locked_by_writer) return false;
  if (::kill(temp.pid, 0) != 0 && errno == ESRCH) return true;
  // The pid lives, but it may be reused, or flock may be a no-op here: only
  // a temporary that has not grown for an hour is considered dead then.
  auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  return now - temp.mtime_ns > int64_t{3600} * 1000000000;
}

int RemoveAbandonedTemps(Source& fs, std::vector<DirItem>& items) {
  int removed = 0;
  for (auto it = items.begin(); it != items.end();) {
    if (it->kind == DirItem::kTemp && TempAbandoned(*it)) {
      (void)fs.Remove(it->path);
      ++removed;
      it = items.erase(it);
    } else {
      ++it;
    }
  }
  return removed;
}

bool RemoveEntryIfUnused(Source& fs, const std::string& dir, const std::string& key) {
  auto lock = LockFile(LockPath(dir, key), /*exclusive=*/true, /*block=*/false);
  if (!lock.ok() || !lock->held()) return false;
  // Data first: a reader that finds no data treats the shard as a miss.
  Status s = fs.Remove(EntryPath(dir, key));
  if (!s.ok() && s.code() != StatusCode::kNotFound) return false;
  (void)fs.Remove(MetaPath(dir, key));
  // Removed while held: LockFile() re-checks the inode, so nobody keeps a
  // lock on the orphan.
  (void)fs.Remove(LockPath(dir, key));
  return true;
}

EvictOutcome EvictLru(Source& fs, const std::string& dir, std::vector<DirItem>& items,
                      uint64_t target, const std::string& keep_key) {
  EvictOutcome out;
  uint64_t usage = Usage(items);
  for (auto it = items.begin(); it != items.end() && usage > target;) {
    if (it->kind != DirItem::kEntry || it->key == keep_key ||
        !RemoveEntryIfUnused(fs, dir, it->key)) {
      ++it;
      continue;
    }
    usage -= it->reserved;
    out.count++;
    out.bytes += it->size;
    it = items.erase(it);
  }
  return out;
}

bool IsNoSpace(const Status& status) {
  if (status.ok()) return false;
  const std::string& m = status.message();
  return m.find(std::strerror(ENOSPC)) != std::string::npos ||
         m.find(std::strerror(EDQUOT)) != std::string::npos;
}

}  // namespace shardstream::internal
