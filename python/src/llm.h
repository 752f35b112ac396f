// milrt.llm (python/milrt/llm.py): training and generation of llama2.c-format
// models, bound as the submodule milrt._milrt.llm.
#pragma once
#include <pybind11/pybind11.h>

namespace milrt::py {

void bind_llm(pybind11::module_& m);

}  // namespace milrt::py
