// Reading a stream with InputStream::ReadWithin, as the cache's download does.
#ifndef SHARDSTREAM_TESTS_SUPPORT_READ_WITHIN_H_
#define SHARDSTREAM_TESTS_SUPPORT_READ_WITHIN_H_

#include <chrono>
#include <string>

#include "shardstream/source.h"

namespace shardstream::testing {

// ReadWithin(wait) until it answers 0: the bytes read, and in *gave_up_after
// the seconds that last call took.
inline Result<std::string> ReadWithinUntilPause(InputStream& in, std::chrono::milliseconds wait,
                                                double* gave_up_after) {
  std::string out, buf(4096, '\0');
  while (true) {
    const auto start = std::chrono::steady_clock::now();
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in.ReadWithin(buf.size(), buf.data(), wait));
    if (got == 0) {
      *gave_up_after =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return out;
    }
    out.append(buf.data(), got);
  }
}

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_READ_WITHIN_H_
