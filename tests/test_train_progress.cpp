// The training progress display (llm/train_progress.h) on hand-built logs,
// and train() itself printing nothing (its callers own the terminal).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "llm/checkpoint.h"
#include "llm/train_progress.h"
#include "support/tiny_training.h"

namespace {

using milrt::llm::ProgressOptions;
using milrt::llm::TrainLog;
using milrt::llm::TrainProgress;

// A FILE* that collects what is written to it.
struct Capture {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ~Capture() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

void add_row(TrainLog& log, int64_t step, double loss, double val, double ms) {
  log.rows.push_back({step, loss, val, 1e-3, 0.5, ms});
}

TEST(TrainProgress, PlainLinesEveryLogEveryStepsAtEvaluationsAndTheLastStep) {
  Capture out, term;
  ProgressOptions p;
  p.steps = 5;
  p.accum = 2;
  p.tokens_per_microstep = 100;
  p.log_every = 2;
  {
    TrainProgress progress(p, out.f, term.f);
    TrainLog log;
    for (int64_t s = 1; s <= 5; ++s) {
      add_row(log, s, 4.0 - 0.5 * double(s), s == 3 ? 2.75 : NAN, s == 1 ? 400 : 200);
      progress.on_step(s, log);
    }
  }
  // Step 1 is not printed (not a multiple of 2, no evaluation, not the last).
  // Step 2: median of {400, 200} is 400 (upper median), 2·100 tokens / 0.4 s = 500 tok/s, ETA 3·0.4 s.
  // Steps 3-5: the median of {400, 200, 200, ...} is 200: 1000 tok/s, ETA under a second.
  EXPECT_EQ(out.text(),
            "step 2/5 | loss 3.0000 | 500 tok/s | 400.0 ms/step | lr 1.00e-03 | ETA 1s\n"
            "step 3/5 | loss 2.5000 | val 2.7500 | 1000 tok/s | 200.0 ms/step | lr 1.00e-03 | ETA 0s\n"
            "step 4/5 | loss 2.0000 | 1000 tok/s | 200.0 ms/step | lr 1.00e-03 | ETA 0s\n"
            "step 5/5 | loss 1.5000 | 1000 tok/s | 200.0 ms/step | lr 1.00e-03 | ETA 0s\n");
  EXPECT_EQ(term.text(), "");
}

TEST(TrainProgress, LiveLineIsRewrittenInPlaceAndEndedOnce) {
  Capture out, term;
  ProgressOptions p;
  p.steps = 2;
  p.live = true;
  {
    TrainProgress progress(p, out.f, term.f);
    TrainLog log;
    add_row(log, 1, 3.0, NAN, 10);
    progress.on_step(1, log);
    add_row(log, 2, 2.0, NAN, 10);
    progress.on_step(2, log);
    progress.finish();
  }  // the destructor adds no second newline
  EXPECT_EQ(term.text(),
            "\r\033[Kstep 1/2 | loss 3.0000 | 10.0 ms/step | lr 1.00e-03 | ETA 0s"
            "\r\033[Kstep 2/2 | loss 2.0000 | 10.0 ms/step | lr 1.00e-03 | ETA 0s\n");
  EXPECT_EQ(out.text(), "");
}

TEST(TrainProgress, SkippedStepsAndPhaseLines) {
  Capture out, term;
  ProgressOptions p;
  p.steps = 10;
  p.accum = 4;
  p.log_every = 100;
  p.phase_lines = true;
  TrainProgress progress(p, out.f, term.f);
  TrainLog log;
  add_row(log, 1, 3.0, NAN, 80);
  log.skipped_steps = {1};
  log.loss_scale = 16384;  // halved from 32768 by the skip
  log.last_step = {15.5, 0.25, 1.5, 0.125, 0, 0};
  progress.on_step(1, log);
  EXPECT_EQ(out.text(),
            "step 1: non-finite gradients at loss scale 32768: step skipped, scale now 16384\n"
            "step 1/10 | loss 3.0000 | 80.0 ms/step | lr 1.00e-03 | ETA 0s\n"
            "  [batch 1: 4 micro-steps in 80 ms, 20.0 ms each] fwd+bwd 15.5 | accumulate 0.25 | optimizer 1.50 | "
            "data 0.125 ms/micro-step\n");
}

TEST(TrainProgress, DurationsReadAsAPersonWouldWriteThem) {
  EXPECT_EQ(milrt::llm::format_duration(45.9), "45s");
  EXPECT_EQ(milrt::llm::format_duration(125), "2m05s");
  EXPECT_EQ(milrt::llm::format_duration(3780), "1h03m");
  EXPECT_EQ(milrt::llm::format_duration(-3), "0s");
}

// The trainer reports through callbacks only: a library user's stdout and
// stderr stay theirs.
TEST(TrainProgress, TrainItselfPrintsNothing) {
  namespace llm = milrt::llm;
  const std::string dir = (std::filesystem::temp_directory_path() / "milrt_train_progress").string();
  std::filesystem::create_directories(dir);
  llm::TrainTask task = llm::llama_task(milrt::test::tiny_llama_config(), llm::byte_tokenizer(),
                                        milrt::test::tiny_task_options(dir));
  milrt::TensorMap w = llm::init_llama_weights(milrt::test::tiny_llama_config(), 3).tensors;
  llm::TrainOptions opt = milrt::test::tiny_train_options(3);
  opt.out_dir = dir + "/run";
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  const TrainLog log = llm::train(task, opt, w);
  const std::string so = testing::internal::GetCapturedStdout(), se = testing::internal::GetCapturedStderr();
  std::filesystem::remove_all(dir);
  EXPECT_EQ(log.rows.size(), 3u);
  EXPECT_EQ(so, "");
  EXPECT_EQ(se, "");
}

}  // namespace
