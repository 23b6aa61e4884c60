// Checkpoint write and upload throughput.
//
//   checkpoint_benchmark [--dir DIR] [--mib 2048] [--runs 3] [--chunk-mib 4]
//                        [--upload-mib 512]
//
// Write: a checkpoint of --mib MiB (one file, streamed in --chunk-mib pieces,
// hashed, fsynced, published) against `dd if=/dev/zero of=DIR/dd.bin bs=4M
// count=N conv=fsync` on the same disk, alternating, --runs times each.
// Upload: an --upload-mib MiB checkpoint to a local directory remote: single
// stream and multipart (4 parallel 16 MiB parts), with and without read-back
// verification, against `dd ... conv=fsync` copying the same file.
// Prints medians and a JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "shardstream/checkpoint.h"
#include "shardstream/uploader.h"

using namespace shardstream;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Secs(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double TimeShell(const std::string& cmd) {
  auto t0 = Clock::now();
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "command failed: %s\n", cmd.c_str());
    std::exit(1);
  }
  return Secs(t0);
}

void Die(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/shardstream-ckpt-bench";
  uint64_t mib = 2048, upload_mib = 512, chunk_mib = 4;
  int runs = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--dir") dir = argv[i + 1];
    else if (a == "--mib") mib = std::stoull(argv[i + 1]);
    else if (a == "--runs") runs = std::stoi(argv[i + 1]);
    else if (a == "--chunk-mib") chunk_mib = std::stoull(argv[i + 1]);
    else if (a == "--upload-mib") upload_mib = std::stoull(argv[i + 1]);
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string local = dir + "/local";
  std::string chunk(chunk_mib << 20, '\0');
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= chunk.size(); i += 8) {
    uint64_t r = rng();
    std::memcpy(&chunk[i], &r, 8);
  }

  // ---- local write vs dd ----
  std::vector<double> dd_s, ck_s;
  {
    CheckpointWriterOptions o;
    o.keep_last = 0;  // rotation outside the timed part
    auto w = CheckpointWriter::Open(local, o);
    if (!w.ok()) Die(w.status());
    const uint64_t nchunks = (mib << 20) / chunk.size();
    for (int r = 0; r < runs; ++r) {
      std::string dd = "dd if=/dev/zero of=" + dir + "/dd.bin bs=4M count=" +
                       std::to_string((mib << 20) / (4 << 20)) + " conv=fsync status=none";
      dd_s.push_back(TimeShell(dd));
      fs::remove(dir + "/dd.bin");
      auto t0 = Clock::now();
      auto save = (*w)->BeginSave(r + 1);
      if (!save.ok()) Die(save.status());
      if (Status s = (*save)->OpenFile("model.bin"); !s.ok()) Die(s);
      for (uint64_t i = 0; i < nchunks; ++i)
        if (Status s = (*save)->Append(chunk); !s.ok()) Die(s);
      auto m = (*save)->Commit();
      if (!m.ok()) Die(m.status());
      ck_s.push_back(Secs(t0));
      if (r + 1 < runs) fs::remove_all(local + "/" + CheckpointName(r + 1));
      std::printf("run %d: dd %.2f s (%.0f MiB/s), checkpoint %.2f s (%.0f MiB/s)\n", r + 1,
                  dd_s.back(), mib / dd_s.back(), ck_s.back(), mib / ck_s.back());
    }
  }
  double dd_mibs = mib / Median(dd_s), ck_mibs = mib / Median(ck_s);
  std::printf("write %llu MiB: dd conv=fsync median %.0f MiB/s, checkpoint median %.0f MiB/s "
              "= %.0f%% of dd\n", static_cast<unsigned long long>(mib), dd_mibs, ck_mibs,
              100.0 * ck_mibs / dd_mibs);
  fs::remove_all(local);

  // ---- upload to a local directory remote ----
  const std::string up_local = dir + "/up-local";
  {
    auto w = CheckpointWriter::Open(up_local);
    if (!w.ok()) Die(w.status());
    auto save = (*w)->BeginSave(1);
    if (!save.ok()) Die(save.status());
    if (Status s = (*save)->OpenFile("model.bin"); !s.ok()) Die(s);
    for (uint64_t i = 0; i < (upload_mib << 20) / chunk.size(); ++i)
      if (Status s = (*save)->Append(chunk); !s.ok()) Die(s);
    if (auto m = (*save)->Commit(); !m.ok()) Die(m.status());
  }
  struct Mode { const char* name; bool multipart; bool verify; };
  std::vector<double> base_s;
  std::printf("upload %llu MiB to a local directory remote (median of %d):\n",
              static_cast<unsigned long long>(upload_mib), runs);
  for (int r = 0; r < runs; ++r) {
    base_s.push_back(TimeShell("dd if=" + up_local + "/ckpt-000001/model.bin of=" + dir +
                               "/copy.bin bs=4M conv=fsync status=none"));
    fs::remove(dir + "/copy.bin");
  }
  std::printf("  dd copy conv=fsync (single stream): %.0f MiB/s\n", upload_mib / Median(base_s));
  std::string json = "{\"write_mib\":" + std::to_string(mib) + ",\"dd_mibs\":" +
                     std::to_string(dd_mibs) + ",\"checkpoint_mibs\":" + std::to_string(ck_mibs) +
                     ",\"upload_dd_mibs\":" + std::to_string(upload_mib / Median(base_s));
  for (Mode mode : {Mode{"single stream, verified", false, true},
                    Mode{"single stream, size only", false, false},
                    Mode{"multipart 4x16 MiB, verified", true, true},
                    Mode{"multipart 4x16 MiB, size only", true, false}}) {
    std::vector<double> t;
    for (int r = 0; r < runs; ++r) {
      std::string remote = dir + "/remote";
      fs::remove_all(remote);
      fs::create_directories(remote);
      UploaderOptions o;
      o.verify_readback = mode.verify;
      if (mode.multipart) {
        o.multipart = NewSourceMultipartSink(LocalSource(), remote);
        o.multipart_threshold = 1;
      }
      auto u = Uploader::Create(up_local, remote, o);
      if (!u.ok()) Die(u.status());
      auto t0 = Clock::now();
      if (Status s = (*u)->UploadNow("ckpt-000001"); !s.ok()) Die(s);
      t.push_back(Secs(t0));
    }
    double v = upload_mib / Median(t);
    std::printf("  %-30s %.0f MiB/s\n", mode.name, v);
    json += std::string(",\"") + (mode.multipart ? "multipart" : "single") +
            (mode.verify ? "_verified" : "_size_only") + "_mibs\":" + std::to_string(v);
  }
  std::printf("%s}\n", json.c_str());
  fs::remove_all(dir);
  return 0;
}
