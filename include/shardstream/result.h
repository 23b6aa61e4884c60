// Result<T>: either a value or an error Status (Arrow's Result, abseil's
// StatusOr). Factories and reads return it; ASSIGN_OR_RETURN unwraps it.
//
// REQUIRES: value() only on ok() results (checked by assert); status() is
// always valid. Thread-safety: as for any value type.
#ifndef SHARDSTREAM_RESULT_H_
#define SHARDSTREAM_RESULT_H_

#include <cassert>
#include <optional>
#include <utility>

#include "shardstream/status.h"

namespace shardstream {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "Result constructed from an OK Status");
    if (status_.ok()) status_ = Status(StatusCode::kConfig, "Result from OK status");
  }
  template <typename U, typename = std::enable_if_t<std::is_convertible_v<U&&, T> &&
                                                    !std::is_same_v<std::decay_t<U>, Status>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { assert(ok()); return *value_; }
  const T& value() const& { assert(ok()); return *value_; }
  T&& value() && { assert(ok()); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T value_or(T other) const& { return ok() ? *value_ : std::move(other); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace shardstream

#define SHARDSTREAM_CONCAT_INNER_(a, b) a##b
#define SHARDSTREAM_CONCAT_(a, b) SHARDSTREAM_CONCAT_INNER_(a, b)

// `lhs = value of rexpr`, or return its error from the enclosing function.
// lhs may declare a variable: SHARDSTREAM_ASSIGN_OR_RETURN(auto f, Open(u));
#define SHARDSTREAM_ASSIGN_OR_RETURN(lhs, rexpr) \
  SHARDSTREAM_ASSIGN_OR_RETURN_IMPL_(SHARDSTREAM_CONCAT_(_ss_result_, __LINE__), lhs, rexpr)
#define SHARDSTREAM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                        \
  if (!tmp.ok()) return tmp.status();                        \
  lhs = std::move(tmp).value()

#endif  // SHARDSTREAM_RESULT_H_
