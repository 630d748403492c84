#include "mtia/trace/level.h"

namespace mtia::trace {

const char* trace_level_name(TraceLevel level) {
  switch (level) {
    case TraceLevel::kOff:
      return "off";
    case TraceLevel::kKernels:
      return "kernels";
    case TraceLevel::kUnits:
      return "units";
  }
  return "?";
}

std::optional<TraceLevel> parse_trace_level(std::string_view text) {
  for (TraceLevel l : {TraceLevel::kOff, TraceLevel::kKernels, TraceLevel::kUnits}) {
    if (text == trace_level_name(l)) return l;
  }
  return std::nullopt;
}

}  // namespace mtia::trace
