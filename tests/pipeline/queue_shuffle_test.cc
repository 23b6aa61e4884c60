#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <thread>
#include <vector>

#include "pipeline/shuffle_buffer.h"
#include "shardstream/prefetch_queue.h"

namespace shardstream {
namespace {

TEST(PrefetchQueueTest, ErrorsArriveInOrderAndCancelWakesEveryone) {
  PrefetchQueue<int> q(2);
  std::thread producer([&] {
    EXPECT_TRUE(q.Push(1).ok());
    EXPECT_TRUE(q.Push(2).ok());
    EXPECT_TRUE(q.PushError(Status::Corrupt("bad shard")).ok());  // blocks until room
    EXPECT_TRUE(q.PushEnd().ok());
  });
  EXPECT_EQ(*q.Pop(), 1);
  EXPECT_EQ(*q.Pop(), 2);
  EXPECT_EQ(q.Pop().status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(*q.Pop(), 0);  // the end marker
  producer.join();
  EXPECT_EQ(q.Pop(std::chrono::milliseconds(10)).status().code(), StatusCode::kUnavailable);

  PrefetchQueue<int> full(1);
  ASSERT_TRUE(full.Push(7).ok());
  Status blocked_push;
  std::thread stuck([&] { blocked_push = full.Push(8); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  full.Cancel();
  stuck.join();
  EXPECT_EQ(blocked_push.code(), StatusCode::kCancelled);
  EXPECT_EQ(full.Pop().status().code(), StatusCode::kCancelled);
}

std::vector<int> Shuffled(size_t capacity, size_t initial, uint64_t seed, int n) {
  internal::ShuffleBuffer<int> b(capacity, initial, seed, 1);
  std::vector<int> out;
  int o = -1;
  for (int i = 0; i < n; ++i) {
    int in = i;
    if (b.Put(&in, &o)) out.push_back(o);
  }
  while (b.Drain(&o)) out.push_back(o);
  return out;
}

TEST(ShuffleBufferTest, SeededPermutationWithInitialFill) {
  auto a = Shuffled(100, 10, 5, 1000);
  EXPECT_EQ(a, Shuffled(100, 10, 5, 1000));
  EXPECT_NE(a, Shuffled(100, 10, 6, 1000));
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int> want(1000);
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(sorted, want);
  // Nothing leaves before `initial` are in; the buffer never exceeds capacity.
  internal::ShuffleBuffer<int> b(100, 10, 5, 1);
  int o;
  for (int i = 0; i < 9; ++i) {
    int in = i;
    EXPECT_FALSE(b.Put(&in, &o));
  }
  for (int i = 9; i < 1000; ++i) {
    int in = i;
    b.Put(&in, &o);
    EXPECT_LE(b.size(), 100u);
  }
  EXPECT_GE(b.size(), 99u);
  // Capacity 1 passes straight through.
  auto pass = Shuffled(1, 1, 5, 50);
  std::vector<int> in_order(50);
  std::iota(in_order.begin(), in_order.end(), 0);
  EXPECT_EQ(pass, in_order);
}

}  // namespace
}  // namespace shardstream
