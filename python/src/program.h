// milrt.Program: a loaded model, immutable from Python.
#pragma once
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt::py {

struct ProgramHandle {
  std::shared_ptr<const Program> loaded;   // as read: what str() prints
  // Loaded, with the Neural Engine layout idioms made explicit, verified:
  // what compile() and the reference executor take. Made on first use.
  std::shared_ptr<const Program> checked;
  std::vector<std::string> notes;          // legalize's and verify's

  const Program& checked_program();
  const Function& function(const std::string& name) const;
};

void bind_program(pybind11::module_& m);
void bind_description(pybind11::module_& m);

}  // namespace milrt::py
