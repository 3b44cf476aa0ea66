# SPDX-License-Identifier: Apache-2.0
# tensorpool: `make run` and `make test` work on a fresh Debian machine as root (they install what is missing).
BUILD_DIR ?= build
SANITIZE_DIR ?= build-sanitize
JOBS ?= $(shell nproc)
# Line tables (-g1) rather than full debug info: backtraces, perf and callgrind still name every function, file
# and line, and the build (a hundred test executables, each linking the whole library) compiles and links
# faster and writes a fraction of the bytes. Full debug info: -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG".
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
TRACE ?= bench/traces/data/training.csv
# PoCL's compiled-kernel cache: one for the sanitizer, TSan and regular passes, so the OpenCL kernels and
# CLBlast's are compiled once per machine rather than once per build (the cache is keyed by source, options
# and device, not by how the host program was built).
POCL_CACHE_DIR ?= $(abspath $(BUILD_DIR))/pocl-cache

.PHONY: all deps configure build cli run replay test bench sanitize tsan clean

all: build

deps:
	@scripts/install-deps

# The Python package is built with the venv scripts/python-env makes (nanobind, numpy and pytest from PyPI);
# where that fails (no PyPI), the C++ build goes on without the package and its tests skip, saying why.
PYTHON_VENV ?= $(abspath $(BUILD_DIR))/python-venv
configure: deps
	@mkdir -p $(BUILD_DIR)
	@python=$$(scripts/python-env $(PYTHON_VENV)) && python_flag="-DPython_EXECUTABLE=$$python" || python_flag=""; \
	  cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) $$python_flag > $(BUILD_DIR).configure.log 2>&1 \
	  || (cat $(BUILD_DIR).configure.log; exit 1)

# Everything: the library, the CLI, the tests and the benchmarks.
build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what `make run` and `make replay` execute: the library and the CLI (no test, no benchmark).
cli: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target tensorpool_cli

# The main job: the Keras-example MLP on Fashion-MNIST, mirrored over two sim devices, with a memory summary.
TRAIN_FLAGS ?=
run: cli
	@$(BUILD_DIR)/bin/tensorpool train $(TRAIN_FLAGS)

# The allocator replay demo on a bundled trace (the main job of the memory core).
replay: cli
	@$(BUILD_DIR)/bin/tensorpool replay --trace $(TRACE) --allocator all

test: build
	@mkdir -p $(POCL_CACHE_DIR)
	@cd $(BUILD_DIR) && POCL_CACHE_DIR=$(POCL_CACHE_DIR) ctest -j $(JOBS) --output-on-failure --timeout 600

bench: build
	@$(BUILD_DIR)/bench/tp_replay_bench --traces bench/traces/data --trace random --trace training \
		--trace varying_shape --trace llm_serving --trace growing_batch
	@$(BUILD_DIR)/bench/tp_kernel_bench
	@$(BUILD_DIR)/bench/tp_kernel_bench --half-gemm
	@$(BUILD_DIR)/bench/tp_step_bound --batch-size 128 --input gather
	@$(BUILD_DIR)/bench/tp_planner_bench
	@$(BUILD_DIR)/bench/tp_profiler_bench
	@$(BUILD_DIR)/bench/tp_collective_bench
	@mpirun --allow-run-as-root --oversubscribe -np 2 $(BUILD_DIR)/bench/tp_collective_bench
	@python3 bench/memory/reserved_vs_plan.py --cli $(BUILD_DIR)/bin/tensorpool
	@python3 bench/peers/compare_peers.py --tensorpool $(BUILD_DIR)/bin/tensorpool \
	  --kernel-bench $(BUILD_DIR)/bench/tp_kernel_bench

# The sanitizer builds: line tables (-g1) are all a sanitizer report needs to name file and line, and full
# debug info only makes their objects bigger and their compiles and links slower. Their library is a unity
# build (TP_UNITY_BUILD in CMakeLists.txt): the same code, compiled in batches; the regular build compiles each
# source alone.
# Neither builds the CUDA backend (TP_WITH_CUDA=OFF): without a GPU its tests only skip, its host-side logic is
# tested by the regular build's `make test`, and compiling it twice more would push CI past its time budget.
SANITIZER_DEBUG_FLAGS ?= -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTP_UNITY_BUILD=ON -DTP_WITH_CUDA=OFF

# Every library test again (not the tools' or benchmarks', which are not built), in an address+undefined
# sanitizer build (.ci/run).
sanitize: deps
	@cmake -S . -B $(SANITIZE_DIR) $(SANITIZER_DEBUG_FLAGS) -DTP_SANITIZE=address,undefined \
	  -DTP_BUILD_BENCH=OFF -DTP_BUILD_TOOLS=OFF > $(SANITIZE_DIR).configure.log 2>&1 \
	  || (cat $(SANITIZE_DIR).configure.log; exit 1)
	@cmake --build $(SANITIZE_DIR) -j $(JOBS)
	@mkdir -p $(POCL_CACHE_DIR)
	@cd $(SANITIZE_DIR) && POCL_CACHE_DIR=$(POCL_CACHE_DIR) ctest -j $(JOBS) \
	  -L 'memory|core|device|arbiter|backend|ops|graph|compile|runtime|distribute|data|train|report|profile' --output-on-failure --timeout 900

# The concurrency-heavy memory tests under ThreadSanitizer.
TSAN_DIR ?= build-tsan
TSAN_TESTS ?= concurrency_test bfc_allocator_property_test expandable_arena_test adaptors_test replay_test \
  stream_test stream_ordered_reuse_test tensor_test session_test shared_device_sessions_test \
  arbiter_conformance_test quota_adaptor_test communicator_test sequential_test prefetch_test inter_op_test \
  memory_profiler_test peer_copy_test intra_op_pool_test cpu_thread_count_test pending_run_test fit_test \
  opencl_runtime_test opencl_device_test opencl_kernels_test sharded_training_test thread_cache_adaptor_test \
  expandable_arena_sharing_test fused_update_test session_compaction_test device_compaction_test \
  sharded_arena_test
TSAN_JOBS ?= $(JOBS)
tsan: deps
	@cmake -S . -B $(TSAN_DIR) $(SANITIZER_DEBUG_FLAGS) -DTP_SANITIZE=thread -DTP_BUILD_BENCH=OFF \
	  -DTP_BUILD_TOOLS=OFF > $(TSAN_DIR).configure.log 2>&1 || (cat $(TSAN_DIR).configure.log; exit 1)
	@# A listed test that this configuration does not build (the OpenCL-internal ones, without the OpenCL
	@# backend) is skipped, saying so; a name that is no tests/**/NAME.cpp at all is an error.
	@# OpenBLAS is not instrumented: its own worker threads synchronise in ways TSan cannot see, so sgemm runs
	@# in the calling (instrumented) thread here; our threads and locks are what this pass checks.
	@# The binaries run TSAN_JOBS at a time, each into its own log, printed when it fails.
	@set -e; tests=; \
	for test in $(TSAN_TESTS); do \
	  if grep -qx "$$test" $(TSAN_DIR)/test_targets.txt; then tests="$$tests $$test"; \
	  elif [ -n "$$(find tests -name "$$test.cpp")" ]; then echo "tsan: $$test skipped: this configuration does not build it"; \
	  else echo "tsan: $$test: no tests/**/$$test.cpp" >&2; exit 1; fi; \
	done; \
	[ -n "$$tests" ] || { echo "tsan: none of TSAN_TESTS is built in this configuration" >&2; exit 1; }; \
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $$tests; \
	mkdir -p $(POCL_CACHE_DIR); \
	printf '%s\n' $$tests | xargs -P $(TSAN_JOBS) -I '{}' sh -c 'log=$(TSAN_DIR)/{}.tsan.log; \
	  if POCL_CACHE_DIR=$(POCL_CACHE_DIR) TP_CACHE_DIR=$(TSAN_DIR)/test-cache OPENBLAS_NUM_THREADS=1 \
	     TSAN_OPTIONS=halt_on_error=1 \
	     $(TSAN_DIR)/tests/{} --gtest_brief=1 > "$$log" 2>&1; \
	  then echo "tsan: {} passed"; else cat "$$log"; echo "tsan: {} FAILED (its log: $$log)"; exit 1; fi'

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) $(TSAN_DIR) *.configure.log
