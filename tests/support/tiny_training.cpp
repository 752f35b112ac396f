#include "support/tiny_training.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "llm/checkpoint.h"

namespace milrt::test {

std::string tiny_corpus() {
  const char* subjects[] = {"the cat", "a dog", "the bird", "my friend", "the old man"};
  const char* verbs[] = {"sees", "likes", "follows", "finds"};
  const char* objects[] = {"the ball.", "a red fish.", "the green tree.", "some bread."};
  std::string s;
  for (int i = 0; i < 400; ++i) s += std::string(subjects[(i * 7) % 5]) + " " + verbs[(i * 3) % 4] + " " + objects[(i * 5 + i / 4) % 4] + "\n";
  return s;
}

std::string write_tiny_corpus(const std::string& dir) {
  std::string path = (std::filesystem::path(dir) / "corpus.txt").string();
  std::ofstream(path) << tiny_corpus();
  return path;
}

llm::LlamaTaskOptions tiny_task_options(const std::string& dir) {
  llm::LlamaTaskOptions to;
  to.batch = 8;
  to.data = write_tiny_corpus(dir);
  return to;
}

llm::LlamaConfig tiny_llama_config() {
  llm::LlamaConfig c;
  c.dim = 32, c.hidden = 64, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.vocab = 259, c.seq = 16;
  return c;
}

llm::TrainOptions tiny_train_options(int64_t steps) {
  llm::TrainOptions o;
  o.steps = steps;
  o.adamw.lr = 1e-2;
  o.adamw.warmup = 5;
  o.adamw.total_steps = steps;
  o.adamw.weight_decay = 0.01;
  o.eval_every = 0;
  o.eval_batches = 4;
  return o;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

InterruptedRun train_interrupted_then_resumed(std::shared_ptr<const llm::Tokenizer> tok, const llm::LlamaTaskOptions& to,
                                              llm::TrainOptions opt, const std::string& dir, int64_t stop_after,
                                              uint64_t seed,
                                              const std::function<void(llm::TrainOptions&)>& before_resume) {
  InterruptedRun r;
  std::atomic<bool> stop{false};
  llm::TrainTask task = llm::llama_task(tiny_llama_config(), tok, to);
  int64_t batches = 0;
  auto next = task.next_batch;
  task.next_batch = [&](TensorMap& in, bool validation) {
    if (!validation && ++batches == stop_after * opt.accum) stop = true;
    next(in, validation);
  };
  TensorMap w = llm::init_llama_weights(tiny_llama_config(), seed).tensors;
  opt.out_dir = dir;
  opt.stop = &stop;
  r.first = llm::train(task, opt, w);

  llm::TrainTask fresh = llm::llama_task(tiny_llama_config(), tok, to);
  TensorMap wc = llm::load_llama2c_checkpoint((std::filesystem::path(dir) / "checkpoint.bin").string()).tensors;
  opt.stop = nullptr;
  opt.resume = true;
  if (before_resume) before_resume(opt);
  r.resumed = llm::train(fresh, opt, wc);
  return r;
}

}  // namespace milrt::test
