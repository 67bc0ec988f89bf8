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
    [ -f "$need_model_path_" ] ||
        missing_input "real model $2 not in $LLMKIT_CACHE (make check-setup, or scripts/fetch-models, fetches it)" ||
        return 1
    printf -v "$1" '%s' "$need_model_path_"
}

# model_f32 VAR NAME F32NAME : a real model in F32: make bench-models' copy
# $LLMKIT_CACHE/bench/F32NAME, else one made here (once per test file) from
# the fetched model NAME by convert --type f32
model_f32() {
    local model_f32_="$LLMKIT_CACHE/bench/$3" model_f32_q_
    if [ ! -f "$model_f32_" ]; then
        model_f32_="$BATS_FILE_TMPDIR/$3"
        if [ ! -f "$model_f32_" ]; then
            need_model model_f32_q_ "$2" || return 1
            convert -q --type f32 "$model_f32_q_" "$model_f32_" || return 1
        fi
    fi
    printf -v "$1" '%s' "$model_f32_"
}

# missing_input MESSAGE : a test's input is not there: skip with MESSAGE,
# except in CI (CI=true), where the test fails with it on stderr.
missing_input() {
    if [ "${CI:-}" = true ]; then
        echo "missing: $1" >&2
        return 1
    fi
    skip "$1"
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

# mkreqs N FILE : N JSON requests for generate --batch with varied prompts (a
# third share a long prefix) and max_tokens 1..40; no temperature (give --temp 0)
mkreqs() {
    python3 - "$1" "$2" <<'EOF'
import json, random, sys
n, out = int(sys.argv[1]), sys.argv[2]
r = random.Random(7)
words = "the a cat dog sat on mat red blue green over under quick brown fox jumps lazy river hill".split()
shared = " ".join(r.choice(words) for _ in range(30))
with open(out, "w") as f:
    for i in range(n):
        p = " ".join(r.choice(words) for _ in range(r.randint(1, 40)))
        if i % 3 == 1:
            p = shared + " " + p
        f.write(json.dumps({"id": "r%d" % i, "prompt": p, "max_tokens": r.randint(1, 40)}) + "\n")
EOF
}

# results_by_line FILE : of generate --batch results, what must not depend on
# how the job was split or batched - the request, tokens and text of each -
# in request order
results_by_line() {
    jq -c '{line, id, type, tokens, text, finish_reason, prompt_tokens, completion_tokens, error}' "$1" |
        jq -s -c 'sort_by(.line)[]'
}

# wait_until SECONDS WHAT CMD... : runs CMD every 0.05 s until it succeeds;
# after SECONDS says "no WHAT within SECONDS s" and fails.  For conditions the
# caller has made certain (a process that blocks once it has written its
# lines, a job that must end): the bound only turns a hang into a failure.
wait_until() {
    local limit=$1 what=$2 i
    shift 2
    for ((i = 0; i < limit * 20; i++)); do
        if "$@"; then
            return 0
        fi
        sleep 0.05
    done
    echo "no $what within $limit s"
    return 1
}

# with_hup CMD ARGS... & : CMD with SIGHUP at its default action, where the
# tests themselves run with it ignored (under nohup: the tools keep it
# ignored, as they should, and a shell cannot reset it).  For a background
# job only: it execs, so that $! is CMD's pid (a function's job is a subshell)
with_hup() {
    exec python3 -c 'import os, signal, sys
signal.signal(signal.SIGHUP, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
}

# has_lines FILE N : FILE exists and has at least N lines
has_lines() {
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]
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

# sft_shape DIR NAME DIM... : gives tensor NAME of DIR/model.safetensors the
# shape DIM... (its bytes unchanged)
sft_shape() {
    python3 - "$@" <<'EOF'
import json, struct, sys
d, name, shape = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
p = d + "/model.safetensors"
b = open(p, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
h[name]["shape"] = shape
raw = json.dumps(h).encode()
raw += b" " * (-len(raw) % 8)
open(p, "wb").write(struct.pack("<Q", len(raw)) + raw + b[8 + n:])
EOF
}

# grid_quant METHOD OUT ARGS... : quantize --method METHOD of the tiny
# fixture into OUT, calibrated on 4 chunks of 32 tokens of the calibration
# text (quantize-gptq.bats, quantize-awq.bats)
grid_quant() {
    local method=$1 out=$2
    shift 2
    quantize -q --method "$method" --calib "$SHARED/data/calibration-groups-merged.txt" \
        --calib-ctx 32 --calib-chunks 4 -t 2 "$@" "$TOP/tests/fixtures/tiny-llama-f32.gguf" "$out"
}

# with_softcap SRC DST [CAP] : SRC (a gemma3 GGUF) with the key
# gemma3.final_logit_softcapping = CAP (default 30) added, tensors unchanged
with_softcap() {
    python3 - "$1" "$2" "${3:-30}" <<'EOF'
import struct, sys
src, dst, cap = sys.argv[1], sys.argv[2], float(sys.argv[3])
buf = open(src, 'rb').read()
SZ = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(o, t):             # past a value of type t at o
    if t == 8:
        return o + 8 + struct.unpack_from('<Q', buf, o)[0]
    if t != 9:
        return o + SZ[t]
    at, n = struct.unpack_from('<IQ', buf, o)
    o += 12
    if at != 8:
        return o + n * SZ[at]
    for _ in range(n):
        o += 8 + struct.unpack_from('<Q', buf, o)[0]
    return o
n_t, n_kv = struct.unpack_from('<QQ', buf, 8)
o, align = 24, 32
for _ in range(n_kv):
    kl = struct.unpack_from('<Q', buf, o)[0]
    t = struct.unpack_from('<I', buf, o + 8 + kl)[0]
    if buf[o + 8:o + 8 + kl] == b'general.alignment':
        align = struct.unpack_from('<I', buf, o + 12 + kl)[0]
    o = skip(o + 12 + kl, t)
kv_end = o
for _ in range(n_t):        # the tensor infos
    o += 8 + struct.unpack_from('<Q', buf, o)[0]
    o += 4 + 8 * struct.unpack_from('<I', buf, o)[0] + 12
key = b'gemma3.final_logit_softcapping'
head = bytearray(buf[:kv_end] + struct.pack('<Q', len(key)) + key + struct.pack('<If', 6, cap)
                 + buf[kv_end:o])
struct.pack_into('<Q', head, 16, n_kv + 1)
head += bytes(-len(head) % align)
open(dst, 'wb').write(head + buf[o + (-o % align):])
EOF
}
