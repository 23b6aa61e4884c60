// Names and helpers shared by the checkpoint writer, restore and uploader.
#ifndef SHARDSTREAM_CHECKPOINT_INTERNAL_H_
#define SHARDSTREAM_CHECKPOINT_INTERNAL_H_

#include <atomic>
#include <string>
#include <string_view>

#include <memory>

#include "shardstream/checkpoint.h"
#include "shardstream/checksum.h"
#include "shardstream/source.h"

namespace shardstream {

// Hashes url and compares size and checksum with f; stops early (Cancelled)
// when *cancel becomes true.
Status VerifyCheckpointFile(Source& source, const std::string& url, const CheckpointFile& f,
                            const std::atomic<bool>* cancel);

namespace internal {

inline constexpr int kCheckpointFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kLatestName = "latest";
inline constexpr const char* kCommitName = "COMMIT";
inline constexpr const char* kLockName = "LOCK";
inline constexpr const char* kChecksumAlgorithm = "xxh3_128";
// Hidden names: temporaries of a save (".tmp-"), checkpoints being deleted
// (".trash-"). Never listed as checkpoints; removed when a writer opens.
inline constexpr const char* kTempPrefix = ".tmp-";
inline constexpr const char* kTrashPrefix = ".trash-";

// torch.distributed.checkpoint's global metadata file: the one name with a
// leading '.' a checkpoint may hold (others are this library's temporaries),
// so a checkpoint written by shardstream.dcp stays readable by DCP's own
// FileSystemReader.
inline constexpr const char* kDcpMetadataName = ".metadata";

// A file name inside a checkpoint: non-empty, no '/', not hidden (but for
// DCP's metadata), not ours.
inline bool ValidFileName(std::string_view n) {
  return !n.empty() && n.size() <= 255 && n.find('/') == std::string_view::npos &&
         n.find('\0') == std::string_view::npos && (n[0] != '.' || n == kDcpMetadataName) &&
         n != kManifestName && n != kCommitName;
}

// Milliseconds since the epoch.
int64_t NowUnixMs();

// The rotation policy shared by the local writer and the remote: of n
// checkpoints sorted by step, the i-th (at `step`) stays when it is one of
// the last keep_last, or a multiple of keep_every_steps (> 0).
inline bool KeptByPolicy(size_t i, size_t n, int64_t step, int64_t keep_last,
                         int64_t keep_every_steps) {
  return i + static_cast<size_t>(keep_last) >= n ||
         (keep_every_steps > 0 && step % keep_every_steps == 0);
}

// Rotation's side of CheckpointReadPin: an exclusive flock on a checkpoint's
// manifest.json, held while it is renamed away and removed, so that no pin
// can be taken on it meanwhile. `pinned`: a reader holds it; keep it.
struct RemovalHold {
  int fd = -1;
  bool pinned = false;
  RemovalHold() = default;
  RemovalHold(RemovalHold&& o) noexcept : fd(o.fd), pinned(o.pinned) { o.fd = -1; }
  RemovalHold(const RemovalHold&) = delete;
  RemovalHold& operator=(const RemovalHold&) = delete;
  ~RemovalHold();
};
Result<RemovalHold> HoldForRemoval(const std::string& ckpt_url);

}  // namespace internal

struct CheckpointSave::Impl {
  enum class State { kOpen, kFailed, kCommitted, kAborted };
  CheckpointWriter* writer = nullptr;
  std::string tmp_url;
  CheckpointManifest manifest;
  std::unique_ptr<WritableFile> file;  // the file being written, if any
  std::unique_ptr<Hasher> hasher;
  uint64_t file_size = 0;
  std::string file_name;
  State state = State::kOpen;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_CHECKPOINT_INTERNAL_H_
