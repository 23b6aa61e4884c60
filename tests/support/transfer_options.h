// Changes the process's transfer options (shardstream/transfer.h) for one
// scope and restores them after, also when an assertion returns early.
#ifndef SHARDSTREAM_TESTS_SUPPORT_TRANSFER_OPTIONS_H_
#define SHARDSTREAM_TESTS_SUPPORT_TRANSFER_OPTIONS_H_

#include <functional>

#include "shardstream/transfer.h"

namespace shardstream::testing {

class ScopedTransferOptions {
 public:
  explicit ScopedTransferOptions(const std::function<void(TransferOptions&)>& change)
      : saved_(GetTransferOptions()) {
    Change(change);
  }
  ~ScopedTransferOptions() { SetTransferOptions(saved_); }
  ScopedTransferOptions(const ScopedTransferOptions&) = delete;
  ScopedTransferOptions& operator=(const ScopedTransferOptions&) = delete;
  // Changes them further (restored all the same).
  void Change(const std::function<void(TransferOptions&)>& change) {
    TransferOptions o = GetTransferOptions();
    change(o);
    SetTransferOptions(o);
  }

 private:
  TransferOptions saved_;
};

}  // namespace shardstream::testing

#endif  // SHARDSTREAM_TESTS_SUPPORT_TRANSFER_OPTIONS_H_
