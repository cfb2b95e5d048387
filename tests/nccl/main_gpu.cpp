// The runner of the GPU suites: without a CUDA device it exits 77, which
// CTest reports as skipped (SKIP_RETURN_CODE), instead of passing vacuously.
// Listing the cases (test discovery at build time) works without a GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <doctest/doctest.h>

#include "nccl_test_support.hpp"

namespace {

bool only_lists(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg{argv[i]};
    for (auto flag : {"-ltc", "-lts", "-lr", "-h", "-v", "-c", "--list",
                      "--help", "--version", "--count"})
      if (arg.starts_with(flag)) return true;
  }
  return false;
}

} // namespace

int main(int argc, char** argv) {
  // NCCL then refuses null or foreign buffers with ncclInvalidArgument
  // instead of ignoring them: every case checks the pointers we pass.
  // Before any NCCL call, since NCCL reads its settings once.
  setenv("NCCL_CHECK_POINTERS", "1", 0);
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (!only_lists(argc, argv) && nccl_test::gpu_count() == 0) {
    std::puts("SKIPPED: no CUDA device");
    return 77;
  }
  return context.run();
}
