#include "kernels/threads.h"

#include <atomic>
#include <cstdlib>
#include <thread>

namespace milrt::kernels {
namespace {

int default_threads() {
  if (const char* s = std::getenv("MILRT_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(s, &end, 10);
    if (end != s && *end == '\0' && n > 0) return int(n > 1024 ? 1024 : n);
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? int(hw) : 1;
}

std::atomic<int> g_override{0};

}  // namespace

int num_threads() {
  static const int def = default_threads();
  int o = g_override.load(std::memory_order_relaxed);
  return o > 0 ? o : def;
}

void set_num_threads(int n) { g_override.store(n > 0 ? n : 0, std::memory_order_relaxed); }

}  // namespace milrt::kernels
