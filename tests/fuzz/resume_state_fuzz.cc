// libFuzzer target for the resume state decoders and for planning from a
// decoded state: never a crash, only kCorrupt/kConfig errors. Seeds:
// tests/data/fuzz/resume_state/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shardstream/resume_state.h"
#include "shardstream/shard_split.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  for (auto state : {shardstream::ResumeState::FromBytes(in), shardstream::ResumeState::FromJson(in)}) {
    if (!state.ok()) continue;
    // Round trip, then plan from it over a small manifest.
    auto back = shardstream::ResumeState::FromBytes(state->ToBytes());
    if (!back.ok() || back->delivered != state->delivered) __builtin_trap();
    if (state->positions() > 100000) continue;
    std::vector<int64_t> counts = {7, 0, 13, 5, 40, 1};
    shardstream::PlanOptions o;
    o.seed = state->seed;
    o.epoch = state->epoch < 0 ? 0 : state->epoch;
    o.world_size = 3;
    auto plan = shardstream::EpochPlan::Create(counts, state->fingerprint, o, &*state);
    if (plan.ok()) (void)plan->Consumer(2, 0);
  }
  return 0;
}
