#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "core/system_info.h"

int main(int argc, char* argv[]) {
  mnemo::configure_allocator();  // the same CPU allocator settings as the mnemo binary
  return Catch::Session().run(argc, argv);
}
