// Writes the binary seed corpora under fuzz/corpus/ (the MIL texts there are
// written by hand). Run once after changing a format, then commit the files:
//   cmake --build build-fuzz --target make_seeds && build-fuzz/make_seeds fuzz/corpus
// Each seed is a small valid file of its format, or one with a fault the
// reader must name, so the fuzzers start on every branch of the readers.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "llm/checkpoint.h"
#include "milrt/blob.h"
#include "milrt/npy.h"

namespace fs = std::filesystem;
using milrt::DType;
using milrt::Tensor;

namespace {
std::string root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
  fs::create_directories(root + "/" + target);
  milrt::write_file_atomic(root + "/" + target + "/" + name, bytes);
}

std::string slurp(const std::string& path) {
  std::string s;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  for (int c; (c = std::fgetc(f)) != EOF;) s += char(c);
  std::fclose(f);
  return s;
}

Tensor iota(DType t, milrt::Shape shape, double scale = 1.0) {
  Tensor x(t, std::move(shape));
  for (int64_t i = 0; i < x.numel(); ++i) milrt::store_from_double(x.mutable_data(), t, size_t(i), double(i + 1) * scale);
  return x;
}

template <class T> std::string pod(T v) { return std::string(reinterpret_cast<const char*>(&v), sizeof v); }

void npy_seeds() {
  put("npy", "fp32_2x3.npy", milrt::serialize_npy(iota(DType::FP32, {2, 3}, 0.5)));
  put("npy", "int64_scalar.npy", milrt::serialize_npy(iota(DType::Int64, {})));
  put("npy", "bool_4.npy", milrt::serialize_npy(iota(DType::Bool, {4})));
  put("npy", "fp16_empty.npy", milrt::serialize_npy(Tensor(DType::FP16, {0, 3})));
  put("npy", "uint8_2x2x2.npy", milrt::serialize_npy(iota(DType::UInt8, {2, 2, 2})));
  // Format 2.0 (a 4-byte header length) by hand.
  std::string v1 = milrt::serialize_npy(iota(DType::Int16, {3}));
  std::string v2 = v1.substr(0, 6) + "\x02" + std::string(1, '\0') + v1.substr(8, 2) + std::string(2, '\0') + v1.substr(10);
  put("npy", "int16_v2.npy", v2);
  std::string bad = "\x93NUMPY\x01" + std::string(1, '\0') + "F" + std::string(1, '\0') +
                    "{'descr': '>f4', 'fortran_order': True, 'shape': (2L, 1,), }\n";
  put("npy", "bigendian_fortran.npy", bad);
}

// A fuzz_blob input: dtype, rank, dims, offset, then the file.
std::string blob_input(DType t, const milrt::Shape& shape, uint16_t offset, const std::string& file) {
  std::string s(1, char(t));
  s += char(shape.size());
  for (int64_t d : shape) s += char(d);
  s += char(offset & 0xff);
  s += char(offset >> 8);
  return s + file;
}

void blob_seeds() {
  milrt::BlobWriter w;
  uint64_t a = w.add(iota(DType::FP16, {4}));
  uint64_t b = w.add(iota(DType::UInt4, {2, 3}));
  uint64_t c = w.add(iota(DType::Int8, {5}));
  uint64_t d = w.add(iota(DType::UInt3, {5}));
  std::string file(w.bytes().begin(), w.bytes().end());
  put("blob", "v2_fp16.bin", blob_input(DType::FP16, {4}, uint16_t(a), file));
  put("blob", "v2_uint4.bin", blob_input(DType::UInt4, {2, 3}, uint16_t(b), file));
  put("blob", "v2_int8_as_uint8.bin", blob_input(DType::UInt8, {5}, uint16_t(c), file));
  put("blob", "v2_uint3_padded.bin", blob_input(DType::UInt3, {5}, uint16_t(d), file));
  Tensor raw = iota(DType::FP32, {3});
  std::string raw_bytes(static_cast<const char*>(raw.data()), raw.nbytes());
  put("blob", "raw_fp32_at_4.bin", blob_input(DType::FP32, {3}, 4, "pad." + raw_bytes));
  put("blob", "raw_int4_odd.bin", blob_input(DType::Int4, {3}, 0, "\x9f\x07"));
}

void checkpoint_seeds(const std::string& dir) {
  milrt::llm::LlamaConfig c;
  c.dim = 8, c.hidden = 16, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.vocab = 8, c.seq = 4;
  for (int version : {0, 1})
    for (bool shared : {true, false}) {
      c.shared_classifier = shared;
      std::string path = dir + "/ck.bin";
      milrt::llm::save_llama2c_checkpoint(path, milrt::llm::init_llama_weights(c, 7), version);
      put("llama2c_checkpoint", "v" + std::to_string(version) + (shared ? "_shared" : "_wcls") + ".bin", slurp(path));
    }
}

// tokenizer.bin: max_token_length, then (score, length, bytes) per token.
void tokenizer_seeds() {
  auto record = [](float score, const std::string& piece) { return pod(score) + pod(uint32_t(piece.size())) + piece; };
  std::string base = record(0, "<unk>") + record(0, "\n<s>\n") + record(0, "\n</s>\n");
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    base += record(0, piece);
  }
  std::string bpe;
  for (auto [score, piece] : {std::pair{-1.0f, " "}, {-2.0f, "t"}, {-3.0f, "h"}, {-4.0f, "e"}, {-5.0f, "th"},
                              {-6.0f, "he"}, {-7.0f, "the"}, {-8.0f, " t"}, {-9.0f, " the"}, {-10.0f, "\xc3\xa9"},
                              {-1e11f, "ee"}, {-11.0f, "th"}}) {
    bpe += record(score, piece);
  }
  put("tokenizer", "bytes_only.bin", pod(uint32_t(6)) + base);
  put("tokenizer", "bpe.bin", pod(uint32_t(6)) + base + bpe);
}

void state_seeds(const std::string& dir) {
  milrt::llm::TrainState s;
  s.step = 7;
  s.m.emplace("a", iota(DType::FP32, {2, 3}, 0.25));
  s.v.emplace("a", iota(DType::FP32, {2, 3}, 0.125));
  s.m.emplace("gain", iota(DType::FP32, {4}));
  s.v.emplace("gain", iota(DType::FP32, {4}, 2.0));
  s.extra = {'r', 'n', 'g', 0, 1};
  std::string path = dir + "/ts.bin";
  milrt::llm::save_train_state(path, s);
  put("train_state", "two_tensors.bin", slurp(path));
  milrt::llm::save_train_state(path, milrt::llm::TrainState{});
  put("train_state", "empty.bin", slurp(path));

  milrt::TensorMap t;
  t.emplace("l0_w", iota(DType::FP32, {3, 2}, -0.5));
  t.emplace("l0_gain", iota(DType::FP32, {2}));
  t.emplace("scalar", iota(DType::FP32, {}));
  milrt::llm::save_tensor_file(path, t);
  put("tensor_file", "three_tensors.bin", slurp(path));
  milrt::llm::save_tensor_file(path, {});
  put("tensor_file", "empty.bin", slurp(path));
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR\n");
    return 2;
  }
  root = argv[1];
  std::string scratch = (fs::temp_directory_path() / "milrt-make-seeds").string();
  fs::create_directories(scratch);
  npy_seeds();
  blob_seeds();
  checkpoint_seeds(scratch);
  tokenizer_seeds();
  state_seeds(scratch);
  fs::remove_all(scratch);
  return 0;
}
