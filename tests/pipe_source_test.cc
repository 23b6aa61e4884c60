// pipe:COMMAND sources: output streamed, exit status checked, children
// reaped and stopped on early close.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>

#include "shardstream/source.h"
#include "support/read_within.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

Result<std::string> ReadAll(InputStream& in) {
  std::string out, buf(4096, '\0');
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.Read(buf.size(), buf.data()));
    if (got == 0) return out;
    out.append(buf.data(), got);
  }
}

TEST(PipeSourceTest, StreamsCommandOutput) {
  testing::TempDir dir;
  std::string data(300000, 'x');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  testing::WriteFile(dir.Join("shard.tar"), data);
  auto in = DefaultSource()->OpenInputStream("pipe:cat " + dir.Join("shard.tar"), 0);
  ASSERT_TRUE(in.ok()) << in.status();
  auto all = ReadAll(**in);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(*all == data);
  EXPECT_EQ((*in)->position(), data.size());

  auto tail = DefaultSource()->OpenInputStream("pipe:cat " + dir.Join("shard.tar"), 1000);
  ASSERT_TRUE(tail.ok());
  EXPECT_TRUE(*ReadAll(**tail) == data.substr(1000));
}

TEST(PipeSourceTest, NonZeroExitIsAnErrorNamingTheStatus) {
  auto in = DefaultSource()->OpenInputStream("pipe:printf abc; exit 3", 0);
  ASSERT_TRUE(in.ok());
  std::string buf(10, '\0');
  auto got = (*in)->Read(10, buf.data());
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(buf.substr(0, *got), "abc");
  auto end = (*in)->Read(10, buf.data());
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.status().code(), StatusCode::kIo);
  EXPECT_NE(end.status().message().find("exited with status 3"), std::string::npos)
      << end.status();
  EXPECT_NE(end.status().message().find("printf abc"), std::string::npos);
  EXPECT_EQ(end.status().offset(), 3);

  auto missing = DefaultSource()->OpenInputStream("pipe:no-such-command-xyz", 0);
  ASSERT_TRUE(missing.ok());
  auto r = ReadAll(**missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("status 127"), std::string::npos) << r.status();
}

TEST(PipeSourceTest, ReadWithinGivesUpOnAPauseAndLeavesTheEndToRead) {
  auto in = DefaultSource()->OpenInputStream("pipe:printf abc; sleep 2; printf def; exit 3", 0);
  ASSERT_TRUE(in.ok()) << in.status();
  double gave_up_after = 0;
  auto head = testing::ReadWithinUntilPause(**in, std::chrono::milliseconds(200), &gave_up_after);
  ASSERT_TRUE(head.ok()) << head.status();
  std::string got = *head;
  EXPECT_EQ(got, "abc");  // what came before the pause
  EXPECT_GE(gave_up_after, 0.15);
  EXPECT_LT(gave_up_after, 1.5);  // not the 2 s pause
  std::string buf(100, '\0');
  auto n = (*in)->Read(buf.size(), buf.data());
  ASSERT_TRUE(n.ok()) << n.status();
  got.append(buf.data(), *n);
  // The end and the exit status still come from Read.
  auto tail = testing::ReadWithinUntilPause(**in, std::chrono::milliseconds(100), &gave_up_after);
  ASSERT_TRUE(tail.ok()) << tail.status();
  got += *tail;
  EXPECT_EQ(got, "abcdef");
  auto end = (*in)->Read(buf.size(), buf.data());
  ASSERT_FALSE(end.ok());
  EXPECT_NE(end.status().message().find("exited with status 3"), std::string::npos)
      << end.status();
  EXPECT_EQ((*in)->position(), 6u);
}

TEST(PipeSourceTest, EarlyCloseKillsTheCommandAndLeavesNoZombie) {
  testing::TempDir dir;
  std::string pidfile = dir.Join("pid");
  // A pipeline that would run for a minute: the shell and its children.
  auto in = DefaultSource()->OpenInputStream(
      "pipe:echo $$ > " + pidfile + "; yes | head -c 100000000; sleep 60", 0);
  ASSERT_TRUE(in.ok());
  std::string buf(1000, '\0');
  ASSERT_TRUE((*in)->Read(1000, buf.data()).ok());
  pid_t pid = std::stoi(testing::ReadFile(pidfile));
  auto start = std::chrono::steady_clock::now();
  in->reset();
  double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 1.5);
  // Reaped: the pid no longer names a process (not even a zombie) of ours.
  EXPECT_EQ(::waitpid(pid, nullptr, WNOHANG), -1);
  EXPECT_NE(::kill(pid, 0), 0);
}

TEST(PipeSourceTest, StatAndRandomAccessAreRefused) {
  EXPECT_EQ(DefaultSource()->Stat("pipe:cat x").status().code(), StatusCode::kConfig);
  EXPECT_EQ(DefaultSource()->OpenRandomAccess("pipe:cat x").status().code(),
            StatusCode::kConfig);
}

TEST(PipeSourceTest, SecretsInTheCommandAreRedacted) {
  auto in = DefaultSource()->OpenInputStream(
      "pipe:exit 1; curl -s http://u:hunter2@host/x?X-Amz-Signature=abc123", 0);
  ASSERT_TRUE(in.ok());
  auto r = ReadAll(**in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().ToString().find("hunter2"), std::string::npos) << r.status();
  EXPECT_EQ(r.status().ToString().find("abc123"), std::string::npos) << r.status();
  EXPECT_EQ((*in)->url().find("hunter2"), std::string::npos);
}

}  // namespace
}  // namespace shardstream
