// Lowering to the Neural Engine's dialect: the passes that keep a function
// as plain MIL ops, the one-input packing, and a standalone engine program
// (`program(1.3)`, `func main<ios18>`, one fp16 [1, C, 1, S] input, one fp16
// [1, C, 1, S] output) for a run of ops of a function.
//
// Packing (one input per request, docs): every operand gets its own block
// of channels at a shared S, a multiple of 32 (the row alignment the docs
// recommend until it is verified per chip). S is the largest last dim of
// the packed values rounded up to 32. Row layout (the normal case): a value
// whose last dim is L lies one row of L per channel, zero-padded to S, so a
// [1, C, 1, S] operand keeps its layout exactly and a [1, C, 1, L] one is a
// slice_by_size away from it. When the rows of all values would need more
// than 16384 channels, the values lie flat instead (n elements in
// ceil(n / S) channels, padded at the end of the block), S doubling until
// they fit. The docs' seeds pack along S instead; blocks of channels let
// operands of any shapes share one surface. Outputs are packed the same way
// and concatenated on C (the docs' convention), with their own S.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ane/validate.h"
#include "milrt/ir.h"
#include "milrt/tensor.h"

namespace milrt::ane {

// The passes run before partitioning, all producing plain MIL ops (the
// fusion passes make milrt-internal ops the engine would not know):
// legalize-layout-idioms, fold-constexpr (compressed weights become fp16/fp32
// constants), canonicalize, expand-masked-attention (the engine's fused
// attention ignores masks), decompose-all (rms_norm, silu, gelu ... into
// primitives, as the seeds expand them), cse, dce.
const std::vector<std::string>& ane_passes();
// A copy of `p` after ane_passes(), verified.
Program prepare_for_ane(const Program& p);

struct Packing {
  struct Slot {
    std::string name;
    Type type;             // the value's own dtype and shape
    int64_t channel = 0;   // first channel of its block
    int64_t channels = 0;  // rows: numel / row
    int64_t row = 0;       // elements per channel: the last dim (row layout) or S (flat)
  };
  int64_t S = 32, C = 1;
  std::vector<Slot> slots;
  Shape shape() const { return {1, C, 1, S}; }
  size_t bytes() const { return size_t(C * S) * 2; }  // fp16
};

// The packing of `values` (name, type) in order. Throws Error when they do
// not fit within max_dim channels at S <= max_dim.
Packing make_packing(const std::vector<std::pair<std::string, Type>>& values, int64_t max_dim = 16384);
// Values (each of its slot's dtype and shape, or convertible to it) into one
// fp16 [1, C, 1, S] tensor, rounding to fp16; padding is zero.
Tensor pack(const Packing& k, const std::vector<Tensor>& values);
// The inverse: each slot's value in its own dtype and shape.
std::vector<Tensor> unpack(const Packing& k, const Tensor& packed);
// One slot of a packed surface (k.C * k.S fp16 values) written or read on
// its own: what lets a state live in a block of a surface that other
// operands share, written and read without touching the rest.
void write_slot(const Packing& k, size_t slot, const Tensor& v, uint16_t* surface);
Tensor read_slot(const Packing& k, size_t slot, const uint16_t* surface);
// Where element j (row-major) of slot s's value lies in its packed surface.
inline int64_t slot_element(const Packing& k, const Packing::Slot& s, int64_t j) {
  return (s.channel + j / s.row) * k.S + j % s.row;
}
// Element j of v as fp16 bits: as stored when v is fp16, else rounded.
uint16_t fp16_bits(const Tensor& v, int64_t j);

// A lowered engine program: MIL text, its weight file and the packings.
struct EngineProgram {
  std::string mil;
  std::vector<uint8_t> weights;  // blob storage v2; empty when every constant is inline
  std::string weight_path = "@model_path/weights/weight.bin";
  Packing input, output;
};

// The values an op reads: its arguments' variables and, for control flow,
// what its blocks capture.
std::vector<std::string> op_reads(const Op& op);
// The `const` ops of f that ops `ops` (indices into f.ops) read, each once,
// in order of first read: what a step's own program copies in.
std::vector<Op> constants_read(const Function& f, const std::vector<size_t>& ops);

// Lowers ops `ops` (indices into f.ops, in order, none a `const`) of
// function `f` reading `inputs` (values defined outside the run) and
// producing `outputs` (values used after it). Constants the ops read are
// copied in; tensors of more than 16 elements go to the weight file, so the
// program's weights are fixed at compile time.
EngineProgram lower_engine_program(const Function& f, const std::vector<size_t>& ops,
                                   const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                                   int64_t max_dim = 16384);

}  // namespace milrt::ane
