// The thread count of the multi-threaded kernels (GEMM). Results never depend
// on it: kernels split work into independent output blocks whose arithmetic
// is the same whichever thread computes them.
#pragma once

namespace milrt::kernels {

// MILRT_THREADS when set to a positive integer, else the number of cores
// this process may use; read once. set_num_threads overrides it (n >= 1;
// n <= 0 restores the default).
int num_threads();
void set_num_threads(int n);

}  // namespace milrt::kernels
