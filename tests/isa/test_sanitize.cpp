// The sanitizer's settings (isa/sanitize.h): check names, unknown names, and
// $MTIA_EMU_SANITIZE.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "mtia/isa/sanitize.h"
#include "scoped_env.h"

using namespace mtia::isa;

namespace {

using mtia::test::ScopedEnv;

std::string rejection(std::string_view list) {
  auto r = parse_sanitize_checks(list, "SRC");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == ErrorCode::kInvalidArgument);
  return r.error().reason;
}

}  // namespace

TEST_CASE("sanitizer checks parse from their names", "[isa][sanitize]") {
  CHECK(parse_sanitize_checks("memcheck", "SRC").value() == kSanitizeMemcheck);
  CHECK(parse_sanitize_checks(" memcheck , memcheck", "SRC").value() == kSanitizeMemcheck);
  CHECK(parse_sanitize_checks("", "SRC").value() == 0);
  CHECK(parse_sanitize_checks("off", "SRC").value() == 0);
  CHECK(parse_sanitize_checks("racecheck", "SRC").value() == kSanitizeRacecheck);
  CHECK(parse_sanitize_checks("racecheck,memcheck", "SRC").value() ==
        (kSanitizeMemcheck | kSanitizeRacecheck));
  CHECK(sanitize_checks_name(kSanitizeMemcheck) == "memcheck");
  CHECK(sanitize_checks_name(kSanitizeRacecheck) == "racecheck");
  CHECK(sanitize_checks_name(kSanitizeMemcheck | kSanitizeRacecheck) == "memcheck,racecheck");
  CHECK(parse_sanitize_checks("synccheck,initcheck", "SRC").value() ==
        (kSanitizeInitcheck | kSanitizeSynccheck));
  CHECK(parse_sanitize_checks("initcheck,racecheck,synccheck,memcheck", "SRC").value() ==
        kSanitizeChecksMask);
  CHECK(sanitize_checks_name(kSanitizeSynccheck | kSanitizeMemcheck) == "memcheck,synccheck");
  CHECK(sanitize_checks_name(kSanitizeChecksMask) == "memcheck,racecheck,initcheck,synccheck");
  CHECK(sanitize_checks_name(0) == "off");
}

TEST_CASE("unknown sanitizer checks are refused", "[isa][sanitize]") {
  const std::string unknown = rejection("memcheck,bogus");
  CHECK_THAT(unknown, Catch::StartsWith("SRC=memcheck,bogus: 'bogus' is not a sanitizer check"));
  CHECK_THAT(unknown, Catch::Contains("memcheck, racecheck, initcheck and synccheck, or off"));
  CHECK_THAT(rejection("memcheck,"), Catch::Contains("'' is not a sanitizer check"));
  CHECK_THAT(rejection("synchcheck"), Catch::Contains("'synchcheck' is not a sanitizer check"));
}

TEST_CASE("MTIA_EMU_SANITIZE selects the checks", "[isa][sanitize]") {
  {
    ScopedEnv env("MTIA_EMU_SANITIZE", nullptr);
    CHECK(sanitize_checks_from_environment().value() == 0);
  }
  {
    ScopedEnv env("MTIA_EMU_SANITIZE", "memcheck");
    CHECK(sanitize_checks_from_environment().value() == kSanitizeMemcheck);
  }
  {
    ScopedEnv env("MTIA_EMU_SANITIZE", "mem");
    auto r = sanitize_checks_from_environment();
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::StartsWith("MTIA_EMU_SANITIZE=mem: 'mem'"));
  }
}
