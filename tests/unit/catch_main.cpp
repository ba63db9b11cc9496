// The one Catch2 main shared by every unit-test program (compiled once: Catch2 v2's
// implementation is slow to build).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
