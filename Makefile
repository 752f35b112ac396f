# The two commands of the README. Both install missing Debian build
# dependencies first (as root with apt-get; otherwise they print the line).
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= $(shell nproc)
DEBS := cmake ninja-build g++ clang libgtest-dev libfmt-dev libcli11-dev nlohmann-json3-dev python3-numpy libdnnl-dev pkg-config libprotobuf-dev protobuf-compiler libopenmpi-dev openmpi-bin
# clang: the Objective-C++ syntax check (AneObjcSyntax) and `make fuzz`; only the fuzzers need its libFuzzer/sanitizer runtime.
FUZZ_DEBS := clang libclang-rt-14-dev
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_JOBS ?= $(JOBS)

.PHONY: run example test build build-cli deps test-asan test-install test-python fuzz cross-aarch64 clean

# The main job: train the default model on the embedded corpus (the license
# texts under /usr/share/common-licenses), then print samples from it.
run: build-cli
	OMP_WAIT_POLICY=passive $(BUILD)/milrt train --out $(BUILD)/train-default --overwrite

# Build a quantized Core ML bundle with the IR builder, run it, compare with plain C++.
example: build
	./examples/run_example.sh $(BUILD)/milrt

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-install
	$(MAKE) test-python
	$(MAKE) test-asan
	$(MAKE) fuzz

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# Only the CLI and the libraries it links (what `make run` needs): a third of
# the full build's targets, which are mostly tests.
build-cli: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD) -j$(JOBS) --target milrt_cli

# The library as a program outside this tree sees it: install into a scratch
# prefix, build examples/embed against it with find_package(milrt), run it,
# then build the same file with `pkg-config --cflags --libs milrt` and run it.
INSTALL_PREFIX ?= $(BUILD)/install-prefix
test-install: build
	rm -rf $(INSTALL_PREFIX) $(BUILD)/embed
	cmake --install $(BUILD) --prefix $(abspath $(INSTALL_PREFIX)) >/dev/null
	cmake -S examples/embed -B $(BUILD)/embed -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_PREFIX_PATH=$(abspath $(INSTALL_PREFIX)) >/dev/null
	cmake --build $(BUILD)/embed
	$(BUILD)/embed/embed
	pc=$$(dirname $$(find $(INSTALL_PREFIX) -name milrt.pc)); \
	  $(CXX) -std=c++20 -O1 examples/embed/embed.cpp $$(PKG_CONFIG_PATH=$$pc pkg-config --cflags --libs milrt) \
	  -o $(BUILD)/embed/embed-pkgconfig
	$(BUILD)/embed/embed-pkgconfig

# The Python package (pyproject.toml, python/) as a user installs it: pip
# builds it with scikit-build-core into a virtual environment under $(BUILD),
# then its pytest suite runs. The build directory persists (a rebuild
# recompiles only what changed); the build tools go into the environment
# first, so pip needs no isolated one. Needs Debian's python3-dev and python3-venv.
PY_DEBS := python3-dev python3-venv
PYTHON ?= /usr/bin/python3
PY_VENV ?= $(BUILD)/python-venv
PY_BUILD ?= $(BUILD)/python-build
test-python: deps
	@$(MAKE) --no-print-directory deps DEBS="$(PY_DEBS)"
	test -x $(PY_VENV)/bin/python || $(PYTHON) -m venv $(PY_VENV)
	$(PY_VENV)/bin/pip install -q "pybind11>=3" "scikit-build-core>=0.10" numpy pytest
	$(PY_VENV)/bin/pip install -q --no-build-isolation --config-settings=build-dir=$(abspath $(PY_BUILD)) .
	$(PY_VENV)/bin/python -m pytest -p no:cacheprovider -q -rs python/tests

# The tests that exercise memory-sensitive code once more under
# AddressSanitizer + UndefinedBehaviorSanitizer: the readers of untrusted
# files, the IR and its passes, the runtime's buffers, plans and states, every
# kernel, checkpoints, data and tokenizers, the CLI's bad-input and hostile-
# bundle tests, decoding and training end to end once each. At -O1 (about
# three times faster than -O0 and still exact stack traces) with -g1 (line
# tables, all a sanitizer's stack trace prints: a third less compile time than
# -g). The sanitizer build was two thirds of `make test`'s time; left out of
# it (ASAN_SKIP_TESTS, not built) are the suites whose code the kept ones
# already run: the benchmark, profiler, tuning and settings tests, the model-
# scale decoding sweeps per weight format, the trainer's fp16 and seed-layer
# variants, the gradient rules' finite differences (IR and the reference
# executor, no buffers of their own), the Neural Engine simulator and the seed's
# training through it, the MPI runs (Open MPI's own allocations would read as
# leaks). Left out at run time
# (ASAN_EXCLUDE): the whole-model sweeps inside kept suites. The benchmark
# programs and the example, which no test runs, are not built.
# The libraries are shared (MILRT_LIBRARY_TYPE=SHARED): linked statically,
# every test program carried its own copy of the instrumented library, and
# the build took 7.1 GB of disk.
ASAN_SKIP_TESTS := test_bench_kernels test_profile test_gemm_tuning test_runtime_settings \
  test_generate_weights test_generate_int4 test_generate_int8_activations \
  test_trainer_fp16 test_seed_layer_training test_mpi_train \
  test_autodiff test_autodiff_elementwise test_autodiff_linalg test_autodiff_nn test_autodiff_tensor \
  test_autodiff_seed test_llama_builder test_ane_cli test_ane_partition test_ane_sim_device test_ane_seed_training
ASAN_EXCLUDE := GenerateParity\.Stories15m
empty :=
space := $(empty) $(empty)
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DMILRT_SANITIZE=ON \
	  -DMILRT_BUILD_BENCHMARKS=OFF -DMILRT_BUILD_EXAMPLES=OFF -DMILRT_INSTALL=OFF \
	  -DMILRT_LIBRARY_TYPE=SHARED -DMILRT_TESTS_SKIP="$(subst $(space),;,$(strip $(ASAN_SKIP_TESTS)))" >/dev/null
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j$(JOBS) -E '$(ASAN_EXCLUDE)'

# libFuzzer targets for the front ends (fuzz/): built with clang against
# only the reader sources, each run FUZZ_SECONDS from its seed corpus
# (fuzz/corpus/, copied: the committed corpus is never modified), FUZZ_JOBS
# at a time; any crash, sanitizer report, leak, hang or huge allocation fails.
fuzz: deps
	@$(MAKE) --no-print-directory deps DEBS="$(FUZZ_DEBS)"
	CXX=clang++ cmake -S fuzz -B $(FUZZ_BUILD) -G Ninja >/dev/null
	cmake --build $(FUZZ_BUILD) -j$(JOBS)
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_JOBS)

# AArch64, by hand (not part of `make test`: it would add ~15 minutes to CI):
# cross-compile the library, the CLI and the portable kernels' test suites
# with Debian's aarch64 compiler, then run the suites and a Silero chunk
# under qemu-user against the x86 build's reference executor. One thread:
# qemu-user 7.2 in some sandboxes never returns from pthread_create (a plain
# std::thread program hangs the same way), so the filter leaves out the
# tests that start threads.
ARM_BUILD ?= build-aarch64
ARM_DEBS := g++-aarch64-linux-gnu qemu-user libfmt-dev:arm64 libgtest-dev:arm64 libprotobuf-dev:arm64
ARM_TESTS ?= test_gemm test_weight_gemm test_elementwise test_parser test_coreml_models
ARM_FILTER ?= -*Thread*:*thread*:*Parallel*:WeightGemm.RepeatedCallDoesNotAllocate
QEMU_ARM := qemu-aarch64 -L /usr/aarch64-linux-gnu
cross-aarch64: build
	@missing=$$(for p in $(ARM_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" != 0 ]; then echo "run as root, or: sudo dpkg --add-architecture arm64 && sudo apt-get install -y $$missing"; exit 1; fi; \
	  dpkg --add-architecture arm64 && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	cmake -S . -B $(ARM_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake >/dev/null
	cmake --build $(ARM_BUILD) -j$(JOBS) --target milrt_cli $(ARM_TESTS)
	for t in $(ARM_TESTS); do \
	  MILRT_THREADS=1 OMP_NUM_THREADS=1 MILRT_TUNE=off $(QEMU_ARM) $(ARM_BUILD)/$$t --gtest_brief=1 --gtest_filter='$(ARM_FILTER)' || exit 1; \
	done
	./tools/check_aarch64_silero.sh $(BUILD)/milrt "$(QEMU_ARM) $(ARM_BUILD)/milrt"

deps:
	@missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages; run: sudo apt-get install -y $$missing"; exit 1; \
	  fi; \
	fi

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
