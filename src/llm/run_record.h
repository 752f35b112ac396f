// run.json: what a run directory was made with, and its counters across
// resumes. `--resume` reads it to refuse a directory that another config made
// (or that would continue with other batch shapes, which breaks the promise
// that a resumed run equals an uninterrupted one), and to keep the second
// seed's cumulative counters (steps, wall, compile and train time), which
// survive its exec() restarts and here survive process restarts.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace milrt::llm {

struct RunRecord {
  // Fixed for the life of a run.
  std::string config;                // "default", "stories15m", "seed-layer", ...
  std::string precision;             // fp32 | bf16 | fp16
  int64_t batch = 0, seq = 0, accum = 0;
  // Data-parallel ranks (mpirun -np) the run was made with; 1 for one
  // process and for a record without the field. A resumed run must have as
  // many: the data position and the batch split depend on it.
  int64_t world_size = 1;
  // Totals over every process that trained this run (added to at each save).
  int64_t micro_steps = 0, optimizer_steps = 0;
  double wall_ms = 0, compile_ms = 0, train_ms = 0;
};

// The record in `dir`, or nullopt when there is none (a run made before
// run.json existed). A malformed file is an Error naming it.
std::optional<RunRecord> load_run_record(const std::string& dir);
// Writes DIR/run.json atomically.
void save_run_record(const std::string& dir, const RunRecord& r);

// Throws a one-line Error naming the first field in which `want` (what this
// invocation asks for) differs from `have` (what the run was made with).
void check_same_run(const RunRecord& have, const RunRecord& want, const std::string& dir);

}  // namespace milrt::llm
