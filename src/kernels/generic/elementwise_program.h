// A fused elementwise kernel: a straight-line register-machine program run
// over blocks of fp32 elements of inputs broadcast together (NumPy rules).
// It knows nothing of MIL: a caller hands it instructions in SSA form (value
// i is defined by instruction i), the inputs' shapes and the output's shape.
//
// make_program() does all the planning once: register allocation (a buffer
// per live value, reused once the value is dead; contiguous inputs are read
// in place, broadcast ones splatted), the strides of every input and the
// merging of dims into the longest runs the broadcast allows. run() then
// walks the innermost contiguous run of the output in blocks of kEwBlock
// elements, executing the instructions block by block, so each value stays
// in L1 between instructions and every instruction is a simple loop the
// compiler vectorizes.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/generic/elementwise.h"

namespace milrt::kernels {

constexpr int kEwBlock = 256;

struct EwInstr {
  enum class Code : uint8_t { Input, Const, Binary, Unary };
  Code code = Code::Const;
  int input = -1;           // Input: which input
  float value = 0;          // Const
  Binary binary = Binary::Add;
  Unary unary = Unary::Abs;
  float alpha = 0, beta = 0, epsilon = 0;   // Unary parameters (see unary_f32)
  int a = -1, b = -1;       // operands: indices of earlier instructions

  static EwInstr of_input(int k) { EwInstr i; i.code = Code::Input; i.input = k; return i; }
  static EwInstr of_const(float v) { EwInstr i; i.code = Code::Const; i.value = v; return i; }
  static EwInstr of_binary(Binary op, int a, int b) { EwInstr i; i.code = Code::Binary; i.binary = op; i.a = a; i.b = b; return i; }
  static EwInstr of_unary(Unary op, int a, float alpha = 0, float beta = 0, float eps = 0) {
    EwInstr i; i.code = Code::Unary; i.unary = op; i.a = a; i.alpha = alpha; i.beta = beta; i.epsilon = eps; return i;
  }
};

struct EwProgram {
  struct Slot {                  // one instruction after register allocation
    EwInstr instr;
    int reg = -1;                // buffer it writes (-1: reads an input in place / the output)
  };
  std::vector<Slot> code;
  int num_regs = 0;
  int num_inputs = 0;
  // The iteration space after merging dims: dims[0..rank) of the output, per
  // input the element stride along each (0 where broadcast); the last dim is
  // the contiguous run (each input's stride there is 0 or 1).
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  std::vector<std::vector<int64_t>> strides;
  int64_t numel = 0;
  // Every computed value rounded to fp16 (CompileOptions::numerics fp16):
  // each instruction rounds as the MIL op it stands for would on fp16 values.
  bool round_f16 = false;

  // Floats of scratch memory run() needs.
  int64_t scratch_floats() const { return int64_t(num_regs) * kEwBlock; }
};

// Plans `instrs` (the last one's value is the result) over inputs of the given
// shapes broadcast to `out_shape`. Throws milrt::Error on a malformed program
// (operand not defined before use, input index out of range, rank above
// kMaxRank, shapes that do not broadcast to out_shape).
EwProgram make_program(const std::vector<EwInstr>& instrs, const std::vector<std::vector<int64_t>>& input_shapes,
                       const std::vector<int64_t>& out_shape);

// out = program(inputs); `scratch` holds scratch_floats() floats, 64-byte
// aligned preferably. `out` must not alias an input.
void run_program(const EwProgram& p, const float* const* inputs, float* out, float* scratch);

}  // namespace milrt::kernels
