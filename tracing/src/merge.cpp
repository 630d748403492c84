#include "mtia/trace/merge.h"

#include <nlohmann/json.hpp>

namespace mtia::trace {

isa::Result<std::string> merge_traces(const std::vector<std::string>& traces) {
  if (traces.empty()) {
    return isa::reject(isa::ErrorCode::kInvalidArgument, "merge_traces: no traces to merge");
  }
  nlohmann::json out = {{"traceEvents", nlohmann::json::array()},
                        {"otherData", {{"devices", nlohmann::json::array()}}}};
  auto& events = out["traceEvents"];
  for (size_t k = 0; k < traces.size(); ++k) {
    auto bad = [&](const std::string& why) {
      return isa::reject(isa::ErrorCode::kInvalidArgument,
                         "trace " + std::to_string(k) + " cannot be merged: " + why);
    };
    nlohmann::json t = nlohmann::json::parse(traces[k], nullptr, /*allow_exceptions=*/false);
    if (t.is_discarded()) return bad("it is not JSON");
    if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array()) {
      return bad("it has no traceEvents array (is it a trace.json written by a device?)");
    }
    const uint64_t base = 100 * (k + 1);
    const std::string prefix = "mtia:" + std::to_string(k) + " ";
    for (nlohmann::json& e : t["traceEvents"]) {
      if (!e.is_object()) return bad("an event is not an object");
      if (e.contains("pid")) {
        if (!e["pid"].is_number_unsigned()) return bad("an event's pid is not a number");
        const uint64_t pid = base + e["pid"].get<uint64_t>();
        e["pid"] = pid;
        if (e.value("ph", "") == "M" && e.value("name", "") == "process_sort_index") {
          e["args"]["sort_index"] = pid;
        }
        if (e.value("ph", "") == "M" && e.value("name", "") == "process_name" &&
            e.contains("args") && e["args"].is_object() && e["args"].contains("name") &&
            e["args"]["name"].is_string()) {
          e["args"]["name"] = prefix + e["args"]["name"].get<std::string>();
        }
      }
      events.push_back(std::move(e));
    }
    out["otherData"]["devices"].push_back(t.value("otherData", nlohmann::json::object()));
  }
  return out.dump();
}

}  // namespace mtia::trace
