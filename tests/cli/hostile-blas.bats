#!/usr/bin/env bats
# The tools under every address-space (and data) limit from 100 MB to 900 MB: each run
# ends with exit 0 or with exit 5 and an out-of-memory message, never a hang
# and never a crash.  OpenBLAS 0.3.21 retries a work buffer it cannot map
# forever (kernels/blas.h): before blas_preinit() and blas_prime(), every
# tool linked with it could spin at 100% CPU at some of these limits (its
# worker thread at start, then exit() waiting for it), and draft-train,
# generate --draft-head and quantize --method gptq|awq in their own BLAS
# calls.  `timeout` only turns such a spin into a failure (exit 137)
# instead of a hung suite.

load common

FIX="$TOP/tests/fixtures"
TINY="$FIX/tiny-llama-f32.gguf"
TINY256="$FIX/tiny-llama256-f32.gguf"
CALIB="$SHARED/data/calibration-groups-merged.txt"

setup() {
    [ -f "$TINY" ] && [ -f "$TINY256" ] || skip "fixtures missing (make fixtures)"
    # AddressSanitizer cannot start under an address-space limit
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    ldd "$(command -v draft-train)" | grep -q libopenblas || skip "built without OpenBLAS"
    cd "$BATS_TEST_TMPDIR"
    head -c 6000 "$CALIB" > calib.txt
    # OpenBLAS's thread count left to the tools (a count set here is the
    # user's: blas.h)
    unset OPENBLAS_NUM_THREADS GOTO_NUM_THREADS OMP_NUM_THREADS
}

# sweep OUT CMD... : runs CMD (writing OUT) under ulimit -v (ulimit $LIMIT:
# -d, the data limit) from 100 MB to 900 MB in 25 MB steps; every run must
# exit 0 (OUT written) or 5 (an out-of-memory message, no OUT, no temporary
# beside it), and both must occur (exit 5 only when NEED_OOM is not 0)
sweep() {
    local out=$1 kb st ok=0 oom=0 lim=${LIMIT:--v}
    shift
    for kb in $(seq 102400 25600 921600); do
        rm -rf "$out"
        st=0
        bash -c "ulimit $lim $kb; exec timeout -s KILL 120 \"\$@\"" sweep "$@" \
            > /dev/null 2> err || st=$?
        case $st in
        0) [ -s "$out" ] || { echo "ulimit $lim $kb: exit 0 without '$out'"; return 1; }
           ok=$((ok + 1)) ;;
        5) grep -q "out of memory" err || { echo "ulimit $lim $kb: $(cat err)"; return 1; }
           [ ! -e "$out" ] && [ -z "$(compgen -G "$out.tmp*")" ] ||
               { echo "ulimit $lim $kb: output left behind"; return 1; }
           oom=$((oom + 1)) ;;
        *) echo "ulimit $lim $kb: exit $st: $(head -c 300 err)"; return 1 ;;
        esac
    done
    echo "$oom out of memory, $ok written"
    [ "$ok" -gt 0 ] && { [ "$oom" -gt 0 ] || [ "${NEED_OOM:-1}" = 0 ]; }
}

@test "draft-train under ulimit -v and -d from 100 to 900 MB: exit 0 or 5, never a hang" {
    run -0 sweep h.gguf draft-train -m "$TINY" --data calib.txt --seq-len 32 --epochs 1 -t 1 \
        -o h.gguf -q
    # the data limit counts only writable mappings: the room check maps so
    LIMIT=-d run -0 sweep h.gguf draft-train -m "$TINY" --data calib.txt --seq-len 32 --epochs 1 \
        -t 1 -o h.gguf -q
    # a thread count OpenBLAS would not take is replaced, not obeyed
    OPENBLAS_NUM_THREADS= OMP_NUM_THREADS=abc run -0 sweep h.gguf draft-train -m "$TINY" \
        --data calib.txt --seq-len 32 --epochs 1 -t 1 -o h.gguf -q
}

@test "generate, with and without --draft-head, under ulimit -v from 100 to 900 MB: exit 0 or 5, never a hang" {
    draft-train -m "$TINY" --data calib.txt --seq-len 32 --epochs 1 -o head.gguf -q
    # no BLAS call: the tiny model runs within 100 MB
    NEED_OOM=0 run -0 sweep o.txt generate -m "$TINY256" -p 'once upon' -n 8 --temp 0 -o o.txt
    run -0 sweep o.txt generate -m "$TINY" --draft-head head.gguf -p 'once upon' -n 8 --temp 0 \
        -o o.txt
}

@test "quantize --method gptq and awq under ulimit -v from 100 to 900 MB: exit 0 or 5, never a hang" {
    run -0 sweep g.gguf quantize --method gptq --calib calib.txt --calib-ctx 64 -t 2 -q \
        "$TINY256" g.gguf
    run -0 sweep a.gguf quantize --method awq --calib calib.txt --calib-ctx 64 -t 2 -q \
        "$TINY256" a.gguf
}
