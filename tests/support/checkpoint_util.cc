#include "support/checkpoint_util.h"

#include <gtest/gtest.h>

#include <random>

#include "shardstream/checksum.h"
#include "shardstream/url.h"

namespace shardstream::testing {

std::vector<std::pair<std::string, std::string>> StepFiles(int64_t step, size_t max_size) {
  std::vector<std::pair<std::string, std::string>> out;
  std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919 + 13);
  for (const char* name : {"model.bin", "optim.bin", "data_state.json"}) {
    size_t n = static_cast<size_t>(rng() % (max_size + 1));
    std::string data(n, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    out.emplace_back(name, std::move(data));
  }
  return out;
}

std::string CheckStepFiles(Source& source, const std::string& ckpt_url,
                           const CheckpointManifest& m, size_t max_size) {
  auto want = StepFiles(m.step, max_size);
  if (m.files.size() != want.size()) return "manifest lists " + std::to_string(m.files.size()) + " files";
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& [name, data] = want[i];
    if (m.files[i].name != name || m.files[i].size != data.size() ||
        m.files[i].checksum != ChecksumOf(data))
      return "manifest entry " + name + " differs";
    auto got = ReadFileToString(source, JoinUrl(ckpt_url, name));
    if (!got.ok()) return got.status().ToString();
    if (*got != data) return name + " is not byte-identical";
  }
  return {};
}

WiredCheckpoints WireUploader(const std::string& local, const std::string& remote,
                              UploaderOptions uo, int keep_last) {
  WiredCheckpoints p;
  auto u = Uploader::Create(local, remote, std::move(uo));
  EXPECT_TRUE(u.ok()) << u.status();
  if (!u.ok()) return p;
  p.uploader = std::move(*u);
  CheckpointWriterOptions o;
  o.keep_last = keep_last;
  Uploader* up = p.uploader.get();
  o.in_use = [up](const std::string& n) { return up->InUse(n); };
  o.on_commit = [up](const CheckpointManifest& m) { up->Enqueue(m.name); };
  auto w = CheckpointWriter::Open(local, o);
  EXPECT_TRUE(w.ok()) << w.status();
  if (w.ok()) p.writer = std::move(*w);
  return p;
}

}  // namespace shardstream::testing
