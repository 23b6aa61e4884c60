// The shard subcommands end to end: pack -> verify -> ls -> read back is
// byte-identical to the source files; verify finds damaged shards; index,
// manifest, bench and --help work.
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sched.h>
#include <sys/vfs.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "shardstream/checksum.h"
#include "shardstream/dataset_inputs.h"
#include "shardstream/manifest.h"
#include "shardstream/tar_reader.h"
#include "support/tar_fixtures.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using testing::RunCommand;
using testing::TempDir;

std::string Cli() { return testing::CliPath(); }

// A source tree of samples: <dir>/<key>.<field>.
std::map<std::string, std::string> MakeSource(const std::string& root, int n) {
  std::mt19937 rng(11);
  std::map<std::string, std::string> files;
  for (int i = 0; i < n; ++i) {
    std::string key = (i % 2 ? "train/" : "val/") + std::string("img") + std::to_string(i);
    std::string img(rng() % 20000 + (i == 3 ? 0 : 1), '\0');
    if (i == 3) img.clear();  // an empty field
    for (char& c : img) c = static_cast<char>(rng());
    files[key + ".jpg"] = img;
    files[key + ".cls"] = std::to_string(i % 10);
    if (i % 5 == 0) files[key + ".meta.json"] = "{\"i\": " + std::to_string(i) + "}";
  }
  for (const auto& [rel, data] : files) {
    std::filesystem::create_directories(std::filesystem::path(root + "/" + rel).parent_path());
    testing::WriteFile(root + "/" + rel, data);
  }
  return files;
}

TEST(TarCliTest, PackVerifyLsReadIsByteIdentical) {
  TempDir dir;
  auto files = MakeSource(dir.Join("src"), 60);
  for (const char* compress : {"none", "zstd"}) {
    std::string out = dir.Join(std::string("out-") + compress);
    std::string output;
    ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out +
                             " --shard-size 200KiB --compress " + compress + " --json",
                         &output),
              0)
        << output;
    auto summary = nlohmann::json::parse(output.substr(output.find('{')));
    EXPECT_EQ(summary["samples"], 60);
    ASSERT_EQ(RunCommand(Cli() + " verify " + out + "/manifest.jsonl", &output), 0) << output;
    EXPECT_NE(output.find("shards ok"), std::string::npos);

    auto manifest = ReadManifest(out + "/manifest.jsonl");
    ASSERT_TRUE(manifest.ok()) << manifest.status();
    ASSERT_GT(manifest->shards.size(), 1u);
    std::map<std::string, std::string> seen;
    int64_t listed = 0;
    for (const auto& shard : manifest->shards) {
      ASSERT_EQ(RunCommand(Cli() + " ls --json " + shard.resolved + " 2>/dev/null", &output), 0)
          << output;
      std::istringstream lines(output);
      for (std::string line; std::getline(lines, line);) {
        auto j = nlohmann::json::parse(line);
        EXPECT_FALSE(j["key"].get<std::string>().empty());
        ++listed;
      }
      testing::ReadOutcome r = testing::ReadAll(shard.resolved);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(static_cast<int64_t>(r.samples.size()), shard.nsamples);
      for (const auto& s : r.samples)
        for (const auto& [name, data] : s.fields) seen[s.key + "." + name] = data;
    }
    EXPECT_EQ(listed, 60);
    EXPECT_EQ(seen, files);  // every file, byte for byte, nothing else
  }
}

TEST(TarCliTest, AMisspeltSubcommandSuggestsTheNearestOne) {
  std::string output;
  EXPECT_EQ(RunCommand(Cli() + " lst x", &output), 2);
  EXPECT_NE(output.find("unknown subcommand 'lst', did you mean 'ls'?"), std::string::npos) << output;
  EXPECT_EQ(RunCommand(Cli() + " frobnicate", &output), 2);
  EXPECT_NE(output.find("unknown subcommand 'frobnicate' (shardstream --help"), std::string::npos)
      << output;
}

TEST(TarCliTest, VerifyAndManifestTakeAFolder) {
  TempDir dir;
  MakeSource(dir.Join("src"), 20);
  std::string out = dir.Join("out");
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 10"), 0);
  std::string output;
  EXPECT_EQ(RunCommand(Cli() + " verify " + out, &output), 0) << output;  // its manifest.jsonl
  EXPECT_NE(output.find("2 of 2 shards ok"), std::string::npos) << output;
  std::filesystem::remove(out + "/manifest.jsonl");
  EXPECT_EQ(RunCommand(Cli() + " verify " + out, &output), 1) << output;
  EXPECT_NE(output.find("without a manifest.jsonl"), std::string::npos) << output;
  EXPECT_NE(output.find("shardstream manifest " + out + " --out " + out + "/manifest.jsonl"),
            std::string::npos) << output;
  ASSERT_EQ(RunCommand(Cli() + " manifest " + out + " --out " + out + "/manifest.jsonl", &output), 0)
      << output;
  EXPECT_NE(output.find("2 shards, 20"), std::string::npos) << output;
  EXPECT_EQ(RunCommand(Cli() + " verify " + out, &output), 0) << output;
}

TEST(TarCliTest, PackIntoAFolderOfShardsIsRefusedUnlessOverwrite) {
  TempDir dir;
  MakeSource(dir.Join("src"), 40);
  std::string out = dir.Join("out");
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 7 --index"), 0);
  std::string output;
  EXPECT_NE(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 20", &output), 0);
  EXPECT_NE(output.find("already holds"), std::string::npos) << output;
  EXPECT_NE(output.find("--overwrite"), std::string::npos) << output;
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 20 --overwrite",
                       &output), 0) << output;
  // The folder holds the new shards alone: 40 samples, not 80.
  auto folder = ResolveDataset({out});
  ASSERT_TRUE(folder.ok()) << folder.status();
  ASSERT_EQ(folder->shards.size(), 2u);
  int64_t samples = 0;
  for (const auto& e : folder->shards) samples += e.nsamples;
  EXPECT_EQ(samples, 40);
}

TEST(TarCliTest, VerifyListsDamagedShardsAndExitsOne) {
  TempDir dir;
  MakeSource(dir.Join("src"), 40);
  std::string out = dir.Join("out");
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 10"), 0);
  // Shard 1: one flipped byte (same size). Shard 2: one byte longer.
  std::string s1 = out + "/shard-000001.tar";
  std::string bytes = testing::ReadFile(s1);
  bytes[bytes.size() / 2] ^= 1;
  testing::WriteFile(s1, bytes);
  testing::WriteFile(out + "/shard-000002.tar", testing::ReadFile(out + "/shard-000002.tar") + "x");
  std::string output;
  EXPECT_EQ(RunCommand(Cli() + " verify " + out + "/manifest.jsonl", &output), 1) << output;
  EXPECT_NE(output.find("BAD  shard-000001.tar: checksum"), std::string::npos) << output;
  EXPECT_NE(output.find("BAD  shard-000002.tar: size"), std::string::npos) << output;
  EXPECT_NE(output.find("ok   shard-000000.tar"), std::string::npos) << output;
  EXPECT_EQ(RunCommand(Cli() + " verify --json " + out + "/manifest.jsonl", &output), 1);
  auto j = nlohmann::json::parse(output);
  EXPECT_EQ(j["bad"].size(), 2u);
  // A missing shard is bad too.
  std::filesystem::remove(out + "/shard-000003.tar");
  EXPECT_EQ(RunCommand(Cli() + " verify " + out + "/manifest.jsonl", &output), 1);
  EXPECT_NE(output.find("BAD  shard-000003.tar"), std::string::npos) << output;
}

TEST(TarCliTest, IndexAndManifestForExistingShards) {
  TempDir dir;
  MakeSource(dir.Join("src"), 30);
  std::string out = dir.Join("out");
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out + " --max-samples 8"), 0);
  std::string output;
  ASSERT_EQ(RunCommand(Cli() + " index " + out + "/shard-000000.tar " + out +
                           "/shard-000001.tar --json",
                       &output),
            0)
      << output;
  EXPECT_NE(output.find("\"samples\":8"), std::string::npos) << output;
  auto r = TarReader::OpenAt(out + "/shard-000001.tar", 5);
  ASSERT_TRUE(r.ok()) << r.status();
  Sample s;
  ASSERT_TRUE(*(*r)->Next(&s));
  EXPECT_EQ(s.index, 5);

  ASSERT_EQ(RunCommand("cd " + out + " && " + Cli() +
                           " manifest shard-000000.tar shard-000001.tar shard-000002.tar "
                           "shard-000003.tar --out again.jsonl",
                       &output),
            0)
      << output;
  EXPECT_EQ(testing::ReadFile(out + "/again.jsonl"), testing::ReadFile(out + "/manifest.jsonl"));
  ASSERT_EQ(RunCommand(Cli() + " manifest " + out + "/shard-000000.tar", &output), 0);
  auto line = nlohmann::json::parse(output);
  EXPECT_EQ(line["nsamples"], 8);
  EXPECT_EQ(line["checksum"], ChecksumOf(testing::ReadFile(out + "/shard-000000.tar")));
}

TEST(TarCliTest, LsNamesShardAndOffsetOfCorruption) {
  TempDir dir;
  testing::TarBuilder b;
  b.File("a.x", "1").File("../evil.x", "2").End();
  testing::WriteFile(dir.Join("bad.tar"), b.bytes());
  std::string output;
  EXPECT_EQ(RunCommand(Cli() + " ls " + dir.Join("bad.tar"), &output), 1);
  EXPECT_NE(output.find(dir.Join("bad.tar")), std::string::npos) << output;
  EXPECT_NE(output.find("offset 1024"), std::string::npos) << output;
  EXPECT_NE(output.find("corrupt"), std::string::npos) << output;
}

TEST(TarCliTest, BenchReportsBothReadsAndRatio) {
  TempDir dir;
  MakeSource(dir.Join("src"), 20);
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + dir.Join("out") +
                       " --compress zstd"),
            0);
  std::string output;
  ASSERT_EQ(RunCommand(Cli() + " bench --runs 1 --json " + dir.Join("out") + "/shard-000000.tar.zst",
                       &output),
            0)
      << output;
  auto j = nlohmann::json::parse(output);
  EXPECT_EQ(j["samples"], 20);
  EXPECT_GT(j["plain_read_gbps"].get<double>(), 0);
  EXPECT_GT(j["reader_gbps"].get<double>(), 0);
  EXPECT_GT(j["ratio_vs_plain_read"].get<double>(), 0);
  EXPECT_TRUE(j.contains("external_gbps"));  // zstd -d -c on the same file
  EXPECT_GT(j["peak_rss_mib"].get<double>(), 0);
}

TEST(TarCliTest, BenchLoaderReportsLoaderPlainReadAndIdealPack) {
  TempDir dir;
  const std::string data = dir.Join("tokens");
  ASSERT_EQ(RunCommand(Cli() + " bench-loader --make-tokens " + data +
                       " --count 400 --mean-tokens 100 --shard-mib 1"),
            0);
  const std::string run = Cli() + " bench-loader " + data +
                          "/manifest.jsonl --tokens tokens.npy --batch-size 8 --seq-len 128 --runs 1";
  std::string output;
  ASSERT_EQ(RunCommand(run + " --json", &output), 0) << output;
  auto j = nlohmann::json::parse(output);
  EXPECT_GT(j["batches_per_s"].get<double>(), 0);
  EXPECT_GT(j["loader_file_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["plain_read_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["ideal_pack_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["ratio_ideal_pack_to_plain_read"].get<double>(), 0);
  EXPECT_GT(j["tar_reader_samples_per_s"].get<double>(), 0);
  EXPECT_GT(j["loader_cpu_cores"].get<double>(), 0);
  EXPECT_TRUE(j["document_metadata"].get<bool>());
  // The cross-core round trip: 0 when not measured (one CPU, or the other
  // one not ours for a second under load); never negative.
  EXPECT_GE(j["cross_core_round_trip_ns"].get<double>(), 0);
  EXPECT_GE(j["cross_core_round_trip_ns_max"].get<double>(),
            j["cross_core_round_trip_ns"].get<double>());

  EXPECT_EQ(j["page_cache"], "as found");
  EXPECT_FALSE(j.contains("resident_bytes_before_drop"));

  // --reread drops the shards' pages first and reads them back in. The set
  // was just read, so its pages are in the cache (unless reclaimed since),
  // and the file systems that drop clean pages on request drop some.
  ASSERT_EQ(RunCommand(run + " --json --reread", &output), 0) << output;
  j = nlohmann::json::parse(output.substr(output.find('{')));  // after a tmpfs warning
  EXPECT_EQ(j["page_cache"], "reread");
  const auto before = j["resident_bytes_before_drop"].get<uint64_t>();
  const auto after = j["resident_bytes_after_drop"].get<uint64_t>();
  EXPECT_LE(after, before);
  struct statfs fs;
  ASSERT_EQ(statfs(data.c_str(), &fs), 0);
  const bool drops = fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC ||
                     fs.f_type == BTRFS_SUPER_MAGIC;
  if (drops && before > 0) EXPECT_LT(after, before);
  EXPECT_GT(j["ratio_to_plain_read"].get<double>(), 0);
  // Shards not in local files cannot be dropped: an error naming the url,
  // its credentials redacted, before anything is fetched.
  const std::string remote = dir.Join("remote.jsonl");
  testing::WriteFile(
      remote, R"({"url": "http://user:secret@127.0.0.1:9/s.tar", "size": 10240, "nsamples": 1})"
              "\n");
  ASSERT_EQ(RunCommand(Cli() + " bench-loader " + remote +
                           " --tokens tokens.npy --batch-size 8 --seq-len 128 --runs 1 --reread",
                       &output),
            1)
      << output;
  EXPECT_NE(output.find("--reread needs local shards, not http://user:REDACTED@127.0.0.1:9/s.tar"),
            std::string::npos)
      << output;
  EXPECT_EQ(output.find("secret"), std::string::npos) << output;

  // Without --shuffle there is no shuffle's limit to measure.
  EXPECT_FALSE(j.contains("ideal_shuffled_pack_gb_per_s"));
  // With it, the same documents copied from the mapped shards in a shuffle
  // buffer's order and in file order: both figures, and what the loader
  // makes of the limit. The peak RSS is the loader's epochs' alone, not
  // that of the mapped shards the limit copies from.
  ASSERT_EQ(RunCommand(run + " --json --shuffle 16", &output), 0) << output;
  j = nlohmann::json::parse(output);
  EXPECT_GT(j["ideal_shuffled_pack_gb_per_s"].get<double>(), 0);
  EXPECT_GT(j["ideal_mapped_pack_gb_per_s"].get<double>(), 0);
  EXPECT_LT(j["ideal_shuffle_cost"].get<double>(), 1);
  EXPECT_GT(j["ratio_to_ideal_shuffled_pack"].get<double>(), 0);
  EXPECT_GT(j["ratio_ideal_shuffled_pack_to_plain_read"].get<double>(), 0);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(j["peak_rss_of"] == "loader epochs" || j["peak_rss_of"] == "process") << j;
  EXPECT_FALSE(j.contains("shuffle_limit_error"));
  // Every document the set holds, copied once in each order.
  EXPECT_EQ(j["shuffle_limit_documents"].get<int64_t>(), 400);
  EXPECT_GE(j["shuffle_limit_bytes"].get<int64_t>(), 400 * 4);
  ASSERT_EQ(RunCommand(run + " --shuffle 16", &output), 0) << output;
  EXPECT_NE(output.find("shuffle limit: "), std::string::npos) << output;

  // --loader-only times the loader alone: no comparison figures at all.
  ASSERT_EQ(RunCommand(run + " --json --loader-only", &output), 0) << output;
  j = nlohmann::json::parse(output);
  EXPECT_GT(j["loader_file_gb_per_s"].get<double>(), 0);
  EXPECT_FALSE(j.contains("plain_read_gb_per_s"));
  EXPECT_FALSE(j.contains("ideal_pack_gb_per_s"));

  // Confined to one CPU there is no second one to probe: the round trip is
  // reported as 0 (not measured), and the run still succeeds.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  int first = 0;
  while (!CPU_ISSET(first, &allowed)) ++first;
  const std::string one_cpu = "taskset -c " + std::to_string(first) + " " + run;
  ASSERT_EQ(RunCommand(one_cpu + " --json --loader-only", &output), 0) << output;
  j = nlohmann::json::parse(output);
  EXPECT_EQ(j["cross_core_round_trip_ns"].get<double>(), 0);
  EXPECT_EQ(j["cross_core_round_trip_ns_max"].get<double>(), 0);
  EXPECT_GT(j["loader_file_gb_per_s"].get<double>(), 0);

  // A shard replaced after it was indexed, by a shorter tar that is whole:
  // the limit finds its index stale (naming it and both sizes) and is not
  // measured, the run goes on, and the loader refuses the shard against its
  // manifest entry.
  {
    const std::string shard = data + "/shard-000000.tar";
    const std::string index = testing::ReadFile(shard + ".idx");
    std::filesystem::rename(shard, shard + ".kept");
    const std::string whole = testing::TarBuilder().File("a.txt", "hello").End().bytes();
    testing::WriteFile(shard, whole);
    EXPECT_EQ(RunCommand(run + " --json --shuffle 16", &output), 1) << output;
    EXPECT_NE(output.find("the shuffle's limit is not measured: corrupt: sample index " + shard +
                          ".idx is stale: it describes "),
              std::string::npos)
        << output;
    EXPECT_NE(output.find("the shard has " + std::to_string(whole.size())), std::string::npos)
        << output;
    EXPECT_NE(output.find("its manifest entry says"), std::string::npos) << output;
    std::filesystem::rename(shard + ".kept", shard);
    EXPECT_EQ(testing::ReadFile(shard + ".idx"), index) << "the index is left as it was";
  }

  // A shard without its sample index: the loader reads it the usual way,
  // and the shuffle's limit, which needs the index, is reported as not
  // measured, naming the index, while the rest of the run goes on.
  std::filesystem::remove(data + "/shard-000000.tar.idx");
  ASSERT_EQ(RunCommand(run + " --json --shuffle 16", &output), 0) << output;
  const std::string no_index = output;
  j = nlohmann::json::parse(output.substr(output.find('{')));
  EXPECT_NE(j["shuffle_limit_error"].get<std::string>().find("shard-000000.tar.idx"),
            std::string::npos)
      << output;
  EXPECT_FALSE(j.contains("ideal_shuffled_pack_gb_per_s"));
  EXPECT_GT(j["loader_file_gb_per_s"].get<double>(), 0);
  EXPECT_NE(no_index.find("the shuffle's limit is not measured"), std::string::npos) << no_index;

  // A shard gone: exit 1 naming it.
  std::filesystem::remove(data + "/shard-000000.tar");
  EXPECT_EQ(RunCommand(run, &output), 1) << output;
  EXPECT_NE(output.find("shard-000000.tar"), std::string::npos) << output;
}

TEST(TarCliTest, BenchLoaderDecodesAnImageFieldPackedFromAnImageFolder) {
  TempDir dir;
  const std::string images = std::string(SHARDSTREAM_TEST_DATA_DIR) + "/images/";
  int n = 0;
  for (const char* cls : {"cat", "dog"}) {
    std::filesystem::create_directories(dir.Join(std::string("tree/") + cls));
    for (const char* f : {"rgb.jpg", "rgb420_odd.jpg", "progressive.jpg", "cmyk.jpg", "gray.jpg"})
      std::filesystem::copy_file(images + f, dir.Join(std::string("tree/") + cls + "/" +
                                                      std::to_string(n++) + ".jpg"));
  }
  std::string output;
  ASSERT_EQ(RunCommand(Cli() + " pack --image-folder " + dir.Join("tree") + " " + dir.Join("out"),
                       &output),
            0)
      << output;
  const std::string run = Cli() + " bench-loader " + dir.Join("out") +
                          "/manifest.jsonl --image-field jpg --fields cls --batch-size 4 "
                          "--image-size 32x48 --runs 1 --loader-only --json";
  ASSERT_EQ(RunCommand(run, &output), 0) << output;
  auto j = nlohmann::json::parse(output);
  EXPECT_EQ(j["image_field"], "jpg");
  EXPECT_GT(j["samples_per_s"].get<double>(), 0);
  EXPECT_GT(j["batches_per_s"].get<double>(), 0);
  // 10 images of 32 x 48 x 3 and 10 labels per epoch.
  EXPECT_GT(j["loader_tensor_gb_per_s"].get<double>(), 0);
  for (const char* crop : {"center", "none"})
    EXPECT_EQ(RunCommand(run + " --crop " + crop, &output), 0) << crop << output;
  // Usage errors: exit 2 naming the flag.
  EXPECT_EQ(RunCommand(run + " --crop middle", &output), 2) << output;
  EXPECT_NE(output.find("--crop"), std::string::npos) << output;
  EXPECT_EQ(RunCommand(run + " --image-size 0", &output), 2) << output;
}

TEST(TarCliTest, SizesBracesAndTheSummarySayWhatTheyMean) {
  TempDir dir;
  MakeSource(dir.Join("src"), 30);
  std::string out = dir.Join("out");
  std::string output;
  // Decimal sizes with SI units (KB = 1000), as the library and Python read them.
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + out +
                           " --shard-size 0.2MB --json",
                       &output),
            0)
      << output;
  auto j = nlohmann::json::parse(output.substr(output.find('{')));
  auto manifest = ReadManifest(out + "/manifest.jsonl");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  ASSERT_GT(manifest->shards.size(), 1u);
  uint64_t on_disk = 0;
  for (const auto& e : manifest->shards) {
    on_disk += static_cast<uint64_t>(e.size);
    EXPECT_LE(e.size, 200000 + 64 * 1024) << e.url;  // one sample may overshoot
  }
  EXPECT_EQ(j["shard_bytes"].get<uint64_t>(), on_disk);
  EXPECT_LT(j["payload_bytes"].get<uint64_t>(), on_disk);
  // The human summary: singular for one shard, and the shard bytes.
  std::string one = dir.Join("one");
  ASSERT_EQ(RunCommand(Cli() + " pack " + dir.Join("src") + " " + one, &output), 0) << output;
  EXPECT_NE(output.find("into 1 shard of "), std::string::npos) << output;
  EXPECT_EQ(output.find("1 shards"), std::string::npos) << output;
  // Brace patterns, quoted in the shell, expand as in the library.
  const std::string pattern = "'" + out + "/shard-{000000..000001}.tar'";
  ASSERT_EQ(RunCommand(Cli() + " ls --json " + pattern + " 2>/dev/null", &output), 0) << output;
  std::istringstream lines(output);
  int64_t listed = 0;
  for (std::string line; std::getline(lines, line);) ++listed;
  EXPECT_EQ(listed, manifest->shards[0].nsamples + manifest->shards[1].nsamples);
  ASSERT_EQ(RunCommand(Cli() + " index --json " + pattern, &output), 0) << output;
  EXPECT_NE(output.find("shard-000001.tar.idx"), std::string::npos) << output;
  EXPECT_NE(RunCommand(Cli() + " ls '" + out + "/shard-{000009..000012}.tar'", &output), 0) << output;
  // No subcommand: the overview and the usage status, not CLI11's 106.
  EXPECT_EQ(RunCommand(Cli(), &output), 2);
  EXPECT_NE(output.find("pack"), std::string::npos) << output;
  EXPECT_EQ(RunCommand(Cli() + " pack --no-such-flag", &output), 2) << output;
  EXPECT_EQ(RunCommand(Cli() + " pack . " + dir.Join("x") + " --shard-size 12parsecs", &output), 2);
  EXPECT_NE(output.find("unknown unit 'parsecs'"), std::string::npos) << output;
}

TEST(TarCliTest, PackImageFolderGivesImagesAndLabels) {
  TempDir dir;
  const std::string src = dir.Join("tree");
  std::filesystem::create_directories(src + "/dog");
  std::filesystem::create_directories(src + "/cat");
  testing::WriteFile(src + "/cat/a.jpg", "cat-a");
  testing::WriteFile(src + "/cat/b.1.png", "cat-b");
  testing::WriteFile(src + "/dog/c.JPEG", "dog-c");
  testing::WriteFile(src + "/dog/notes.txt", "not an image");
  testing::WriteFile(src + "/readme.md", "not in a class");
  const std::string out = dir.Join("out");
  std::string output;
  ASSERT_EQ(RunCommand(Cli() + " pack " + src + " " + out + " --image-folder --json", &output), 0)
      << output;
  auto j = nlohmann::json::parse(output.substr(output.find('{')));
  EXPECT_EQ(j["samples"], 3);
  EXPECT_EQ(j["classes"], 2);
  EXPECT_EQ(j["unkeyed_files"], 2);
  EXPECT_EQ(testing::ReadFile(out + "/classes.txt"), "cat\ndog\n");
  auto manifest = ReadManifest(out + "/manifest.jsonl");
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto r = TarReader::Open(manifest->shards[0].resolved);
  ASSERT_TRUE(r.ok()) << r.status();
  std::map<std::string, std::pair<std::string, std::string>> got;  // key -> (image, cls)
  Sample s;
  while (*(*r)->Next(&s)) {
    ASSERT_EQ(s.fields.size(), 2u) << s.key;
    const Field* cls = s.Find("cls");
    ASSERT_NE(cls, nullptr) << s.key;
    const Field& image = s.fields[0].name == "cls" ? s.fields[1] : s.fields[0];
    got[s.key] = {image.name + "=" + std::string(image.data), std::string(cls->data)};
  }
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(got, (std::map<std::string, P>{{"cat/a", {"jpg=cat-a", "0"}},
                                           {"cat/b_1", {"png=cat-b", "0"}},
                                           {"dog/c", {"jpeg=dog-c", "1"}}}));
  // An empty tree is an error, not an empty data set.
  std::filesystem::create_directories(dir.Join("empty"));
  EXPECT_NE(RunCommand(Cli() + " pack " + dir.Join("empty") + " " + dir.Join("o2") +
                           " --image-folder",
                       &output),
            0);
  EXPECT_NE(output.find("no <class>/<image>"), std::string::npos) << output;
}

TEST(TarCliTest, EverySubcommandHasHelp) {
  for (const char* cmd : {"pack", "ls", "index", "verify", "bench", "manifest"}) {
    std::string output;
    EXPECT_EQ(RunCommand(Cli() + " " + cmd + " --help", &output), 0) << cmd;
    EXPECT_NE(output.find("Usage"), std::string::npos) << cmd;
  }
  std::string output;
  EXPECT_NE(RunCommand(Cli() + " pack /nonexistent-dir /tmp/x", &output), 0);
  EXPECT_NE(RunCommand(Cli() + " pack . /tmp/x --shard-size 12parsecs", &output), 0);
}

}  // namespace
}  // namespace shardstream
