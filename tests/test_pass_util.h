// Helpers for the pass tests: programs from text in both dialects, op
// listings, random inputs, bit-exact output comparison, and the corpora every
// pass is run over (the Core ML bundles in ../shared/testdata and the first
// seed's programs with generated weights).
#pragma once
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "milrt/passes.h"
#include "support/test_util.h"

namespace milrt::test::pass {

inline Program parse_verified(const std::string& text) {
  Program p = parse_mil(text, "t.mil", ".");
  legalize_layout_idioms(p);
  verify(p);
  return p;
}

// `func main<ios16>(PARAMS) { BODY } -> (OUTS)` in the program 1.0 dialect.
inline Program parse16(const std::string& params, const std::string& body, const std::string& outs) {
  return parse_verified("program(1.0)\n{\n    func main<ios16>(" + params + ") {\n" + body + "\n    } -> (" + outs +
                        ");\n}\n");
}

// `func main<ios18>(PARAMS) { BODY } -> (OUTS)` in the program 1.3 dialect.
inline Program parse18(const std::string& params, const std::string& body, const std::string& outs) {
  return parse_verified("program(1.3)\n{\n    func main<ios18>(" + params + ") {\n" + body + "\n    } -> (" + outs +
                        ");\n}\n");
}

// The op types of the first function, in order, consts included.
inline std::vector<std::string> op_types(const Program& p) {
  std::vector<std::string> r;
  for (const Op& op : p.functions.at(0).ops) r.push_back(op.type);
  return r;
}

inline int total_ops(const Program& p) {
  int n = 0;
  for (const Function& f : p.functions) n += int(f.ops.size());
  return n;
}

// How many ops of each type the program has.
inline std::map<std::string, int> op_counts(const Program& p) {
  std::map<std::string, int> r;
  for (const Function& f : p.functions)
    for (const Op& op : f.ops) ++r[op.type];
  return r;
}

// The op of the first function that defines value `v`, or nullptr.
inline const Op* producer(const Program& p, const std::string& v) {
  for (const Op& op : p.functions.at(0).ops)
    for (const Output& o : op.outputs)
      if (o.name == v) return &op;
  return nullptr;
}

// Random values for every parameter of `f` ('?' dims taken as 2): floats
// uniform in [-1, 1], integers in [-5, 5], bools 0/1.
inline TensorMap inputs_for(const Function& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  TensorMap in;
  for (const Param& prm : f.params) {
    Shape s = prm.type.shape;
    for (int64_t& d : s)
      if (d < 0) d = 2;
    Tensor t(prm.type.dtype, s);
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v = u(rng);
      if (prm.type.dtype == DType::Bool) v = v > 0;
      else if (!dtype_is_float(prm.type.dtype)) v = std::round(5 * v);
      t.set(size_t(i), v);
    }
    in[prm.name] = t;
  }
  return in;
}

// `after` computes exactly (bit for bit) what `before` computes, on
// `trials` sets of random inputs.
inline void expect_same_outputs(const Program& before, const Program& after, int trials = 3) {
  for (int k = 0; k < trials; ++k) {
    TensorMap in = inputs_for(before.functions.at(0), uint64_t(k + 1));
    TensorMap want = run_reference(before, before.functions.at(0).name, in);
    TensorMap got = run_reference(after, after.functions.at(0).name, in);
    ASSERT_EQ(want.size(), got.size());
    for (const auto& [name, w] : want) {
      ASSERT_TRUE(got.count(name)) << "output '" << name << "' is missing";
      EXPECT_TRUE(got.at(name).same_bytes(w)) << "output '" << name << "' differs (trial " << k << ")";
    }
  }
}

struct CorpusProgram {
  std::string name;  // e.g. "silero-vad/unified_int8", "seed1/rms_q8_swiglu"
  Program program;   // legalized and verified
};

// Every Core ML bundle under ../shared/testdata/coreml (empty without it).
inline const std::vector<CorpusProgram>& shared_corpus() {
  static const std::vector<CorpusProgram> corpus = [] {
    namespace fs = std::filesystem;
    std::vector<CorpusProgram> r;
    if (shared_dir().empty()) return r;
    fs::path root = fs::path(shared_dir()) / "testdata" / "coreml";
    std::vector<fs::path> bundles;
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_directory() && e.path().extension() == ".mlmodelc") bundles.push_back(e.path());
    std::sort(bundles.begin(), bundles.end());
    for (const fs::path& b : bundles) {
      Program p = load_model(b.string());
      legalize_layout_idioms(p);
      verify(p);
      r.push_back({fs::relative(b, root).replace_extension().generic_string(), std::move(p)});
    }
    return r;
  }();
  return corpus;
}

// The first seed's programs with weights generated here: each blob the
// program names is written as a raw array of random values ([-0.2, 0.2],
// integers in [-99, 99]).
inline const std::vector<CorpusProgram>& seed_corpus() {
  static const std::vector<CorpusProgram> corpus = [] {
    namespace fs = std::filesystem;
    std::vector<CorpusProgram> r;
    fs::path src = fs::path(MILRT_SOURCE_DIR) / "tests" / "data" / "seed1";
    std::vector<fs::path> mils;
    for (const auto& e : fs::directory_iterator(src))
      if (e.path().extension() == ".mil") mils.push_back(e.path());
    std::sort(mils.begin(), mils.end());
    std::mt19937_64 rng(7);
    for (const fs::path& m : mils) {
      fs::path dir = temp_dir("pass_seed1");
      fs::copy_file(m, dir / m.filename());
      std::ifstream in(dir / m.filename());
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      Program parsed = parse_mil(text, (dir / m.filename()).string(), dir.string());
      for (const Function& f : parsed.functions)
        for (const Op& op : f.ops)
          for (const Input& input : op.inputs) {
            const Arg& a = input.arg;
            if (a.kind != Arg::Kind::Const || a.lit->blob_path.empty()) continue;
            bool ints = dtype_is_int(a.lit->type.dtype);
            std::uniform_real_distribution<double> u(ints ? -99 : -0.2, ints ? 99 : 0.2);
            Tensor t(a.lit->type.dtype, a.lit->type.shape);
            for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), ints ? std::round(u(rng)) : u(rng));
            std::ofstream out(dir / a.lit->blob_path, std::ios::binary);
            out.write(static_cast<const char*>(t.data()), std::streamsize(t.nbytes()));
          }
      Program p = load_model((dir / m.filename()).string());
      legalize_layout_idioms(p);
      verify(p);
      r.push_back({"seed1/" + m.stem().string(), std::move(p)});
    }
    return r;
  }();
  return corpus;
}

// Runs `passes` over a copy of every program of `corpus`, calls
// `check(name, before, after)` and expects the outputs to stay bit-identical.
inline void expect_preserved(const std::vector<CorpusProgram>& corpus, const std::vector<std::string>& passes,
                             const std::function<void(const std::string&, const Program&, const Program&)>& check) {
  for (const CorpusProgram& c : corpus) {
    SCOPED_TRACE(c.name);
    Program after = c.program;
    run_passes(after, passes);
    check(c.name, c.program, after);
    expect_same_outputs(c.program, after, 1);
  }
}

}  // namespace milrt::test::pass
