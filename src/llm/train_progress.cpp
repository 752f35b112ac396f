#include "llm/train_progress.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace milrt::llm {

namespace {
double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

std::string format_duration(double seconds) {
  long s = long(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s / 60) % 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

TrainProgress::TrainProgress(const ProgressOptions& o, std::FILE* out, std::FILE* term)
    : o_(o), out_(out), term_(term) {}

TrainProgress::~TrainProgress() { finish(); }

void TrainProgress::finish() {
  if (line_open_) std::fputc('\n', term_), std::fflush(term_);
  line_open_ = false;
}

void TrainProgress::on_step(int64_t step, const TrainLog& log) {
  if (log.rows.empty()) return;
  const TrainLog::Row& row = log.rows.back();
  step_ms_.push_back(row.ms);
  auto clear_live = [&] {
    if (line_open_) std::fputs("\r\033[K", term_), line_open_ = false;
  };
  if (!log.skipped_steps.empty() && log.skipped_steps.back() == step) {
    clear_live();
    // The scaler halved the scale this step ran at.
    std::fprintf(out_, "step %lld: non-finite gradients at loss scale %g: step skipped, scale now %g\n",
                 (long long)step, 2 * log.loss_scale, log.loss_scale);
    std::fflush(out_);
  }
  const double step_ms = median(step_ms_);
  const double eta = step_ms * double(o_.steps - step) / 1000.0;
  const double tok_s =
      o_.tokens_per_microstep > 0 ? double(o_.tokens_per_microstep * o_.accum * o_.world) / (step_ms / 1000) : 0;
  std::string line = fmt::format("step {}/{} | loss {:.4f}", step, o_.steps, row.loss);
  if (!std::isnan(row.val_loss)) line += fmt::format(" | val {:.4f}", row.val_loss);
  if (tok_s > 0) line += fmt::format(" | {:.0f} tok/s", tok_s);
  line += fmt::format(" | {:.1f} ms/step", step_ms);
  if (o_.world > 1)
    line += fmt::format(" (wait {:.1f}, allreduce {:.1f}) | {} ranks", log.last_step.wait, log.last_step.allreduce,
                        o_.world);
  line += fmt::format(" | lr {:.2e} | ETA {}", row.lr, format_duration(eta));
  const bool last = step == o_.steps;
  if (o_.live) {
    std::fprintf(term_, "\r\033[K%s", line.c_str()), std::fflush(term_);
    line_open_ = true;
  } else if (o_.phase_lines || step % std::max(1, o_.log_every) == 0 || last || !std::isnan(row.val_loss)) {
    std::fprintf(out_, "%s\n", line.c_str()), std::fflush(out_);
  }
  if (o_.phase_lines) {
    // This step alone, per micro-step, as the seed prints each batch.
    if (o_.live) std::fprintf(term_, "\r\033[K%s\n", line.c_str()), line_open_ = false;
    const TrainLog::StepPhases& p = log.last_step;
    std::fprintf(out_,
                 "  [batch %lld: %lld micro-steps in %.0f ms, %.1f ms each] fwd+bwd %.1f | accumulate %.2f | "
                 "optimizer %.2f | data %.3f ms/micro-step\n",
                 (long long)step, (long long)o_.accum, row.ms, row.ms / double(o_.accum), p.fwd_bwd, p.accumulate,
                 p.optimizer, p.data);
    std::fflush(out_);
  }
}

}  // namespace milrt::llm
