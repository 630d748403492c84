#include "mtia/isa/sanitize.h"

#include <optional>
#include <string>
#include <utility>

#include "mtia/settings/settings.h"

namespace mtia::isa {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

Result<uint64_t> parse_sanitize_checks(std::string_view list, std::string_view source) {
  const std::string head = std::string(source) + "=" + std::string(list) + ": ";
  if (trim(list).empty() || trim(list) == "off") return uint64_t{0};
  uint64_t checks = 0;
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view name = trim(list.substr(0, comma));
    if (name == "memcheck") {
      checks |= kSanitizeMemcheck;
    } else if (name == "racecheck") {
      checks |= kSanitizeRacecheck;
    } else if (name == "initcheck") {
      checks |= kSanitizeInitcheck;
    } else if (name == "synccheck") {
      checks |= kSanitizeSynccheck;
    } else {
      return reject(ErrorCode::kInvalidArgument,
                    head + "'" + std::string(name) +
                        "' is not a sanitizer check; give a comma-separated list of memcheck, "
                        "racecheck, initcheck and synccheck, or off");
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return checks;
}

Result<uint64_t> sanitize_checks_from_environment() {
  const std::optional<std::string> env = settings::read("MTIA_EMU_SANITIZE");
  if (!env) return uint64_t{0};
  return parse_sanitize_checks(*env, "MTIA_EMU_SANITIZE");
}

std::string sanitize_checks_name(uint64_t checks) {
  if (checks == 0) return "off";
  std::string out;
  for (const auto& [bit, name] :
       {std::pair{kSanitizeMemcheck, "memcheck"}, std::pair{kSanitizeRacecheck, "racecheck"},
        std::pair{kSanitizeInitcheck, "initcheck"}, std::pair{kSanitizeSynccheck, "synccheck"}}) {
    if ((checks & bit) == 0) continue;
    if (!out.empty()) out += ",";
    out += name;
  }
  return out;
}

}  // namespace mtia::isa
