# common.bash - loaded by every tests/cli/*.bats file.
bats_require_minimum_version 1.5.0
load /usr/lib/bats/bats-support/load.bash
load /usr/lib/bats/bats-assert/load.bash

: "${LLMKIT_BIN:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)/bin}"
PATH="$LLMKIT_BIN:$PATH"
TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
SHARED=${LLMKIT_SHARED:-$TOP/../shared}
LLMKIT_CACHE=${LLMKIT_CACHE:-$HOME/.cache/llmkit}

# need_model NAME : path of a fetched real model; skips when absent, except in
# CI (CI=true), where a missing model is a failure.
need_model() {
    local f="$LLMKIT_CACHE/$1"
    if [ ! -f "$f" ]; then
        if [ "${CI:-}" = true ]; then
            echo "missing real model $f (run scripts/fetch-models)" >&2
            return 1
        fi
        skip "real model $1 not fetched (run scripts/fetch-models)"
    fi
    echo "$f"
}

# not_under_sanitizer : skips a slow numeric check in the sanitizer builds
# (`make asan`/`make ubsan` set LLMKIT_SAN); the plain `make check` runs it.
not_under_sanitizer() {
    [ -z "${LLMKIT_SAN:-}" ] || skip "numeric golden: checked by the plain build, too slow under $LLMKIT_SAN"
}
