// `shardstream ckpt ls|verify|pull|push` against real directories.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "shardstream/checkpoint.h"
#include "support/checkpoint_util.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

using json = nlohmann::json;

int Cli(const std::string& args, std::string* out) {
  return testing::RunCommand(testing::CliPath() + " ckpt " + args + " 2>/dev/null", out);
}

TEST(CkptCommandTest, LsVerifyPushPull) {
  testing::TempDir local, remote, other;
  {
    auto w = CheckpointWriter::Open(local.path());
    ASSERT_TRUE(w.ok());
    for (int step = 10; step <= 30; step += 10)
      ASSERT_TRUE((*w)->SaveFiles(step, testing::StepFiles(step), R"({"epoch":1})").ok());
  }
  std::string out;
  ASSERT_EQ(Cli("ls --json " + local.path(), &out), 0) << out;
  json ls = json::parse(out);
  ASSERT_EQ(ls.size(), 3u);
  EXPECT_EQ(ls[2]["name"], "ckpt-000030");
  EXPECT_EQ(ls[2]["latest"], true);
  EXPECT_EQ(ls[0]["latest"], false);
  EXPECT_EQ(ls[0]["metadata"]["epoch"], 1);
  EXPECT_EQ(ls[0]["files"].size(), 3u);

  ASSERT_EQ(Cli("verify " + local.path(), &out), 0) << out;
  EXPECT_NE(out.find("ckpt-000020: ok"), std::string::npos) << out;

  ASSERT_EQ(Cli("push --json " + local.path() + " " + remote.path(), &out), 0) << out;
  json push = json::parse(out);
  ASSERT_EQ(push.size(), 3u);
  EXPECT_EQ(push[0]["state"], "done");
  ASSERT_EQ(Cli("ls --remote --json " + remote.path(), &out), 0) << out;
  EXPECT_EQ(json::parse(out).size(), 3u);
  ASSERT_EQ(Cli("verify --remote " + remote.path(), &out), 0) << out;

  // Corrupt a local file: verify fails naming it.
  std::string f = local.Join("ckpt-000030/optim.bin");
  std::string data = testing::ReadFile(f);
  data += "x";
  testing::WriteFile(f, data);
  EXPECT_EQ(Cli("verify --json " + local.path(), &out), 1);
  json v = json::parse(out);
  EXPECT_EQ(v[2]["ok"], false);
  EXPECT_NE(v[2]["error"].get<std::string>().find("optim.bin"), std::string::npos);

  ASSERT_EQ(Cli("pull --json " + remote.path() + " " + other.Join("ckpts"), &out), 0) << out;
  json pull = json::parse(out);
  EXPECT_EQ(pull["name"], "ckpt-000030");
  EXPECT_EQ(pull["from_remote"], true);
  auto m = ReadCheckpointManifest(*LocalSource(), other.Join("ckpts/ckpt-000030"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(testing::CheckStepFiles(*LocalSource(), other.Join("ckpts/ckpt-000030"), *m), "");

  EXPECT_NE(Cli("ls " + local.Join("missing"), &out), 0);
}

}  // namespace
}  // namespace shardstream
