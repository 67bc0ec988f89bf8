# config.mk - feature detection for the Makefile.  auto detects, 1 fails
# loudly when the feature is missing, 0 turns it off.

NVCC     ?= nvcc
CUDA     ?= auto
OPENBLAS ?= auto
ZSTD     ?= auto

PKG_CONFIG ?= pkg-config

# jansson (JSON) is required.
JANSSON_LIBS := $(shell $(PKG_CONFIG) --libs jansson 2>/dev/null || echo -ljansson)
# libcrypto (OpenSSL) for SHA-256 is required.
CFG_LIBS     := $(JANSSON_LIBS) $(shell $(PKG_CONFIG) --libs libcrypto 2>/dev/null || echo -lcrypto)
CFG_CFLAGS   :=
# PCRE2 (8-bit, Unicode properties) for the tokenizers' pre-tokenizers is required.
CFG_LIBS     += $(shell $(PKG_CONFIG) --libs libpcre2-8 2>/dev/null || echo -lpcre2-8)
CFG_CFLAGS   += $(shell $(PKG_CONFIG) --cflags libpcre2-8 2>/dev/null)

# ---- zstd ----
ifeq ($(ZSTD),0)
HAVE_ZSTD := 0
else
HAVE_ZSTD := $(shell $(PKG_CONFIG) --exists libzstd 2>/dev/null && echo 1 || echo 0)
ifeq ($(ZSTD)$(HAVE_ZSTD),10)
$(error ZSTD=1 but libzstd was not found (apt-get install libzstd-dev))
endif
endif
ifeq ($(HAVE_ZSTD),1)
CFG_CFLAGS += -DLLMKIT_HAVE_ZSTD=1
CFG_LIBS   += $(shell $(PKG_CONFIG) --libs libzstd)
endif

# ---- OpenBLAS ----
ifeq ($(OPENBLAS),0)
HAVE_OPENBLAS := 0
else
HAVE_OPENBLAS := $(shell $(PKG_CONFIG) --exists openblas 2>/dev/null && echo 1 || echo 0)
ifeq ($(OPENBLAS)$(HAVE_OPENBLAS),10)
$(error OPENBLAS=1 but OpenBLAS was not found (apt-get install libopenblas-dev))
endif
endif
ifeq ($(HAVE_OPENBLAS),1)
CFG_CFLAGS += -DLLMKIT_HAVE_OPENBLAS=1 $(shell $(PKG_CONFIG) --cflags openblas)
CFG_LIBS   += $(shell $(PKG_CONFIG) --libs openblas)
endif

# ---- CUDA ----
ifeq ($(CUDA),0)
HAVE_CUDA := 0
else
HAVE_CUDA := $(shell command -v $(NVCC) >/dev/null 2>&1 && echo 1 || echo 0)
ifeq ($(CUDA)$(HAVE_CUDA),10)
$(error CUDA=1 but nvcc was not found on PATH)
endif
endif
ifeq ($(HAVE_CUDA),1)
CUDA_HOME  ?= $(patsubst %/bin/,%,$(dir $(shell command -v $(NVCC))))
# sm_90a code (Hopper: H100/H200) plus compute_90 PTX that newer GPUs JIT-compile
NVCC_ARCH  ?= -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90,code=compute_90
CFG_CFLAGS += -DLLMKIT_HAVE_CUDA=1
CFG_LIBS   += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lstdc++
endif
