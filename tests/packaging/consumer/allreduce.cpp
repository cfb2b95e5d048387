// The collective layer from a consumer, through the consumer's own shared
// library (plugin.cpp). Exits 0 when the result is right.
#include <cstdio>
#include <exception>

#include "plugin.hpp"

int main() {
  try {
    bool ok = consumer_plugin_allreduce();
    std::printf("consumer_allreduce: %s (C++ %ld, through a shared "
                "library)\n",
                ok ? "ok" : "WRONG", static_cast<long>(__cplusplus));
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("consumer_allreduce: failed: %s\n", e.what());
    return 1;
  }
}
