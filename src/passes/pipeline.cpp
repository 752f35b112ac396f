#include "ir/control_flow.h"
#include "milrt/error.h"
#include "milrt/mil.h"
#include "milrt/passes.h"
#include "passes/pass_registry.h"

namespace milrt {

namespace {
// Every pass sees an op with blocks (control flow) as an opaque op that reads
// the outer values its blocks capture (ir/control_flow.h): uses inside blocks
// count, and nothing is moved, merged or fused across a block's boundary.
// The blocks themselves are optimized when a plan compiles each of them.
std::vector<PassInfo> opaque_control_flow(std::vector<PassInfo> passes) {
  for (PassInfo& p : passes)
    p.run = [run = std::move(p.run)](Program& prog) { with_captures_exposed(prog, run); };
  return passes;
}
}  // namespace

const std::vector<PassInfo>& all_passes() {
  static const std::vector<PassInfo> passes = opaque_control_flow({
      {"legalize-layout-idioms", "make the Neural Engine's size-1 layout idioms explicit reshapes",
       passes::legalize_layout_idioms},
      {"fuse-quantized-weights", "matmul/linear of a block-quantized int8 weight into milrt_gemm reading the int8 "
                                 "data and scales (before fold-constexpr expands them)",
       passes::fuse_quantized_weights},
      {"fold-constexpr", "decompress constexpr weights and fold small data movement of constants into consts",
       passes::fold_constexpr},
      {"cse", "merge ops that compute the same values (same type, inputs and output types)", passes::cse},
      {"dce", "remove ops whose results reach no function output", passes::dce},
      {"canonicalize", "linear and 1x1 conv to matmul; squeeze/expand_dims to reshape; merge reshape/transpose chains",
       passes::canonicalize},
      {"decompose", "expand composite activations and norms, and the ops with no kernel (stack, shape, reverse, batch_norm, ...), into ops that have one",
       passes::decompose},
      {"decompose-all", "expand rms_norm, layer_norm, silu, gelu, softplus, sigmoid_hard, relu6, leaky_relu into "
                        "primitives (for backends without their kernels)",
       passes::decompose_all},
      {"expand-masked-attention", "scaled_dot_product_attention with attn_mask into Q·Kᵀ, scale, + mask, softmax, ·V "
                                  "(the Neural Engine ignores the fused op's mask)",
       passes::expand_masked_attention},
      {"sink-reshapes", "move reshapes below elementwise ops so fusion sees whole chains", passes::sink_reshapes},
      {"fold-scatter-add", "add(a, scatter-add into zeros) into a scatter-add into a (the gradient of a gather with other "
                           "uses), run in place; add(a, scatter-add into d) into a scatter-add into add(a, d)",
       passes::fold_scatter_add},
      {"fuse-attention", "Q·Kᵀ → scale → mask → softmax → ·V (and scaled_dot_product_attention) into milrt_attention; "
                         "softmax with its scale and mask into milrt_softmax",
       passes::fuse_attention},
      {"fuse-norms", "the RMSNorm idiom (x·x → reduce → scale → +eps → rsqrt → ·x → ·gamma) into milrt_rms_norm",
       passes::fuse_norms},
      {"fuse-gemm-epilogue", "matmul/linear with bias, activation, residual add and scale into milrt_gemm",
       passes::fuse_gemm_epilogue},
      {"fuse-conv-epilogue", "conv with its bias and activation (relu, clip, sigmoid, silu) into milrt_conv",
       passes::fuse_conv_epilogue},
      {"fuse-conv-chain", "chains of 1x1 convs with their epilogues into one milrt_conv_chain, computed in cache-sized "
                          "tiles (runs before canonicalize, which makes 1x1 convs matmuls)", passes::fuse_conv_chain},
      {"fuse-elementwise", "chains of elementwise ops into one milrt_elementwise loop", passes::fuse_elementwise},
      {"schedule", "order ops for execution: topological, each op as late as its first consumer allows",
       passes::schedule},
  });
  return passes;
}

const PassInfo* find_pass(const std::string& name) {
  for (auto& p : all_passes())
    if (p.name == name) return &p;
  return nullptr;
}

void run_passes(Program& p, const std::vector<std::string>& names,
                const std::function<void(const std::string&, const Program&)>& after) {
  std::vector<const PassInfo*> todo;
  for (auto& n : names) {
    const PassInfo* pass = find_pass(n);
    if (!pass) throw Error("error: unknown pass '" + n + "' (see `milrt opt --list`)");
    todo.push_back(pass);
  }
  for (auto* pass : todo) {
    pass->run(p);
    try {
      verify(p);
    } catch (const Error& e) {
      throw Error("error: pass '" + pass->name + "' produced invalid IR: " + e.what());
    }
    if (after) after(pass->name, p);
  }
}

}  // namespace milrt
