// Checkpoint upload to an S3 endpoint (moto on loopback in
// benchmarks/remote_benchmark.py): the Uploader's multipart path (parallel
// parts, each signed and checked) against one single-stream PUT of the same
// bytes (S3Client::PutFile below its multipart threshold).
//
// Credentials and endpoint come from the AWS_* environment. Prints one JSON
// object with the medians.
//
//   s3_upload_benchmark --bucket B --size-mib 256 --runs 5 [--part-mib 16] [--threads 4]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardstream/checkpoint.h"
#include "shardstream/s3.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"

using namespace shardstream;
using Clock = std::chrono::steady_clock;

static double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char** argv) {
  std::string bucket = "bench";
  uint64_t size_mib = 256, part_mib = 16;
  int runs = 5, threads = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--bucket") bucket = v;
    else if (k == "--size-mib") size_mib = std::stoull(v);
    else if (k == "--part-mib") part_mib = std::stoull(v);
    else if (k == "--runs") runs = std::stoi(v);
    else if (k == "--threads") threads = std::stoi(v);
  }
  char tmpl[] = "/tmp/s3bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) return 1;
  std::string local = tmpl;
  auto client = S3Client::Make();
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 1;
  }
  (void)(*client)->CreateBucket(bucket);
  const uint64_t size = size_mib << 20;
  {
    auto w = CheckpointWriter::Open(local);
    if (!w.ok()) return 1;
    std::string data(size, '\0');
    std::mt19937_64 rng(1);
    for (size_t i = 0; i + 8 <= data.size(); i += 8) {
      uint64_t x = rng();
      std::memcpy(&data[i], &x, 8);
    }
    if (!(*w)->SaveFiles(1, {{"model.bin", data}}).ok()) return 1;
  }
  std::string file = local + "/" + CheckpointName(1) + "/model.bin";
  std::vector<double> multipart, single;
  for (int r = 0; r < runs; ++r) {
    UploaderOptions o;
    o.multipart_threshold = part_mib << 20;
    o.part_size = part_mib << 20;
    o.part_threads = threads;
    o.verify_readback = false;  // parts are checked by their SHA-256 and MD5 ETag
    std::string remote = "s3://" + bucket + "/mp" + std::to_string(r);
    auto u = Uploader::Create(local, remote, o);
    if (!u.ok()) return 1;
    auto t0 = Clock::now();
    Status s = (*u)->UploadNow(CheckpointName(1));
    auto t1 = Clock::now();
    if (!s.ok()) {
      std::cerr << "multipart: " << s << "\n";
      return 1;
    }
    multipart.push_back(static_cast<double>(size) / 1e9 /
                        std::chrono::duration<double>(t1 - t0).count());

    S3Options so;
    so.multipart_threshold = size + 1;  // one PUT
    auto one = S3Client::Make(so);
    t0 = Clock::now();
    s = (*one)->PutFile("s3://" + bucket + "/single" + std::to_string(r), file);
    t1 = Clock::now();
    if (!s.ok()) {
      std::cerr << "single PUT: " << s << "\n";
      return 1;
    }
    single.push_back(static_cast<double>(size) / 1e9 /
                     std::chrono::duration<double>(t1 - t0).count());
  }
  std::string rm = "rm -rf '" + local + "'";
  (void)std::system(rm.c_str());
  nlohmann::json j = {{"size_mib", size_mib},       {"part_mib", part_mib},
                      {"part_threads", threads},    {"runs", runs},
                      {"multipart_gbps", Median(multipart)}, {"single_put_gbps", Median(single)},
                      {"multipart_runs", multipart}, {"single_put_runs", single}};
  std::cout << j.dump() << "\n";
  return 0;
}
