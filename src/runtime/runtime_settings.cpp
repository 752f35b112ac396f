// milrt/runtime.h: the public names of the kernels' process-wide settings.
#include "milrt/runtime.h"

#include "kernels/cpu_features.h"
#include "kernels/gemm_backend.h"
#include "kernels/threads.h"
#include "milrt/error.h"

namespace milrt {

void set_threads(int n) { kernels::set_num_threads(n); }
int threads() { return kernels::num_threads(); }

void set_isa(const std::string& name) {
  if (name.empty()) return kernels::set_isa(std::nullopt);
  const auto isa = kernels::isa_from_name(name);
  if (!isa) throw Error("unknown kernel path '" + name + "' (expected generic, avx2, avx512 or amx)");
  kernels::set_isa(*isa);
}

std::string isa() { return std::string(kernels::isa_name(kernels::current_isa())); }

std::vector<std::string> usable_isas() {
  std::vector<std::string> r;
  for (kernels::Isa i : kernels::usable_isas()) r.emplace_back(kernels::isa_name(i));
  return r;
}

void set_gemm_backend(const std::string& name) {
  using kernels::GemmBackendMode;
  if (name.empty()) return kernels::set_gemm_backend_mode(std::nullopt);
  if (name == "own") return kernels::set_gemm_backend_mode(GemmBackendMode::own);
  if (name == "onednn") return kernels::set_gemm_backend_mode(GemmBackendMode::onednn);
  if (name == "auto") return kernels::set_gemm_backend_mode(GemmBackendMode::auto_);
  throw Error("unknown GEMM backend '" + name + "' (expected own, onednn or auto)");
}

std::string gemm_backend() {
  switch (kernels::gemm_backend_mode()) {
    case kernels::GemmBackendMode::own: return "own";
    case kernels::GemmBackendMode::onednn: return "onednn";
    case kernels::GemmBackendMode::auto_: break;
  }
  return "auto";
}

}  // namespace milrt
