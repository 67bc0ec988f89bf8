# common.bash - loaded by every tests/cli/*.bats file.
bats_require_minimum_version 1.5.0
load /usr/lib/bats/bats-support/load.bash
load /usr/lib/bats/bats-assert/load.bash

: "${LLMKIT_BIN:=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)/bin}"
PATH="$LLMKIT_BIN:$PATH"
TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
SHARED=${LLMKIT_SHARED:-$TOP/../shared}
LLMKIT_CACHE=${LLMKIT_CACHE:-$HOME/.cache/llmkit}

# need_model VAR NAME : sets VAR to the path of the fetched real model NAME
# (scripts/fetch-models; `make check` fetches them first).  When it is not in
# $LLMKIT_CACHE the test skips with one line saying so, except in CI
# (CI=true), where a missing model fails the test.  Call it as a command,
# never as VAR=$(need_model ...): bats' skip cannot end the test from the
# subshell of a command substitution, which would go on with an empty path.
need_model() {
    if [ $# -ne 2 ] || ! [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
        echo "need_model: usage: need_model VAR NAME (not VAR=\$(need_model NAME))" >&2
        return 1
    fi
    local need_model_path_="$LLMKIT_CACHE/$2"
    if [ ! -f "$need_model_path_" ]; then
        if [ "${CI:-}" = true ]; then
            echo "missing real model $need_model_path_ (make check-setup, or scripts/fetch-models, fetches it)" >&2
            return 1
        fi
        skip "real model $2 not in $LLMKIT_CACHE (make check-setup, or scripts/fetch-models, fetches it)"
    fi
    printf -v "$1" '%s' "$need_model_path_"
}

# wait_for_tmp DIR PID : waits until a temporary output ("*.tmp.*") exists in
# DIR, while process PID runs.  The callers make PID block before it can finish
# (an input held open, an output pipe kept full), so the bound only turns a
# tool that never creates its temporary into a failure instead of a hang.
wait_for_tmp() {
    local dir=$1 pid=$2 i
    for ((i = 0; i < 1200; i++)); do
        compgen -G "$dir/*.tmp.*" >/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { echo "process $pid ended before a temporary appeared in $dir"; return 1; }
        sleep 0.05
    done
    echo "no temporary appeared in $dir within 60 s"
    return 1
}

# not_under_sanitizer : skips a slow numeric check in the sanitizer builds
# (`make asan`/`make ubsan` set LLMKIT_SAN); the plain `make check` runs it.
not_under_sanitizer() {
    [ -z "${LLMKIT_SAN:-}" ] || skip "numeric golden: checked by the plain build, too slow under $LLMKIT_SAN"
}

# clean FILE : UTF-8 with no control character but the newline, no C1
# control, no bidirectional override (what escaped output must be)
clean() {
    python3 - "$1" <<'EOF'
import sys
b = open(sys.argv[1], "rb").read()
try:
    s = b.decode("utf-8")
except UnicodeDecodeError as e:
    sys.exit("not UTF-8: %s" % e)
bad = [c for c in s if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) <= 0x9f
       or c in "\u061c\u200e\u200f\u2028\u2029\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"]
if bad:
    sys.exit("%s: control characters %r" % (sys.argv[1], bad))
EOF
}

# mount_full [FILL_KIB] : a 64 KiB tmpfs at $FULL with FILL_KIB taken (default
# all of it); needs root (skips otherwise); unmount_full (from teardown)
# unmounts it.
mount_full() {
    [ "$(id -u)" = 0 ] || skip "mounting a tmpfs needs root"
    FULL="$BATS_TEST_TMPDIR/full"
    mkdir "$FULL"
    mount -t tmpfs -o size=64k tmpfs "$FULL" 2>/dev/null || skip "cannot mount a tmpfs here"
    if [ -n "${1:-}" ]; then
        dd if=/dev/zero of="$FULL/fill" bs=1k count="$1" 2>/dev/null
    else
        dd if=/dev/zero of="$FULL/fill" bs=4k 2>/dev/null || true
        [ "$(df -k --output=avail "$FULL" | tail -1 | tr -d ' ')" = 0 ]
    fi
}

unmount_full() {
    if [ -n "${FULL:-}" ] && mountpoint -q "$FULL"; then
        umount "$FULL"
    fi
}
