// The one error style below the public API: a call that can fail returns Result<T> (a value or
// a Failure) or Status (Result<void>: nothing or a Failure). Every layer from isa/ up through
// firmware/, sim/, driver/ and the backends answers this way; host_api/ turns a Failure into
// an mtia::Error exception at the public edge (host_api/src/raise.h), and nothing below it
// throws as a protocol. Assertions remain for our own bugs.
#pragma once

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "mtia/isa/error_code.h"

namespace mtia::isa {

// Why something failed: a machine-readable code, a sentence for people that says what was
// wrong and what to do, and the code's details (the meaning of arg0/arg1 is the code's: see
// error_code.h, e.g. the faulting address and length of an address fault).
struct Failure {
  ErrorCode code = ErrorCode::kNone;
  std::string reason;
  uint64_t arg0 = 0;
  uint64_t arg1 = 0;
  // A kernel that exited with a non-zero status (kKernelFault): that status.
  std::optional<int64_t> exit_status = std::nullopt;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design, like Expected<T>
  Result(Failure f) : v_(std::move(f)) {}    // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const Failure& error() const { return std::get<Failure>(v_); }

 private:
  std::variant<T, Failure> v_;
};

// Success, or why not.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Failure f) : f_(std::move(f)) {}  // NOLINT: implicit, as above

  bool ok() const { return !f_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Failure& error() const {
    assert(f_.has_value());
    return *f_;
  }

 private:
  std::optional<Failure> f_;
};

using Status = Result<void>;

// The code of an outcome: kNone for success (for records and traces that store a code).
inline ErrorCode error_code(const Status& s) {
  return s.ok() ? ErrorCode::kNone : s.error().code;
}

inline Failure reject(ErrorCode code, std::string reason, uint64_t arg0 = 0, uint64_t arg1 = 0) {
  return {code, std::move(reason), arg0, arg1, std::nullopt};
}

// The same failure with `context` put before its reason ("loading x: " + reason).
inline Failure with_context(Failure f, const std::string& context) {
  f.reason = context + f.reason;
  return f;
}

}  // namespace mtia::isa

// Early returns for code that calls several fallible steps in a row, as IREE_RETURN_IF_ERROR
// does: the first failure is returned from the calling function (a Result or Status).
#define MTIA_RETURN_IF_ERROR(expr)                                  \
  do {                                                              \
    if (::mtia::isa::Status mtia_status_ = (expr); !mtia_status_) { \
      return mtia_status_.error();                                  \
    }                                                               \
  } while (false)

#define MTIA_RESULT_CONCAT_INNER(a, b) a##b
#define MTIA_RESULT_CONCAT(a, b) MTIA_RESULT_CONCAT_INNER(a, b)
// `lhs` (a declaration or an lvalue) takes the value of `expr` (a Result), or the failure is
// returned from the calling function.
#define MTIA_ASSIGN_OR_RETURN(lhs, expr)                       \
  auto MTIA_RESULT_CONCAT(mtia_result_, __LINE__) = (expr);    \
  if (!MTIA_RESULT_CONCAT(mtia_result_, __LINE__)) {           \
    return MTIA_RESULT_CONCAT(mtia_result_, __LINE__).error(); \
  }                                                            \
  lhs = std::move(MTIA_RESULT_CONCAT(mtia_result_, __LINE__)).value()
