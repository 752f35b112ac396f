// What a training run leaves for its user: the losses as CSV, a plot of the
// loss curves as SVG, and the efficiency report. Every file is written
// atomically, so an interrupted run never leaves half a file.
#pragma once
#include <string>
#include <vector>

#include "llm/trainer.h"

namespace milrt::llm {

// step,loss,val_loss,lr,grad_norm,ms (val_loss empty where not evaluated).
void write_loss_csv(const std::string& path, const TrainLog& log);
// The rows of an earlier run's CSV with step <= up_to_step (for --resume);
// none when the file does not exist. A malformed line is an error naming it.
std::vector<TrainLog::Row> read_loss_csv(const std::string& path, int64_t up_to_step);
// Training loss (line) and validation loss (points) against the step.
void write_loss_svg(const std::string& path, const TrainLog& log, const std::string& title);

}  // namespace milrt::llm
