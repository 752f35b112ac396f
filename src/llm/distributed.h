// Data-parallel training across processes: the few collectives the trainer
// needs, over MPI when milrt is built with it (CMake found MPI; then
// MILRT_HAVE_MPI) and the process was started by mpirun, otherwise the
// identity of a world of one process.
//
// MPI is initialised only when the launcher's environment says so
// (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE): a plain `milrt train` of an
// MPI build never calls MPI_Init and behaves exactly as a build without MPI.
// Every call below is collective (all ranks call it, in the same order) and
// comes from the main thread only.
#pragma once
#include <cstddef>
#include <string>

namespace milrt::llm::dist {

// Whether this build can run under mpirun ("MPI" / "no MPI" for --help).
bool built_with_mpi();
std::string build_description();

// Initialises MPI when launched by mpirun (idempotent; finalised at exit).
// Returns the world size. Without MPI, or outside mpirun: 1.
int init();
int rank();
int world_size();
inline bool distributed() { return world_size() > 1; }

// Non-blocking sums, to overlap communication with computation (the
// gradients' all-reduce with the backward pass). start_allreduce_sum starts
// an in-place sum over ranks of data[0, n) (MPI_Iallreduce, in pieces of at
// most 2^30 floats); the memory must stay untouched until wait_all()
// returns. Every rank must start the same sums in the same order. Open
// MPI advances non-blocking collectives only inside MPI calls, so the
// caller calls progress() often (between kernel steps): it tests the
// pending sums and returns whether all are done. wait_all() blocks until
// they are (under the collective timeout). One rank: all three do nothing.
void start_allreduce_sum(float* data, size_t n);
bool progress();
void wait_all();
// ZeRO-1's collectives, over one flat array of world_size() * shard floats
// on every rank (rank r's part: [r*shard, (r+1)*shard)).
// Reduce-scatter (MPI_Reduce_scatter with equal counts, in place): on return
// data[0, shard) holds the sum over ranks of part `rank()` (the rest of
// `data` is left undefined). One rank: nothing to do.
void reduce_scatter_sum(float* data, size_t shard);
// All-gather (MPI_Allgather, in place): every rank's part r becomes rank r's.
void allgather(float* data, size_t shard);
// Gathers every rank's `shard` floats into root's `out` (world_size() *
// shard floats, rank order; ignored on the other ranks).
void gather(const float* shard_data, size_t shard, float* out, int root = 0);
// data[i] = sum over ranks (doubles: losses, counters).
void allreduce_sum(double* data, size_t n);
// data[i] = max over ranks.
void allreduce_max(double* data, size_t n);
// Rank `root`'s bytes to every rank.
void broadcast(void* data, size_t bytes, int root = 0);
void barrier();
// Prints "error: rank R of N: message" on stderr and ends every rank of the
// job (MPI_Abort) with exit code `code`; a no-op returning false outside a
// distributed run (the caller then reports the error as usual).
bool abort_job(const std::string& message, int code = 2);

// A collective that has not returned after this many seconds ends the job:
// "error: rank R of N: no reply from every rank for S s in MPI_X ..." on
// stderr and exit code 2, which makes mpirun end the other ranks. It catches
// a rank that is alive but stuck (a dead one mpirun notices itself). Timed by
// a watchdog thread started with the first distributed collective, so the
// collectives stay MPI's blocking ones. 0 turns it off; default 600 s
// (rank 0 writing a large checkpoint keeps the others waiting, legitimately).
void set_collective_timeout(double seconds);
double collective_timeout();

}  // namespace milrt::llm::dist
