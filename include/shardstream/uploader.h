// Uploader: copies committed local checkpoints to a remote in the background.
//
// Remote layout (docs/checkpoints.md): <remote>/ckpt-000200/<files>,
// <remote>/ckpt-000200/manifest.json, then <remote>/ckpt-000200/COMMIT, written
// only after every file is up and verified (size, and checksum read back or a
// part-wise ETag). A checkpoint without a valid COMMIT is incomplete, whatever
// else is there. <remote>/latest is a hint written after COMMIT; readers never
// trust it without the marker.
//
// Large files go through a MultipartSink when one is given (parallel parts,
// per-part retries, run on the process's transfer engine after every read:
// transfer.h); everything else is a streamed write through the remote
// Source (file:// now; http PUT and s3:// plug in as Sources).
//
// Thread-safety: all methods may be called from any thread. One background
// thread uploads checkpoints in order (parts in parallel); it is started by
// the first Enqueue and joined by Stop() or the destructor.
#ifndef SHARDSTREAM_UPLOADER_H_
#define SHARDSTREAM_UPLOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardstream/checkpoint.h"
#include "shardstream/export.h"
#include "shardstream/result.h"
#include "shardstream/source.h"

namespace shardstream {

class S3Client;

// EXPERIMENTAL: the multipart seam (S3 CreateMultipartUpload / UploadPart /
// CompleteMultipartUpload / AbortMultipartUpload / ListMultipartUploads).
// Implementations are thread-safe: parts are uploaded concurrently.
class SHARDSTREAM_EXPORT MultipartSink {
 public:
  struct Pending {
    std::string url;
    std::string upload_id;
    int64_t initiated_unix_ms = 0;
  };
  virtual ~MultipartSink();
  // Starts an upload of `url`; returns its id.
  virtual Result<std::string> Create(const std::string& url) = 0;
  // Uploads part `number` (1-based); returns its ETag. May be retried.
  virtual Result<std::string> UploadPart(const std::string& url, const std::string& upload_id,
                                         int number, std::string_view data) = 0;
  // Publishes the object from the parts, in order. etags[i] is part i+1's.
  virtual Status Complete(const std::string& url, const std::string& upload_id,
                          const std::vector<std::string>& etags) = 0;
  virtual Status Abort(const std::string& url, const std::string& upload_id) = 0;
  // Uploads begun under `prefix` and neither completed nor aborted.
  virtual Result<std::vector<Pending>> ListPending(const std::string& prefix) = 0;
};

// A MultipartSink over any writable Source: parts are files under
// <root>/.multipart/<id>/, Complete concatenates them into the target. Serves
// file:// remotes and tests of the multipart path.
SHARDSTREAM_EXPORT std::shared_ptr<MultipartSink> NewSourceMultipartSink(
    std::shared_ptr<Source> source, std::string root);

// A MultipartSink for s3:// urls over S3 multipart upload. Parts are signed
// with their SHA-256 (checked by S3) and their ETag is compared with the MD5
// of the bytes sent (kChecksum, retried, on a mismatch); ListPending reports
// each upload's initiation time, so AbortStaleUploads can age them.
SHARDSTREAM_EXPORT std::shared_ptr<MultipartSink> NewS3MultipartSink(
    std::shared_ptr<S3Client> client);

enum class UploadState { kPending, kUploading, kDone, kFailed };
SHARDSTREAM_EXPORT std::string_view UploadStateName(UploadState s);

struct UploadStatus {
  std::string name;      // "ckpt-000200"
  UploadState state = UploadState::kPending;
  Status error;          // the last failure (kFailed)
  int attempts = 0;      // rounds started
  uint64_t bytes = 0;    // bytes uploaded in the last round
};

struct UploaderOptions {
  // Default: DefaultSource() for both; for an s3:// remote with neither
  // remote_source nor multipart set, an S3 source and NewS3MultipartSink over
  // one S3Client from the environment (Create fails with kAuth without
  // credentials).
  std::shared_ptr<Source> local_source;
  std::shared_ptr<Source> remote_source;
  // Multipart path for files of at least multipart_threshold bytes. Default:
  // none (streamed single writes), except for s3:// as above.
  std::shared_ptr<MultipartSink> multipart;
  uint64_t multipart_threshold = 64ull << 20;  // Default: 64 MiB.
  uint64_t part_size = 16ull << 20;            // Default: 16 MiB.
  // Parts of one file queued or uploading at once (each holds part_size
  // bytes). Default: 4.
  int part_threads = 4;
  // Tries per file or part before the round fails. Default: 4.
  int attempts = 4;
  // Backoff between tries (doubling). Default: 50 ms.
  int retry_initial_ms = 50;
  // A failed checkpoint is tried again after this long. Default: 30 000 ms.
  int retry_after_ms = 30000;
  // Read every uploaded file back and compare its checksum (otherwise only
  // sizes, and part ETags on the multipart path). Default: true.
  bool verify_readback = true;
  // Write <remote>/latest after each commit marker. Default: true.
  bool write_latest_hint = true;
  // Stream chunk size. Default: 4 MiB.
  size_t chunk_size = 4u << 20;
  // Remote rotation, run after each commit marker is durable (the same policy
  // as CheckpointWriterOptions): keeps the newest keep_last committed
  // checkpoints on the remote, every one whose step is a multiple of
  // keep_every_steps (0: none), the one just committed and the one `latest`
  // names; older ones are deleted, commit marker first, so a half-deleted
  // one is never presented as complete. Failures are logged, not returned.
  // Remotes that cannot list (http) rotate what this Uploader committed.
  // 0 keeps every checkpoint. Default: 0 (the Python CheckpointManager and
  // `shardstream ckpt push --keep-last` pass the local policy).
  int keep_last = 0;
  int64_t keep_every_steps = 0;  // Default: 0.
};

class SHARDSTREAM_EXPORT Uploader {
 public:
  // local_dir: the CheckpointWriter's directory; remote: a directory url.
  static Result<std::unique_ptr<Uploader>> Create(std::string local_dir, std::string remote,
                                                  UploaderOptions options = {});
  // Stops (see Stop).
  ~Uploader();

  // Queues the committed local checkpoint `name` (no-op if queued or done).
  void Enqueue(const std::string& name);
  // True while `name` is pending, uploading or failed: its local copy must
  // stay (CheckpointWriterOptions::in_use).
  bool InUse(const std::string& name) const;
  std::vector<UploadStatus> Statuses() const;
  std::optional<UploadStatus> StatusOf(const std::string& name) const;
  // Blocks until nothing is pending or uploading (failed ones count as
  // settled) or timeout_ms passes (<0: no limit). Returns OK if everything
  // queued is done, else the first failure (kUnavailable on timeout).
  Status Wait(int64_t timeout_ms = -1);
  // Tries failed checkpoints again now instead of after retry_after_ms.
  void RetryFailed();
  // Cancels the upload in progress (its multipart upload is aborted, its
  // checkpoint stays pending), joins the thread. Idempotent.
  void Stop();
  // Aborts multipart uploads under the remote older than max_age_ms (left by
  // a killed process). Returns how many were aborted.
  Result<int> AbortStaleUploads(int64_t max_age_ms);

  // Uploads one checkpoint synchronously in the caller's thread (the CLI's
  // `push`). Same protocol and checks as the background path. REQUIRES: name
  // is not also queued with Enqueue.
  Status UploadNow(const std::string& name);

 private:
  struct Impl;
  explicit Uploader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Remote reading. The checkpoints under `remote` with a valid COMMIT marker,
// oldest first (incomplete ones are left out).
SHARDSTREAM_EXPORT Result<std::vector<CheckpointManifest>> ListRemoteCheckpoints(
    Source& source, const std::string& remote);
// The same; `uncommitted` (if not null) receives the names of checkpoints
// present without a commit marker (an upload unfinished or interrupted).
SHARDSTREAM_EXPORT Result<std::vector<CheckpointManifest>> ListRemoteCheckpoints(
    Source& source, const std::string& remote, std::vector<std::string>* uncommitted);
// The committed manifest of remote checkpoint `name`; kNotFound without a
// marker, kCorrupt if the marker does not match the manifest.
SHARDSTREAM_EXPORT Result<CheckpointManifest> ReadRemoteCommitted(Source& source,
                                                                  const std::string& remote,
                                                                  const std::string& name);

}  // namespace shardstream

#endif  // SHARDSTREAM_UPLOADER_H_
