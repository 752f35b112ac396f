// A tiny Llama and a small learnable corpus, shared by the trainer tests.
#pragma once
#include <cstdint>
#include <string>

#include <functional>
#include <memory>

#include "llm/llama_config.h"
#include "llm/tokenizer.h"
#include "llm/train_tasks.h"
#include "llm/trainer.h"

namespace milrt::test {

// Sentences over a small vocabulary of words: learnable structure a 1-layer
// model picks up in a few dozen steps.
std::string tiny_corpus();
// Writes tiny_corpus() as DIR/corpus.txt and returns its path.
std::string write_tiny_corpus(const std::string& dir);
// dim 32, hidden 64, 1 layer, 2 heads sharing 1 kv head, byte vocabulary, seq 16.
llm::LlamaConfig tiny_llama_config();
// AdamW at lr 1e-2 with 5 warmup steps over `steps`, evaluation at the end.
llm::TrainOptions tiny_train_options(int64_t steps);
// Batches of 8 from write_tiny_corpus(dir): the task options of the tiny runs.
llm::LlamaTaskOptions tiny_task_options(const std::string& dir);
// A file's bytes ("" when missing).
std::string slurp(const std::string& path);

// Trains the tiny model (weights from init seed `seed`) into `dir`, stopped
// after step `stop_after` as Ctrl-C does (the flag raised while the step
// runs; the trainer finishes it and saves), then resumed from the checkpoint
// in a fresh task, as a new process would (`before_resume` may change the
// options the resumed run gets). Returns both logs.
struct InterruptedRun {
  llm::TrainLog first, resumed;
};
InterruptedRun train_interrupted_then_resumed(std::shared_ptr<const llm::Tokenizer> tok, const llm::LlamaTaskOptions& to,
                                              llm::TrainOptions opt, const std::string& dir, int64_t stop_after,
                                              uint64_t seed,
                                              const std::function<void(llm::TrainOptions&)>& before_resume = {});

}  // namespace milrt::test
