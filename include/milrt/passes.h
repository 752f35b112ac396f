// Passes: functions from IR to IR, each small, named and tested on its own.
// A pipeline is a list of pass names; `milrt opt` runs one and prints the IR.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

struct PassInfo {
  std::string name;      // e.g. "dce"
  std::string summary;   // one line for `milrt opt --list`
  std::function<void(Program&)> run;
};

// Every pass milrt has, in the order of the default pipeline.
const std::vector<PassInfo>& all_passes();
const PassInfo* find_pass(const std::string& name);   // nullptr if unknown

// Runs the named passes in order, calling `after(pass_name, program)` after
// each. Throws Error for an unknown pass name. The program must verify before
// and verifies after every pass (a pass that breaks typing is a bug, reported
// with the pass's name).
void run_passes(Program& p, const std::vector<std::string>& names,
                const std::function<void(const std::string&, const Program&)>& after = {});

}  // namespace milrt
