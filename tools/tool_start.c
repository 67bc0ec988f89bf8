/*
 * tool_start.c - the process's first step, before any library's constructor
 * runs: an entry of the .preinit_array (which only an executable has),
 * linked into every binary of tools/ (Makefile TOOL_SHARED).
 */
#include "blas.h"

/* under an address-space limit, OpenBLAS starts no worker: one that cannot
 * map its buffer spins forever (blas.h) */
__attribute__((section(".preinit_array"), used)) static void (*const preinit[])(int, char **,
                                                                              char **) = {
    blas_preinit,
};
