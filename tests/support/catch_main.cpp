// Catch2's runner, compiled once for every test executable: its implementation is most of a
// test build's compile time when each executable compiles its own.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
