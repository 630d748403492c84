// A value or an error with a reason: how every decoder and validator in isa/ answers.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "mtia/isa/error_code.h"

namespace mtia::isa {

// Why something was rejected: a machine-readable code and a sentence for people.
struct Rejection {
  ErrorCode code = ErrorCode::kNone;
  std::string reason;
};

template <typename T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like Expected<T>
  Result(Rejection r) : v_(std::move(r)) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  const Rejection& error() const { return std::get<Rejection>(v_); }

 private:
  std::variant<T, Rejection> v_;
};

inline Rejection reject(ErrorCode code, std::string reason) {
  return {code, std::move(reason)};
}

}  // namespace mtia::isa
