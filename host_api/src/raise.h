// The public edge of the error style: below host_api every failure is an isa::Failure returned
// in a Result or Status (isa/result.h); here it becomes the one exception of the API,
// mtia::Error, with the ErrorKind its code maps to.
#pragma once

#include <string>
#include <utility>

#include "mtia/error.h"
#include "mtia/isa/result.h"

namespace mtia {

// The kind of error a failure's code is for the API's user.
ErrorKind error_kind(isa::ErrorCode code);

// Throws mtia::Error for `failure`, its reason between `context` (e.g. "malloc(64 bytes): ")
// and `advice` (e.g. "; free unused allocations").
[[noreturn]] void raise(const isa::Failure& failure, const std::string& context = {},
                        const std::string& advice = {});

// The value of `result`, or its failure raised as above.
template <typename T>
T value_or_raise(isa::Result<T> result, const std::string& context = {}) {
  if (!result) raise(result.error(), context);
  return std::move(result).value();
}

inline void check(const isa::Status& status, const std::string& context = {}) {
  if (!status) raise(status.error(), context);
}

}  // namespace mtia
