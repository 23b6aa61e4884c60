// The CUDA pinned-memory path, run against the stand-in libcudart
// (fake_cudart.c) because this machine has no GPU: the runtime is found by
// dlopen, every batch slot comes from cudaHostAlloc (portable) and goes back
// through cudaFreeHost, the memory kind is reported, and a failing
// cudaHostAlloc surfaces at next() with the runtime's message. Each test
// suite runs in its own process with its own environment (CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <thread>

#include "shardstream/loader.h"
#include "shardstream/pinned_pool.h"
#include "support/loader_fixture.h"
#include "support/test_util.h"

namespace shardstream {
namespace {

// The stand-in's counters, once the library has loaded it.
int Counter(const char* name) {
  void* lib = ::dlopen("libcudart.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return -1;
  auto* v = static_cast<int*>(::dlsym(lib, name));
  int n = v ? __atomic_load_n(v, __ATOMIC_RELAXED) : -1;
  ::dlclose(lib);
  return n;
}

TEST(WithDevice, SlotsComeFromCudaHostAllocAndGoBack) {
  ASSERT_NE(CudaPinnedAllocator(), nullptr);
  EXPECT_EQ(DefaultHostAllocator()->kind(), HostMemoryKind::kCudaPinned);
  const int allocs = Counter("fake_cudart_allocs"), frees = Counter("fake_cudart_frees");
  ASSERT_GE(allocs, 0);
  {
    BufferPoolOptions o;
    o.slot_bytes = 1 << 20;
    o.slots = 3;
    o.preallocate = true;
    auto pool = BufferPool::Create(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ((*pool)->kind(), HostMemoryKind::kCudaPinned);
    EXPECT_EQ(Counter("fake_cudart_allocs"), allocs + 3);
    EXPECT_EQ(Counter("fake_cudart_last_flags"), 1);  // cudaHostAllocPortable
    auto slot = (*pool)->Acquire();
    ASSERT_TRUE(slot.ok());
    EXPECT_EQ((*slot)->kind(), HostMemoryKind::kCudaPinned);
    EXPECT_EQ(Counter("fake_cudart_frees"), frees);
  }
  EXPECT_EQ(Counter("fake_cudart_frees"), frees + 3);
}

TEST(WithDevice, LoaderBatchesLiveInPinnedSlots) {
  testing::TempDir dir;
  auto d = testing::WriteDataset(dir.path(), testing::DatasetSpec{});
  const int allocs = Counter("fake_cudart_allocs"), frees = Counter("fake_cudart_frees");
  {
    LoaderOptions o = testing::FieldOptions(d.manifest);
    o.allocator = nullptr;  // the default: pinned when a CUDA runtime and device are present
    auto l = Loader::Create(o);
    ASSERT_TRUE(l.ok()) << l.status();
    for (int epoch = 0; epoch < 3; ++epoch) {
      ASSERT_TRUE((*l)->set_epoch(epoch).ok());
      auto ids = testing::DrainIds(l->get());
      EXPECT_EQ(static_cast<int64_t>(ids.size()), d.samples);
    }
    LoaderStats s = (*l)->stats();
    EXPECT_EQ(s.memory_kind, HostMemoryKind::kCudaPinned);
    // Pinned once for all three epochs.
    EXPECT_EQ(Counter("fake_cudart_allocs") - allocs, static_cast<int>(s.slots));
  }
  EXPECT_EQ(Counter("fake_cudart_frees") - frees, Counter("fake_cudart_allocs") - allocs);
}

// The stand-in driver's switch for this thread's context.
void MakeContextCurrent(bool on) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "the stand-in driver is not loaded";
  auto set = reinterpret_cast<void (*)(int)>(::dlsym(lib, "fake_cuda_make_current"));
  ASSERT_NE(set, nullptr);
  set(on ? 1 : 0);
  ::dlclose(lib);
}

// A slot dropped right after an asynchronous copy was queued from it is
// lent again only once the copy's event has completed; a slot dropped in a
// thread that never used CUDA records nothing (no context is made there).
TEST(WithDevice, ASlotIsReusedOnlyAfterTheCopyFromItIsDone) {
  ASSERT_NE(CudaPinnedAllocator(), nullptr);
  const int events = Counter("fake_cudart_events_live");
  {
    BufferPoolOptions o;
    o.slot_bytes = 1 << 16;
    o.slots = 1;
    auto pool = BufferPool::Create(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    MakeContextCurrent(true);
    const int records = Counter("fake_cudart_event_records");
    const int syncs = Counter("fake_cudart_event_syncs");
    {
      auto slot = (*pool)->Acquire();
      ASSERT_TRUE(slot.ok());
    }  // dropped by a thread with a context: an event marks the queued copies
    EXPECT_EQ(Counter("fake_cudart_event_records"), records + 1);
    EXPECT_EQ(Counter("fake_cudart_event_syncs"), syncs);
    std::shared_ptr<HostBuffer> again;
    std::thread reader([&] {
      auto slot = (*pool)->Acquire();  // the loader's thread: waits on the event
      if (slot.ok()) again = *slot;
    });
    reader.join();
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(Counter("fake_cudart_event_syncs"), syncs + 1);
    EXPECT_EQ(Counter("fake_cudart_set_device"), 0);  // the event's device
    EXPECT_EQ((*pool)->stats().fence_waits, 1u);

    std::thread other([&] { again.reset(); });  // no context in that thread
    other.join();
    EXPECT_EQ(Counter("fake_cudart_event_records"), records + 1);
    auto third = (*pool)->Acquire();
    ASSERT_TRUE(third.ok());
    EXPECT_EQ(Counter("fake_cudart_event_syncs"), syncs + 1);
    EXPECT_EQ((*pool)->stats().fence_waits, 1u);
    MakeContextCurrent(false);
  }
  EXPECT_EQ(Counter("fake_cudart_events_live"), events);  // destroyed with the pool
}

TEST(WithDevice, LoaderCountsCopyWaits) {
  testing::TempDir dir;
  auto d = testing::WriteDataset(dir.path(), testing::DatasetSpec{});
  LoaderOptions o = testing::FieldOptions(d.manifest);
  o.allocator = nullptr;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  MakeContextCurrent(true);
  const int syncs = Counter("fake_cudart_event_syncs");
  int64_t batches = 0;
  for (;;) {
    auto b = (*l)->next();
    ASSERT_TRUE(b.ok()) << b.status();
    if (b->empty()) break;
    ++batches;
  }  // each batch dropped here, by a thread with a context
  MakeContextCurrent(false);
  const LoaderStats s = (*l)->stats();
  const int waited = Counter("fake_cudart_event_syncs") - syncs;
  // More batches than slots: later ones reused slots dropped with an event.
  ASSERT_GT(batches, static_cast<int64_t>(s.slots));
  EXPECT_GT(waited, 0);
  EXPECT_LE(s.copy_waits, static_cast<uint64_t>(waited));
  EXPECT_GT(s.copy_waits, 0u);
}

TEST(NoDevice, RuntimeWithoutADeviceMeansPageable) {
  EXPECT_EQ(CudaPinnedAllocator(), nullptr);
  EXPECT_EQ(DefaultHostAllocator()->kind(), HostMemoryKind::kPageable);
  EXPECT_EQ(Counter("fake_cudart_allocs"), 0);
}

TEST(Disabled, ShardstreamPinnedZeroNeverLoadsTheRuntime) {
  EXPECT_EQ(CudaPinnedAllocator(), nullptr);
  EXPECT_EQ(DefaultHostAllocator()->kind(), HostMemoryKind::kPageable);
  EXPECT_EQ(Counter("fake_cudart_allocs"), -1);  // not even opened
}

TEST(AllocFails, NextReportsTheRuntimesError) {
  testing::TempDir dir;
  auto d = testing::WriteDataset(dir.path(), testing::DatasetSpec{});
  LoaderOptions o = testing::FieldOptions(d.manifest);
  o.allocator = nullptr;
  auto l = Loader::Create(o);
  ASSERT_TRUE(l.ok()) << l.status();
  auto b = (*l)->next();
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("cudaHostAlloc"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("out of memory"), std::string::npos) << b.status();
}

}  // namespace
}  // namespace shardstream
