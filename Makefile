# tensorpool: `make run` and `make test` work on a fresh Debian machine as root (they install what is missing).
BUILD_DIR ?= build
SANITIZE_DIR ?= build-sanitize
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
TRACE ?= bench/traces/data/training.csv

.PHONY: all deps configure build run test bench sanitize clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD_DIR) $(CMAKE_FLAGS) > $(BUILD_DIR).configure.log 2>&1 || (cat $(BUILD_DIR).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job. Until training exists it is the allocator replay demo: every allocator on a bundled trace.
run: build
	@$(BUILD_DIR)/bin/tensorpool replay --trace $(TRACE) --allocator all

test: build
	@cd $(BUILD_DIR) && ctest -j $(JOBS) --output-on-failure --timeout 600

bench: build
	@$(BUILD_DIR)/bench/tp_replay_bench --traces bench/traces/data

# The memory tests again, in an address+undefined sanitizer build (what .ci/run does after `make test`).
sanitize: deps
	@cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=Debug -DTP_SANITIZE=address,undefined \
	  -DTP_BUILD_BENCH=OFF > $(SANITIZE_DIR).configure.log 2>&1 || (cat $(SANITIZE_DIR).configure.log; exit 1)
	@cmake --build $(SANITIZE_DIR) -j $(JOBS)
	@cd $(SANITIZE_DIR) && ctest -j $(JOBS) -L memory --output-on-failure --timeout 900

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) $(BUILD_DIR).configure.log $(SANITIZE_DIR).configure.log
