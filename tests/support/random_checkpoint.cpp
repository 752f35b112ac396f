#include "support/random_checkpoint.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "llm/checkpoint.h"
#include "support/test_util.h"

namespace milrt::test {

std::string random_llama2c_checkpoint(const std::string& config, bool unshared, int seed) {
  namespace fs = std::filesystem;
  static std::string dir = temp_dir("generate");
  const std::string path =
      dir + "/" + config + (unshared ? "_unshared" : "") + (seed == 7 ? "" : "_s" + std::to_string(seed)) + ".bin";
  if (fs::exists(path)) return path;
  const std::string script = shared_dir().empty() ? "" : shared_dir() + "/peers/make_llama2c_checkpoint.py";
  if (!script.empty() && fs::exists(script) && fs::exists("/usr/bin/python3")) {
    const std::string cmd = "/usr/bin/python3 " + script + " " + path + " --config " + config + " --seed " +
                            std::to_string(seed) + (unshared ? " --unshared" : "") + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) == 0 && fs::exists(path)) return path;
  }
  std::printf("[ note ] make_llama2c_checkpoint.py unavailable: %s from init_llama_weights\n", config.c_str());
  llm::LlamaConfig cfg = *llm::llama_preset(config);
  cfg.shared_classifier = !unshared;
  llm::save_llama2c_checkpoint(path, llm::init_llama_weights(cfg, uint64_t(seed)), 0);
  return path;
}

std::string byte_vocab_checkpoint(const std::string& test_dir) {
  llm::LlamaConfig c = *llm::llama_preset("tiny");
  c.vocab = 259;
  c.shared_classifier = false;
  const std::string path = temp_dir(test_dir) + "/tiny_bytes.bin";
  llm::save_llama2c_checkpoint(path, llm::init_llama_weights(c, 3), 0);
  return path;
}

}  // namespace milrt::test
