# The two commands of the README:
#   make run    build toy and run its main job on the default model
#   make test   build toy and run the whole test suite
#   make default-model   retrain models/toy-stories.gguf from nothing (~25 min on 2 cores)
BUILD ?= build
JOBS  ?= $(shell nproc)
MODEL ?= models/toy-stories.gguf

.PHONY: all deps configure build run test clang-check cuda-check test-asan test-tsan build-cuda fuzz clean default-model

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

configure: $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/toy run -m $(MODEL) -p "Once upon a time" -n 96 --temp 0.8 -s 42

# the OpenAI Node SDK the server's client test drives (pinned in tests/node/package-lock.json; npm's cache keeps it)
tests/node/node_modules/.package-lock.json: tests/node/package-lock.json
	cd tests/node && npm ci --no-audit --no-fund --loglevel=error

test: build tests/node/node_modules/.package-lock.json
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	@$(MAKE) --no-print-directory clang-check
	@$(MAKE) --no-print-directory cuda-check

# The clang compile check of `make test` (CI), after the tests: toy's own
# sources (src/, fuzz/) parsed and type-checked by clang with the flags of the
# GCC build (scripts/clang-check.sh; installs Debian's clang as root when
# missing). About a minute on 2 cores. TOY_CLANG_CHECK=0 skips it.
TOY_CLANG_CHECK ?= 1
clang-check:
	@if [ "$(TOY_CLANG_CHECK)" = 0 ]; then echo "clang-check: skipped (TOY_CLANG_CHECK=0)"; \
	else scripts/clang-check.sh $(BUILD); fi

# The CUDA compile check of `make test` (CI), after the tests: ggml's CUDA
# backend and toy linked against it (build-cuda below, target toy), where
# Debian's CUDA toolkit is or can be installed (as root, with the Debian
# mirror reachable); elsewhere it says why it is skipped. No GPU needed.
# About 25 minutes on 2 cores the first time (plus the toolkit's 1.6 GB),
# then what changed (ccache). TOY_CUDA_CHECK=0 skips it.
TOY_CUDA_CHECK ?= 1
cuda-check:
	@if [ "$(TOY_CUDA_CHECK)" = 0 ]; then echo "cuda-check: skipped (TOY_CUDA_CHECK=0)"; \
	elif ! scripts/install-cuda.sh; then echo "cuda-check: skipped: no CUDA toolkit here, and it could not be installed (above)"; \
	else $(MAKE) --no-print-directory build-cuda CUDA_TARGETS=toy && \
	  echo "cuda-check: toy builds with ggml's CUDA backend ($$(/usr/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'), $(CUDA_ARCHS))"; fi

# The suite under sanitizers, each in its own build directory (not part of
# `make test`: several times slower). ASan + UBSan halt on the first finding;
# TSan runs the concurrent parts (server, scheduler, sessions, and the
# kernels whose threads share work: matmul row groups, flash attention) with
# ggml's own thread pool instead of OpenMP, which TSan cannot see into.
ASAN_FLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# C is ggml's (toy is C++): without UBSan's shift-base check, which ggml
# 0.25.1's IQ3_S dot product fails, and its alignment check, which its IQ1_S
# dot product fails (SECURITY.md, "Memory safety of the whole suite")
ASAN_C_FLAGS = $(ASAN_FLAGS) -fno-sanitize=shift-base,alignment
TSAN_FLAGS = -fsanitize=thread -fno-omit-frame-pointer
test-asan: tests/node/node_modules/.package-lock.json
	@$(MAKE) --no-print-directory deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS="$(ASAN_C_FLAGS)" \
	  -DCMAKE_CXX_FLAGS="$(ASAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(ASAN_FLAGS)"
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS)

test-tsan:
	@$(MAKE) --no-print-directory deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOY_OPENMP=OFF -DCMAKE_C_FLAGS="$(TSAN_FLAGS)" \
	  -DCMAKE_CXX_FLAGS="$(TSAN_FLAGS)" -DCMAKE_EXE_LINKER_FLAGS="$(TSAN_FLAGS)"
	cmake --build build-tsan -j $(JOBS) --target toy_tests toy
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -R 'Server|Scheduler|KvCache|Generation|Constrained|Parity.*Sequences|ShareWork|FlashAttention|PackedMatmul'

# ggml's CUDA backend and toy with it in $(CUDA_BUILD)/ (CUDA_TARGETS: what
# to build, default all). By default Debian's CUDA toolkit (11.8, scripts/install-cuda.sh),
# host compiler g++-11 (its nvcc does not take g++ 12), for CUDA_ARCHS: by
# default PTX for compute 8.0, which the driver compiles for any GPU from
# Ampere on (H100 included; ggml's Hopper code, sm_90, needs a newer toolkit
# than 11.8). /usr/bin comes first in PATH: Debian's nvcc calls ptxas and
# friends by name, and another toolkit (/usr/local/cuda) may be on the PATH
# before it. CUDA_TOOLKIT=/usr/local/cuda takes that toolkit instead (NVIDIA's
# own, 12.x or 13.x, whose nvcc takes g++ 12), e.g. for Hopper machine code:
#   make build-cuda CUDA_TOOLKIT=/usr/local/cuda CUDA_ARCHS=90-real
# (the GPU run in BENCHMARKS.md was built so, with CUDA 13.0). CUDA_CMAKE_FLAGS:
# more cmake flags for that build.
CUDA_ARCHS ?= 80-virtual
CUDA_TOOLKIT ?=
CUDA_BUILD ?= build-cuda
CUDA_TARGETS ?= all
ifeq ($(CUDA_TOOLKIT),)
CUDA_CMAKE = -DCMAKE_CUDA_COMPILER=/usr/bin/nvcc -DCMAKE_CUDA_HOST_COMPILER=/usr/bin/cuda-g++
CUDA_PATH  = /usr/bin:$$PATH
CUDA_SETUP = scripts/install-cuda.sh
else
CUDA_CMAKE = -DCMAKE_CUDA_COMPILER=$(CUDA_TOOLKIT)/bin/nvcc
CUDA_PATH  = $(CUDA_TOOLKIT)/bin:$$PATH
CUDA_SETUP = test -x $(CUDA_TOOLKIT)/bin/nvcc || { echo "build-cuda: no nvcc in CUDA_TOOLKIT=$(CUDA_TOOLKIT)" >&2; exit 1; }
endif
build-cuda:
	@$(MAKE) --no-print-directory deps
	@$(CUDA_SETUP)
	rm -f $(CUDA_BUILD)/CMakeCache.txt
	PATH=$(CUDA_PATH) cmake -S . -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=Release -DTOY_CUDA=ON $(CUDA_CMAKE) \
	  -DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)" $(CUDA_CMAKE_FLAGS)
	PATH=$(CUDA_PATH) cmake --build $(CUDA_BUILD) -j $(JOBS) --target $(CUDA_TARGETS)

# libFuzzer targets (fuzz/README.md) under ASan + UBSan in build-fuzz/, one
# after another, FUZZ_SECONDS each (FUZZ_TARGETS: a subset; FUZZ_RUNS=N runs
# each for N executions instead; FUZZ_JOBS=N: N processes per target on its
# one corpus). Not part of `make test`.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
FUZZ_JOBS ?= 1
fuzz:
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_JOBS=$(FUZZ_JOBS) scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

default-model: build
	scripts/make-default-model.sh

clean:
	rm -rf $(BUILD)
