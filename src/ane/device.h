// The Neural Engine as the runtime sees it: a table of plain C function
// pointers. Everything above this table (lowering, partitioning, buffers,
// the compile budget) is portable C++ tested on any machine; what fills the
// table is either the private framework on macOS (ane_private.mm) or the
// simulated device (sim_device.h), which enforces the engine's documented
// limits and evaluates programs with the reference executor.
//
// The calls follow the only sequence known to work (docs: the Neural Engine
// notes in the shared material, after maderix/ANE's bridge): compile MIL
// text with its weight files held in memory, load, then per request write
// the one input, evaluate, read the outputs. Tensors cross the boundary as
// flat byte buffers in the engine's layout ([1,C,1,S] fp16, channel-major);
// the table never interprets them.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// One weight file a program's BLOBFILE literals name, e.g.
// {"@model_path/weights/weight.bin", bytes, size}. The bytes must outlive
// the compile call only.
typedef struct milrt_ane_weight_file {
  const char* mil_path;
  const void* data;
  size_t size;
} milrt_ane_weight_file;

// A compiled and loaded program. Opaque to the runtime.
typedef struct milrt_ane_program milrt_ane_program;
// A buffer the caller and the engine share (an IOSurface on the chip),
// independent of any program: it outlives unloads, so a program's state
// (a KV cache) survives eviction and recompilation. Opaque to the runtime.
typedef struct milrt_ane_surface milrt_ane_surface;

// Every call returns 0 on success; otherwise non-zero, with a one-line
// message (NUL-terminated, truncated to `error_size`) in `error`.
typedef struct milrt_ane_device {
  // Short name for messages: "ane" (the chip) or "ane-sim".
  const char* name;
  void* context;  // passed back as the first argument of every call

  // Compiles and loads `mil_text` (UTF-8, `mil_size` bytes). `input_bytes`:
  // the byte size of each input surface (the engine accepts one);
  // `output_bytes`: one per function output, in order. On success stores
  // the program in `*program`. Counts against the process's compile budget
  // (compile_count) also when it fails.
  int (*compile)(void* context, const char* mil_text, size_t mil_size, const milrt_ane_weight_file* weights,
                 size_t n_weights, const size_t* input_bytes, size_t n_inputs, const size_t* output_bytes,
                 size_t n_outputs, milrt_ane_program** program, char* error, size_t error_size);
  // Copies `size` bytes (exactly the declared input size) into input `index`.
  int (*write_input)(void* context, milrt_ane_program* program, size_t index, const void* data, size_t size,
                     char* error, size_t error_size);
  // Runs the program synchronously on the inputs last written.
  int (*evaluate)(void* context, milrt_ane_program* program, char* error, size_t error_size);
  // Copies output `index` (exactly its declared size) of the last evaluation.
  int (*read_output)(void* context, milrt_ane_program* program, size_t index, void* data, size_t size, char* error,
                     size_t error_size);
  // Unloads and frees a program. Never fails; null is ignored.
  void (*unload)(void* context, milrt_ane_program* program);
  // Compiles attempted so far in this process (the engine's compiler leaks:
  // about 119 succeed before it refuses).
  size_t (*compile_count)(void* context);

  // Optional (null when the device cannot share memory; the runtime then
  // copies every input with write_input). The first seed binds surfaces the
  // same way (IOSurface adoption) to keep its KV cache in place.
  // Allocates a zeroed surface of `size` bytes; `*data` is its memory, which
  // the caller may read and write between evaluations.
  int (*create_surface)(void* context, size_t size, milrt_ane_surface** surface, void** data, char* error,
                        size_t error_size);
  // Frees a surface; null is ignored. A program still bound to it fails its
  // next evaluate.
  void (*free_surface)(void* context, milrt_ane_surface* surface);
  // Makes `surface` (exactly the declared input size) input `index` of
  // `program`: evaluate reads it where it lies, with no write_input. Lasts
  // until the program is unloaded.
  int (*bind_input)(void* context, milrt_ane_program* program, size_t index, milrt_ane_surface* surface,
                    char* error, size_t error_size);
} milrt_ane_device;

#ifdef __cplusplus
}
#endif
