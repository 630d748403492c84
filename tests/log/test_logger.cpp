// mtia/log: one factory for every component's logger.
#include <catch2/catch.hpp>

#include "mtia/log/logger.h"

TEST_CASE("a logger is made once per name and shared", "[log]") {
  auto a = mtia::log::get("test.a");
  auto b = mtia::log::get("test.a");
  auto c = mtia::log::get("test.c");
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a->name() == "test.a");
}

TEST_CASE("set_level reaches loggers made before and after it", "[log]") {
  auto before = mtia::log::get("test.before");
  mtia::log::set_level(spdlog::level::debug);
  auto after = mtia::log::get("test.after");
  CHECK(before->level() == spdlog::level::debug);
  CHECK(after->level() == spdlog::level::debug);
  CHECK(mtia::log::level() == spdlog::level::debug);
  mtia::log::set_level(spdlog::level::err);
  CHECK(before->level() == spdlog::level::err);
  CHECK(after->level() == spdlog::level::err);
}

TEST_CASE("parse_level takes exact level names only", "[log]") {
  spdlog::level::level_enum level = spdlog::level::info;
  CHECK(mtia::log::parse_level("debug", level));
  CHECK(level == spdlog::level::debug);
  CHECK(mtia::log::parse_level("warning", level));
  CHECK(level == spdlog::level::warn);
  CHECK(mtia::log::parse_level("off", level));
  CHECK(level == spdlog::level::off);
  level = spdlog::level::info;
  CHECK_FALSE(mtia::log::parse_level("verbose", level));
  CHECK_FALSE(mtia::log::parse_level("", level));
  CHECK(level == spdlog::level::info);  // untouched on failure
}
