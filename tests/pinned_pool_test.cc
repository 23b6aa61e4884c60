#include "shardstream/pinned_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "support/alloc_counter.h"

namespace shardstream {
namespace {

BufferPoolOptions Small(size_t slots) {
  BufferPoolOptions o;
  o.slot_bytes = 1 << 16;
  o.slots = slots;
  o.allocator = PageableAllocator();
  return o;
}

TEST(BufferPoolTest, ReusesSlotsWithoutNewAllocations) {
  auto pool = *BufferPool::Create(Small(2));
  for (int i = 0; i < 100; ++i) {
    auto a = pool->Acquire();
    auto b = pool->Acquire();
    ASSERT_TRUE(a.ok() && b.ok());
    std::memset((*a)->data(), i, (*a)->capacity());
    EXPECT_NE((*a)->data(), (*b)->data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>((*a)->data()) % 4096, 0u);
  }
  BufferPoolStats s = pool->stats();
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.acquires, 200u);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(pool->kind(), HostMemoryKind::kPageable);
}

TEST(BufferPoolTest, PreallocateAllocatesEverySlotInCreate) {
  auto o = Small(3);
  o.preallocate = true;
  auto pool = *BufferPool::Create(o);
  EXPECT_EQ(pool->stats().allocations, 3u);  // before any Acquire
  auto a = pool->Acquire();
  auto b = pool->Acquire();
  auto c = pool->Acquire();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE((*a)->data(), (*c)->data());
  EXPECT_EQ(pool->stats().allocations, 3u);  // nothing more from the allocator
  auto d = pool->Acquire(std::chrono::milliseconds(10));
  EXPECT_EQ(d.status().code(), StatusCode::kUnavailable);  // all three are held
}

TEST(BufferPoolTest, ResumeAfterCancelServesTheSameSlots) {
  // The Loader keeps one pool for all epochs: each epoch's run cancels it
  // when it stops, and the next run resumes it.
  auto o = Small(2);
  o.preallocate = true;
  auto pool = *BufferPool::Create(o);
  void* first;
  {
    auto a = pool->Acquire();
    ASSERT_TRUE(a.ok());
    first = (*a)->data();
  }
  pool->Cancel();
  EXPECT_EQ(pool->Acquire().status().code(), StatusCode::kCancelled);
  pool->Resume();
  auto a = pool->Acquire();
  auto b = pool->Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE((*a)->data() == first || (*b)->data() == first);
  EXPECT_EQ(pool->stats().allocations, 2u);  // nothing allocated again
  EXPECT_EQ(pool->slots(), 2u);
}

TEST(BufferPoolTest, AcquireBlocksUntilReturnAndTimesOut) {
  auto pool = *BufferPool::Create(Small(1));
  auto held = *pool->Acquire();
  auto r = pool->Acquire(std::chrono::milliseconds(20));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    held.reset();
  });
  auto again = pool->Acquire(std::chrono::milliseconds(5000));
  releaser.join();
  ASSERT_TRUE(again.ok());
  EXPECT_GE(pool->stats().waits, 1u);
}

TEST(BufferPoolTest, CancelWakesWaiters) {
  auto pool = *BufferPool::Create(Small(1));
  auto held = *pool->Acquire();
  std::atomic<bool> got_cancelled{false};
  std::thread waiter([&] {
    auto r = pool->Acquire();
    got_cancelled = !r.ok() && r.status().code() == StatusCode::kCancelled;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  pool->Cancel();
  waiter.join();
  EXPECT_TRUE(got_cancelled);
}

TEST(BufferPoolTest, BufferOutlivesPool) {
  std::shared_ptr<HostBuffer> keep;
  {
    auto pool = *BufferPool::Create(Small(1));
    keep = *pool->Acquire();
  }
  std::memset(keep->data(), 7, keep->capacity());  // ASan would flag a freed slot
  EXPECT_EQ(static_cast<unsigned char*>(keep->data())[100], 7);
}

TEST(HostAllocatorTest, NoCudaOnThisMachineMeansPageableDefault) {
  // With SHARDSTREAM_PINNED=0 the pinned allocator is never used.
  if (CudaPinnedAllocator() == nullptr) {
    EXPECT_EQ(DefaultHostAllocator()->kind(), HostMemoryKind::kPageable);
  } else {
    EXPECT_EQ(DefaultHostAllocator()->kind(), HostMemoryKind::kCudaPinned);
  }
  EXPECT_STREQ(HostMemoryKindName(HostMemoryKind::kCudaPinned), "cuda_pinned");
}

TEST(BufferPoolTest, SteadyStateAcquireReleaseAllocatesNothing) {
  auto pool = *BufferPool::Create(Small(3));
  {  // warm up: slots and control blocks are allocated once
    auto a = pool->Acquire();
    auto b = pool->Acquire();
    auto c = pool->Acquire();
  }
  uint64_t allocations;
  {
    testing::AllocationCounter counter;
    for (int i = 0; i < 1000; ++i) {
      auto a = pool->Acquire();
      auto b = pool->Acquire();
      ASSERT_TRUE(a.ok() && b.ok());
      std::shared_ptr<HostBuffer> copy = *a;  // a second holder, as Python would be
      a->reset();
    }
    allocations = counter.count();
  }
  if (testing::AllocationCounter::available())
    EXPECT_EQ(allocations, 0u) << testing::AllocationCounter::Where();
  EXPECT_EQ(pool->stats().allocations, 3u);
}

TEST(BufferPoolTest, BufferOutlivesPoolAcrossThreads) {
  std::vector<std::shared_ptr<HostBuffer>> held;
  {
    auto pool = *BufferPool::Create(Small(4));
    for (int i = 0; i < 4; ++i) held.push_back(*pool->Acquire());
  }
  std::vector<std::thread> threads;
  for (auto& h : held) threads.emplace_back([b = std::move(h)]() mutable { b.reset(); });
  for (auto& t : threads) t.join();
}

TEST(BufferPoolTest, RejectsEmptyConfig) {
  EXPECT_EQ(BufferPool::Create(Small(0)).status().code(), StatusCode::kConfig);
}

}  // namespace
}  // namespace shardstream
