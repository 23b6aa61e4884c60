// Helpers for checkpoint tests: deterministic file contents per step and a
// check that a checkpoint holds exactly them.
#ifndef SHARDSTREAM_TESTS_SUPPORT_CHECKPOINT_UTIL_H_
#define SHARDSTREAM_TESTS_SUPPORT_CHECKPOINT_UTIL_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shardstream/checkpoint.h"
#include "shardstream/uploader.h"

namespace shardstream::testing {

// The files saved for `step`: a few of different sizes (up to max_size),
// contents derived from the step and the name.
std::vector<std::pair<std::string, std::string>> StepFiles(int64_t step, size_t max_size = 4096);
// Empty if the checkpoint at ckpt_url holds exactly StepFiles(m.step, max_size)
// and its manifest matches them; else what differs.
std::string CheckStepFiles(Source& source, const std::string& ckpt_url,
                           const CheckpointManifest& m, size_t max_size = 4096);

// A writer and an uploader wired together as the Python CheckpointManager
// does: each commit is queued for upload, and the writer's rotation spares
// what the uploader still reads. Null members (and a test failure) when
// either cannot be created.
struct WiredCheckpoints {
  std::unique_ptr<Uploader> uploader;
  std::unique_ptr<CheckpointWriter> writer;
};
WiredCheckpoints WireUploader(const std::string& local, const std::string& remote,
                              UploaderOptions uo, int keep_last = 2);

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_CHECKPOINT_UTIL_H_
