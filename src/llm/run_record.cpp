#include "llm/run_record.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>

#include "milrt/error.h"
#include "util/atomic_file.h"

namespace milrt::llm {
namespace {
std::string record_path(const std::string& dir) { return (std::filesystem::path(dir) / "run.json").string(); }
}  // namespace

std::optional<RunRecord> load_run_record(const std::string& dir) {
  const std::string path = record_path(dir);
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    RunRecord r;
    r.config = j.at("config").get<std::string>();
    r.precision = j.at("precision").get<std::string>();
    r.batch = j.at("batch").get<int64_t>();
    r.seq = j.at("seq").get<int64_t>();
    r.accum = j.at("accum").get<int64_t>();
    r.world_size = j.contains("world_size") ? j.at("world_size").get<int64_t>() : 1;
    if (r.world_size < 1) throw Error(fmt::format("{}: world_size {} is not a number of processes", path, r.world_size));
    const nlohmann::json& c = j.at("counters");
    r.micro_steps = c.at("micro_steps").get<int64_t>();
    r.optimizer_steps = c.at("optimizer_steps").get<int64_t>();
    r.wall_ms = c.at("wall_ms").get<double>();
    r.compile_ms = c.at("compile_ms").get<double>();
    r.train_ms = c.at("train_ms").get<double>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not a milrt run record: {}", path, e.what()));
  }
}

void save_run_record(const std::string& dir, const RunRecord& r) {
  nlohmann::json j = {{"config", r.config},
                      {"precision", r.precision},
                      {"batch", r.batch},
                      {"seq", r.seq},
                      {"accum", r.accum},
                      {"world_size", r.world_size},
                      {"counters",
                       {{"micro_steps", r.micro_steps},
                        {"optimizer_steps", r.optimizer_steps},
                        {"wall_ms", r.wall_ms},
                        {"compile_ms", r.compile_ms},
                        {"train_ms", r.train_ms}}}};
  const std::string s = j.dump(2) + "\n";
  write_file_atomic(record_path(dir), s.data(), s.size());
}

void check_same_run(const RunRecord& have, const RunRecord& want, const std::string& dir) {
  auto differs = [&](const char* flag, const std::string& h, const std::string& w) {
    if (h != w)
      throw Error(fmt::format("train: {} was made with {} {}, not {}: resume it with the same {} (or start a new run "
                              "with --overwrite)",
                              dir, flag, h, w, flag));
  };
  differs("--config", have.config, want.config);
  differs("--precision", have.precision, want.precision);
  differs("--batch", std::to_string(have.batch), std::to_string(want.batch));
  differs("--seq", std::to_string(have.seq), std::to_string(want.seq));
  differs("--accum", std::to_string(have.accum), std::to_string(want.accum));
  if (have.world_size != want.world_size)
    throw Error(fmt::format("train: {} was trained by {} process{} (mpirun -np {}), not {}: resume it with the same "
                            "number of ranks (its data position and batch split depend on it)",
                            dir, have.world_size, have.world_size == 1 ? "" : "es", have.world_size, want.world_size));
}

}  // namespace milrt::llm
