// Checkpoints: atomic, durable directories of files with a manifest, the
// `latest` pointer, rotation and restore (see docs/checkpoints.md).
//
// A checkpoint is a directory <dir>/ckpt-000200 holding the user's files and
// manifest.json (files, sizes, xxh3_128 checksums, step, time, user metadata).
// CheckpointWriter streams files into a hidden temporary directory, fsyncs
// each file and the directory, renames it into place, fsyncs the parent, and
// only then replaces <dir>/latest (written atomically) and rotates old ones.
// An interruption at any moment leaves the previous checkpoint intact.
//
// Every file-system operation goes through the Source given in the options,
// so tests inject faults (ENOSPC, EIO, crashes, power loss). The one
// exception is the writer lock (flock on <dir>/LOCK for local directories).
//
// Thread-safety: a CheckpointWriter may be used from several threads, but
// saves are serialised (one CheckpointSave open at a time). A CheckpointSave
// is used by one thread. The free functions are reentrant.
#ifndef SHARDSTREAM_CHECKPOINT_H_
#define SHARDSTREAM_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"
#include "shardstream/status.h"

namespace shardstream {

struct CheckpointFile {
  std::string name;      // relative to the checkpoint directory, no '/'
  uint64_t size = 0;
  std::string checksum;  // "xxh3_128:<hex>"
};

// The content of manifest.json (docs/checkpoint_format.md).
struct SHARDSTREAM_EXPORT CheckpointManifest {
  int64_t step = 0;
  std::string name;             // "ckpt-000200"
  int64_t time_unix_ms = 0;     // when the save began
  std::vector<CheckpointFile> files;  // in the order written
  std::string metadata_json = "{}";   // the user's JSON object, verbatim

  uint64_t total_bytes() const;
  const CheckpointFile* Find(std::string_view file_name) const;
};

// "ckpt-000200": six digits at least, more when the step needs them.
SHARDSTREAM_EXPORT std::string CheckpointName(int64_t step);
// The step of a checkpoint directory name, or nullopt if it is not one.
SHARDSTREAM_EXPORT std::optional<int64_t> ParseCheckpointName(std::string_view name);

SHARDSTREAM_EXPORT std::string FormatCheckpointManifest(const CheckpointManifest& m);
// On failure returns kCorrupt naming `url` (what the text came from).
SHARDSTREAM_EXPORT Result<CheckpointManifest> ParseCheckpointManifest(std::string_view text,
                                                                      const std::string& url);

// Reading checkpoints (no lock needed; safe while a writer runs).
//
// The checkpoints under dir whose manifest parses, oldest first. Hidden
// temporaries are never listed. Unreadable ones are logged and left out.
SHARDSTREAM_EXPORT Result<std::vector<CheckpointManifest>> ListCheckpoints(Source& source,
                                                                           const std::string& dir);
// The manifest of the checkpoint directory ckpt_url.
SHARDSTREAM_EXPORT Result<CheckpointManifest> ReadCheckpointManifest(Source& source,
                                                                     const std::string& ckpt_url);
// Checks that every file of the manifest exists with its size and checksum.
// On failure returns kChecksum or kNotFound naming the file.
SHARDSTREAM_EXPORT Status VerifyCheckpoint(Source& source, const std::string& ckpt_url,
                                           const CheckpointManifest& m);
// The name in <dir>/latest, or NotFound.
SHARDSTREAM_EXPORT Result<std::string> ReadLatestPointer(Source& source, const std::string& dir);

// The manifest of checkpoint `name` at `step` holding `files` (sizes and
// checksums) with the metadata JSON object, checked to parse back. A
// directory of steps names them ckpt-<step>; a single checkpoint
// (CommitSingleCheckpoint) is named after its directory, at step 0. On
// failure returns kConfig naming what is wrong.
SHARDSTREAM_EXPORT Result<CheckpointManifest> MakeCheckpointManifest(
    std::string name, int64_t step, std::vector<CheckpointFile> files, std::string metadata_json);

// Whether the checkpoint at ckpt_url is intact, by the one rule every reader
// uses (RestoreLatest, `shardstream ckpt verify`, shardstream.dcp): its
// manifest parses and names it, every file is there with its size, and
// with `verify` its checksum; `required_file` (DCP's ".metadata"), when
// given, is among the files. Returns the manifest; on failure NotFound,
// kCorrupt or kChecksum naming the file.
SHARDSTREAM_EXPORT Result<CheckpointManifest> CheckIntactCheckpoint(
    Source& source, const std::string& ckpt_url, bool verify,
    const std::string& required_file = "");

struct NewestCheckpoint {
  std::string url;                   // empty when none is intact
  CheckpointManifest manifest;
  std::vector<std::string> skipped;  // "name: reason", newest first
};
// The newest intact checkpoint of a directory of steps: the highest
// ckpt-<step> that CheckIntactCheckpoint accepts. `latest` is not trusted
// over it: a crash between a step's rename and the pointer's update leaves
// `latest` behind an intact newer step, and it may name a damaged one. On
// failure returns the listing's error.
SHARDSTREAM_EXPORT Result<NewestCheckpoint> FindNewestIntact(Source& source, const std::string& dir,
                                                             bool verify,
                                                             const std::string& required_file = "");

// Commits the complete directory tmp_url as one checkpoint at dest_url,
// not a step of a directory (shardstream.dcp.Writer(path)): writes its
// manifest (named after dest_url, step 0), syncs it, moves an older
// checkpoint at dest_url aside, renames tmp_url onto dest_url, syncs the
// parent and removes the old one. tmp_url must be a sibling of dest_url.
// Returns the manifest; on failure the error, tmp_url left for the caller.
SHARDSTREAM_EXPORT Result<CheckpointManifest> CommitSingleCheckpoint(
    Source& source, const std::string& tmp_url, const std::string& dest_url,
    std::vector<CheckpointFile> files, const std::string& metadata_json);

// Holds a committed checkpoint against rotation while a process reads it: a
// shared flock on its manifest.json, which a writer's rotation (in any
// process on the machine, or over NFS) tries to take exclusively before it
// moves the checkpoint away, keeping it while any pin is held. Local
// directories only; elsewhere (mem://, remotes) a pin holds nothing.
// Movable, not copyable; the pin is released when it is destroyed or
// Release()d. Thread-safety: distinct pins are independent.
class SHARDSTREAM_EXPORT CheckpointReadPin {
 public:
  // Pins ckpt_url (a checkpoint directory). On failure returns NotFound if it
  // is gone (rotated away; resolve the newest again), kUnavailable while a
  // rotation is removing it, or the I/O error.
  static Result<CheckpointReadPin> Acquire(const std::string& ckpt_url);
  CheckpointReadPin() = default;
  CheckpointReadPin(CheckpointReadPin&& o) noexcept;
  CheckpointReadPin& operator=(CheckpointReadPin&& o) noexcept;
  CheckpointReadPin(const CheckpointReadPin&) = delete;
  CheckpointReadPin& operator=(const CheckpointReadPin&) = delete;
  ~CheckpointReadPin();

  bool held() const { return fd_ >= 0; }
  void Release();

 private:
  int fd_ = -1;
};

struct CheckpointWriterOptions {
  // Where the directory lives. Default: DefaultSource().
  std::shared_ptr<Source> source;
  // Rotation keeps the newest keep_last checkpoints (0 keeps all). Default: 3.
  int keep_last = 3;
  // Rotation also keeps every checkpoint whose step is a multiple of this
  // (0: none). Default: 0.
  int64_t keep_every_steps = 0;
  // Rotation keeps a checkpoint while this returns true for its name (wire
  // it to Uploader::InUse), and always while a CheckpointReadPin holds it.
  // Default: none.
  std::function<bool(const std::string& name)> in_use;
  // Called after a checkpoint is committed (latest durable), before rotation
  // (wire it to Uploader::Enqueue). Default: none.
  std::function<void(const CheckpointManifest&)> on_commit;
  // EXPERIMENTAL, for crash tests: called at each durability step ("mkdir",
  // "file-sync", "manifest-sync", "dir-sync", "rename", "parent-sync",
  // "latest-sync", "latest-rename", "latest-dir-sync", "rotate", "rotate-rename",
  // "rotate-sync").
  // Default: none.
  std::function<void(std::string_view point)> test_hook;
};

class CheckpointWriter;

// One save in progress: files are streamed in one after another. Destroying
// it without Commit() removes the temporary directory. REQUIRES: destroyed
// before the writer that made it.
class SHARDSTREAM_EXPORT CheckpointSave {
 public:
  ~CheckpointSave();
  CheckpointSave(const CheckpointSave&) = delete;
  CheckpointSave& operator=(const CheckpointSave&) = delete;

  // Starts file `name` (no '/', not "manifest.json", not used before in this
  // save); closes (fsyncs) the previous one. On failure returns kConfig for a
  // bad name, or the I/O error; the save is then failed.
  Status OpenFile(const std::string& name);
  // Appends to the open file. REQUIRES: OpenFile succeeded.
  Status Append(std::string_view data);
  // Syncs and closes the open file (Commit does it too).
  Status CloseFile();
  // Writes the manifest, makes everything durable, renames the directory into
  // place and updates `latest`; then rotates. Returns the manifest. On
  // failure the temporaries are removed and `latest` is left as it was
  // (unless the failure came after `latest` was replaced, which the message
  // says). Call once.
  Result<CheckpointManifest> Commit();
  // Abandons the save and removes its temporaries. Idempotent.
  void Abort();

  struct Impl;  // opaque

 private:
  friend class CheckpointWriter;
  explicit CheckpointSave(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct RestoreOptions {
  // Verify sizes and checksums of every file before choosing a checkpoint.
  // Default: true.
  bool verify = true;
  // A remote written by an Uploader, consulted when no local checkpoint is
  // intact (or always, with prefer_remote). Empty: none. Default: "".
  std::string remote;
  // The Source of the remote. Default: DefaultSource().
  std::shared_ptr<Source> remote_source;
  // Use the remote even if a local checkpoint is intact. Default: false.
  bool prefer_remote = false;
};

struct RestoreResult {
  CheckpointManifest manifest;
  std::string url;                    // the local checkpoint directory
  bool from_remote = false;           // downloaded from the remote
  std::vector<std::string> skipped;   // "name: reason" for each skipped one
};

// Owns a checkpoint directory: saves, rotation, restore. Only one writer per
// directory (across processes): the second Open is refused.
class SHARDSTREAM_EXPORT CheckpointWriter {
 public:
  // Creates dir if needed, takes its lock and removes leftovers of an
  // interrupted save. On failure returns kUnavailable if another writer holds
  // the directory, or the I/O error.
  static Result<std::unique_ptr<CheckpointWriter>> Open(const std::string& dir,
                                                        CheckpointWriterOptions options = {});
  ~CheckpointWriter();

  const std::string& dir() const { return dir_; }
  Source& source() { return *source_; }

  // Begins a save of `step` with the user's metadata (a JSON object text).
  // A checkpoint of the same step is replaced on Commit. On failure returns
  // kConfig if a save is already open (saves do not wait for each other) or
  // the metadata is not a JSON object, or the I/O error.
  Result<std::unique_ptr<CheckpointSave>> BeginSave(int64_t step,
                                                    std::string metadata_json = "{}");
  // Convenience: saves whole in-memory files.
  Result<CheckpointManifest> SaveFiles(
      int64_t step, const std::vector<std::pair<std::string, std::string>>& files,
      std::string metadata_json = "{}");

  // Applies the rotation policy again. Checkpoints kept only because they
  // were in_use (still uploading) at the last save go now if no longer in
  // use; call it after the uploader settles. Not concurrently with a save.
  Status RotateNow();

  // The newest intact checkpoint: local ones newest first (each verified),
  // then the remote's committed ones (downloaded here, verified, committed
  // locally). Corrupt or incomplete ones are skipped with a warning. On
  // failure returns NotFound if there is none. Not concurrently with a save.
  Result<RestoreResult> RestoreLatest(const RestoreOptions& options = {});

  // Commits a complete, verified checkpoint directory that already sits in
  // `tmp_url` (a hidden sibling made by NewTempDir). Used by restore.
  Result<CheckpointManifest> CommitDirectory(const std::string& tmp_url,
                                             CheckpointManifest manifest);
  // Commits the files a caller wrote and synced into `tmp_url` (made by
  // NewTempDir; DCP's ranks) as ckpt-<step>: writes their manifest
  // (MakeCheckpointManifest), then CommitDirectory.
  Result<CheckpointManifest> CommitFiles(const std::string& tmp_url, int64_t step,
                                         std::vector<CheckpointFile> files,
                                         const std::string& metadata_json);
  // A fresh hidden temporary directory under dir().
  Result<std::string> NewTempDir(const std::string& tag);

 private:
  friend class CheckpointSave;
  struct Lock;
  CheckpointWriter(std::string dir, CheckpointWriterOptions options, std::unique_ptr<Lock> lock);
  void Hook(std::string_view point);
  Status Rotate(const std::string& keep_name);
  Status RemoveTree(const std::string& url);
  Status WriteLatest(const std::string& name);

  std::string dir_;
  CheckpointWriterOptions options_;
  std::shared_ptr<Source> source_;
  std::unique_ptr<Lock> lock_;
  std::mutex save_mu_;  // held while a CheckpointSave is open (flag below)
  bool save_open_ = false;
};

}  // namespace shardstream

#endif  // SHARDSTREAM_CHECKPOINT_H_
