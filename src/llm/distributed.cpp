#include "llm/distributed.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <thread>
#include <vector>

#include "milrt/error.h"

#ifndef MILRT_HAVE_MPI
#define MILRT_HAVE_MPI 0  // CMake defines it to 1 when it found MPI
#endif
#if MILRT_HAVE_MPI
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace milrt::llm::dist {
namespace {

[[maybe_unused]] bool launched_by_mpirun() {  // (read only with MPI)
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

int g_rank = 0, g_size = 1;
bool g_initialised = false;

// The collective in progress on the main thread, for the watchdog: its name
// and when it began (0: none).
std::atomic<const char*> g_collective{nullptr};
std::atomic<int64_t> g_collective_since_ns{0};
std::atomic<double> g_timeout_s{600};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Ends the process (exit code 2) when a collective outlasts the timeout. It
// calls no MPI function (the library is initialised for one calling thread):
// the rank's exit without MPI_Finalize is what makes mpirun end the job.
void watchdog() {
  for (;;) {
    const double limit = g_timeout_s.load();
    const double poll = limit > 0 ? std::clamp(limit / 20, 0.01, 1.0) : 1.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(poll));
    const int64_t since = g_collective_since_ns.load();
    const char* what = g_collective.load();
    if (limit <= 0 || since == 0 || what == nullptr) continue;
    const double waited = double(now_ns() - since) * 1e-9;
    if (waited <= limit) continue;
    std::fflush(stdout);
    std::fprintf(stderr,
                 "error: rank %d of %d: no reply from every rank for %.0f s in %s: a rank is stuck; ending the job "
                 "(--comm-timeout sets this limit)\n",
                 g_rank, g_size, waited, what);
    std::fflush(stderr);
    std::_Exit(2);
  }
}

// Marks the main thread as inside collective `what` while it lives; the
// first one starts the watchdog.
class Collective {
 public:
  explicit Collective(const char* what) {
    static std::once_flag started;
    std::call_once(started, [] { std::thread(watchdog).detach(); });
    g_collective.store(what);
    g_collective_since_ns.store(now_ns());
  }
  ~Collective() { g_collective_since_ns.store(0); }
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
};

#if MILRT_HAVE_MPI
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw Error(std::string("MPI: ") + what + ": " + std::string(msg, size_t(len)));
}
void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}
#endif

}  // namespace

bool built_with_mpi() { return MILRT_HAVE_MPI != 0; }

std::string build_description() {
#if MILRT_HAVE_MPI
  return "this build has MPI: run `mpirun -np N milrt train ...` for data-parallel training";
#else
  return "this build has no MPI (install libopenmpi-dev and rebuild for `mpirun -np N milrt train`)";
#endif
}

int init() {
  if (g_initialised) return g_size;
  g_initialised = true;
#if MILRT_HAVE_MPI
  if (!launched_by_mpirun()) return g_size;
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  std::atexit(finalize_at_exit);
  // Errors come back as codes (turned into exceptions, then abort_job) rather
  // than killing the job without a word.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
#endif
  return g_size;
}

int rank() { return g_rank; }

void set_collective_timeout(double seconds) {
  if (!(seconds >= 0)) throw Error("the collective timeout must be a number of seconds >= 0");
  g_timeout_s.store(seconds);
}
double collective_timeout() { return g_timeout_s.load(); }
int world_size() { return g_size; }

#if MILRT_HAVE_MPI
namespace {
std::vector<MPI_Request> g_pending;  // started non-blocking sums not yet completed
}  // namespace
#endif

void start_allreduce_sum(float* data, size_t n) {
  if (g_size == 1) return;
#if MILRT_HAVE_MPI
  const size_t piece = size_t(1) << 30;
  for (size_t off = 0; off < n; off += piece) {
    g_pending.push_back(MPI_REQUEST_NULL);
    check(MPI_Iallreduce(MPI_IN_PLACE, data + off, int(std::min(piece, n - off)), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                         &g_pending.back()),
          "MPI_Iallreduce");
  }
#else
  (void)data, (void)n;
#endif
}

bool progress() {
#if MILRT_HAVE_MPI
  if (g_pending.empty()) return true;
  int done = 0;
  check(MPI_Testall(int(g_pending.size()), g_pending.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  if (done) g_pending.clear();
  return done != 0;
#else
  return true;
#endif
}

void wait_all() {
#if MILRT_HAVE_MPI
  if (!g_pending.empty()) {
    Collective c("MPI_Waitall (the gradients' non-blocking all-reduce)");
    check(MPI_Waitall(int(g_pending.size()), g_pending.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    g_pending.clear();
  }
#endif
}

namespace {
[[maybe_unused]] int checked_count(size_t n, const char* what) {  // (read only with MPI)
  if (n > size_t(std::numeric_limits<int>::max()))
    throw Error(std::string(what) + ": " + std::to_string(n) + " floats per rank is more than MPI's int count");
  return int(n);
}
}  // namespace

void reduce_scatter_sum(float* data, size_t shard) {
  if (g_size == 1) return;
#if MILRT_HAVE_MPI
  // MPI_Reduce_scatter with equal counts rather than MPI_Reduce_scatter_block:
  // Open MPI 4.1's fixed decision runs the _block form as a linear reduce to
  // one rank and a scatter (measured 100+ ms for 0.4 MB on a loaded 2-core
  // machine), the general form as recursive halving or a ring (< 1 ms).
  const std::vector<int> counts(size_t(g_size), checked_count(shard, "reduce-scatter"));
  Collective c("MPI_Reduce_scatter");
  check(MPI_Reduce_scatter(MPI_IN_PLACE, data, counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Reduce_scatter");
#else
  (void)data, (void)shard;
#endif
}

void allgather(float* data, size_t shard) {
  if (g_size == 1) return;
#if MILRT_HAVE_MPI
  const int n = checked_count(shard, "all-gather");
  Collective c("MPI_Allgather");
  check(MPI_Allgather(MPI_IN_PLACE, n, MPI_FLOAT, data, n, MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather");
#else
  (void)data, (void)shard;
#endif
}

void gather(const float* shard_data, size_t shard, float* out, int root) {
  if (g_size == 1) {
    std::copy(shard_data, shard_data + shard, out);
    return;
  }
#if MILRT_HAVE_MPI
  const int n = checked_count(shard, "gather");
  Collective c("MPI_Gather");
  check(MPI_Gather(shard_data, n, MPI_FLOAT, out, n, MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Gather");
#else
  (void)root;
#endif
}

#if MILRT_HAVE_MPI
namespace {
void allreduce_doubles(double* data, size_t n, MPI_Op op) {
  if (g_size == 1) return;
  Collective c("MPI_Allreduce");
  check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_DOUBLE, op, MPI_COMM_WORLD), "MPI_Allreduce");
}
}  // namespace
void allreduce_sum(double* data, size_t n) { allreduce_doubles(data, n, MPI_SUM); }
void allreduce_max(double* data, size_t n) { allreduce_doubles(data, n, MPI_MAX); }
#else
void allreduce_sum(double*, size_t) {}
void allreduce_max(double*, size_t) {}
#endif

void broadcast(void* data, size_t bytes, int root) {
  if (g_size == 1) return;
#if MILRT_HAVE_MPI
  const size_t chunk = size_t(1) << 30;
  Collective c("MPI_Bcast");
  for (size_t off = 0; off < bytes; off += chunk)
    check(MPI_Bcast(static_cast<char*>(data) + off, int(std::min(chunk, bytes - off)), MPI_BYTE, root, MPI_COMM_WORLD),
          "MPI_Bcast");
#else
  (void)data, (void)bytes, (void)root;
#endif
}

void barrier() {
  if (g_size == 1) return;
#if MILRT_HAVE_MPI
  Collective c("MPI_Barrier");
  check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
#endif
}

bool abort_job(const std::string& message, int code) {
  if (g_size == 1) return false;
  std::fflush(stdout);
  std::string line = message;
  for (char& c : line)
    if (c == '\n') c = ' ';
  std::fprintf(stderr, "error: rank %d of %d: %s\n", g_rank, g_size, line.c_str());
  std::fflush(stderr);
#if MILRT_HAVE_MPI
  MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::_Exit(code);
}

}  // namespace milrt::llm::dist
