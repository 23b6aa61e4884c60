// Counts calls of the global operator new, to check that a hot loop
// allocates nothing. The test binary replaces operator new (alloc_counter.cc);
// counting is off unless an AllocationCounter is alive.
#ifndef SHARDSTREAM_TESTS_SUPPORT_ALLOC_COUNTER_H_
#define SHARDSTREAM_TESTS_SUPPORT_ALLOC_COUNTER_H_

#include <cstdint>
#include <string>

namespace shardstream::testing {

// Counts every operator new in every thread between construction and
// count(). Only one may be alive at a time.
class AllocationCounter {
 public:
  AllocationCounter();
  ~AllocationCounter();
  uint64_t count() const;
  // The call stacks of the first few allocations the last counter counted,
  // symbolized, so a failing expectation can say where they came from. Call
  // it once that counter is gone (it allocates).
  static std::string Where();
  // False in sanitizer builds, where operator new is the sanitizer's and
  // nothing is counted.
  static bool available();
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_ALLOC_COUNTER_H_
