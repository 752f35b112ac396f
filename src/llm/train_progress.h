// The progress display of a training run, fed by TrainOptions::on_step
// (train() itself prints nothing, so an embedder sees only its callbacks):
//
//   step 12/100 | loss 3.1234 | val 3.2101 | 13611 tok/s | 150.5 ms/step | lr 1.00e-04 | ETA 2m12s
//
// On a terminal the line is rewritten in place on stderr; otherwise it is
// printed to stdout every `log_every` steps, at evaluations and at the last
// step. `phase_lines` adds the step's phase split after every step (the
// second seed's per-batch line). Steps the loss scaler skipped are announced.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "llm/trainer.h"

namespace milrt::llm {

struct ProgressOptions {
  int64_t steps = 0;                 // TrainOptions::steps (the ETA and the last line)
  int64_t accum = 1;                 // TrainOptions::accum
  int64_t tokens_per_microstep = 0;  // TrainTask's; 0: no tok/s
  int world = 1;                     // data-parallel ranks (tok/s is global)
  int log_every = 10;
  bool phase_lines = false;
  bool live = false;                 // a terminal: one line rewritten in place
};

class TrainProgress {
 public:
  // `out` gets the kept lines, `term` the live line.
  explicit TrainProgress(const ProgressOptions& o, std::FILE* out = stdout, std::FILE* term = stderr);
  ~TrainProgress();  // ends a live line
  TrainProgress(const TrainProgress&) = delete;
  TrainProgress& operator=(const TrainProgress&) = delete;

  void on_step(int64_t step, const TrainLog& log);
  // Ends a live line so that what follows starts on a line of its own.
  void finish();

 private:
  ProgressOptions o_;
  std::FILE *out_, *term_;
  std::vector<double> step_ms_;  // this call's steps, for the median
  bool line_open_ = false;
};

// "45s", "2m05s", "1h03m".
std::string format_duration(double seconds);

}  // namespace milrt::llm
