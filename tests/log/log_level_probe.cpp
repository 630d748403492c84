// Exits 0 when a new logger's level is the one named by argv[1] (what MTIA_EMU_LOG_LEVEL set).
#include <cstdio>
#include <string>

#include "mtia/log/logger.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  spdlog::level::level_enum want;
  if (!mtia::log::parse_level(argv[1], want)) return 2;
  auto got = mtia::log::get("probe")->level();
  auto text = spdlog::level::to_string_view(got);
  std::printf("level %.*s\n", static_cast<int>(text.size()), text.data());
  return got == want ? 0 : 1;
}
