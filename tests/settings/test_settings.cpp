// The settings table (mtia/settings/settings.h) and its reader.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "mtia/settings/settings.h"
#include "scoped_env.h"

using mtia::test::ScopedEnv;

TEST_CASE("every setting is an MTIA_EMU_ variable, listed once, with a meaning", "[settings]") {
  std::set<std::string_view> names;
  for (const auto& s : mtia::settings::all()) {
    CHECK(s.name.starts_with("MTIA_EMU_"));
    CHECK_FALSE(s.values.empty());
    CHECK_FALSE(s.fallback.empty());
    CHECK_FALSE(s.reader.empty());
    CHECK_FALSE(s.meaning.empty());
    CHECK(names.insert(s.name).second);
    CHECK(mtia::settings::find(s.name) == &s);
  }
  CHECK(names.size() >= 20);
  CHECK(mtia::settings::find("MTIA_EMU_NO_SUCH") == nullptr);
}

TEST_CASE("read gives the value, and nothing when unset or empty", "[settings]") {
  {
    ScopedEnv env("MTIA_EMU_MAX_PES", "7");
    CHECK(mtia::settings::read("MTIA_EMU_MAX_PES") == std::optional<std::string>("7"));
  }
  {
    ScopedEnv env("MTIA_EMU_MAX_PES", "");
    CHECK_FALSE(mtia::settings::read("MTIA_EMU_MAX_PES").has_value());
  }
  {
    ScopedEnv env("MTIA_EMU_MAX_PES", nullptr);
    CHECK_FALSE(mtia::settings::read("MTIA_EMU_MAX_PES").has_value());
  }
}

TEST_CASE("the Markdown table has a row per setting; the description shows each origin",
          "[settings]") {
  const std::string table = mtia::settings::markdown();
  size_t rows = 0;
  for (size_t at = table.find("\n| `MTIA_EMU_"); at != std::string::npos;
       at = table.find("\n| `MTIA_EMU_", at + 1)) {
    ++rows;
  }
  CHECK(rows == mtia::settings::all().size());
  // A cell's own '|' is escaped, so the row keeps its six columns.
  for (const auto& s : mtia::settings::all()) {
    const size_t start = table.find("| `" + std::string(s.name) + "`");
    REQUIRE(start != std::string::npos);
    const std::string row = table.substr(start, table.find('\n', start) - start);
    size_t bars = 0;
    for (size_t i = 0; i < row.size(); ++i) {
      if (row[i] == '|' && (i == 0 || row[i - 1] != '\\')) ++bars;
    }
    CHECK(bars == 7);
  }
  ScopedEnv set("MTIA_EMU_WAIT", "spin");
  ScopedEnv unset("MTIA_EMU_FALLBACK", nullptr);
  const std::string now = mtia::settings::describe_current();
  CHECK(now.find("MTIA_EMU_WAIT=spin  (environment)") != std::string::npos);
  CHECK(now.find("MTIA_EMU_FALLBACK=  (unset: warn)") != std::string::npos);
}
