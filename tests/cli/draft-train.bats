#!/usr/bin/env bats
# draft-train: options, bad inputs, a head trained on the tiny fixture (GGUF
# keys, determinism, the feature cache, --json), self-distillation from
# prompts (and scripts/mkdistill-prompts' own, --self), checkpoints on
# SIGTERM and --resume giving the uninterrupted run's head; a Gemma 3
# target with a final logit softcap refused.

load common

FIX="$TOP/tests/fixtures/tiny-llama-f32.gguf"
CALIB="$SHARED/data/calibration-groups-merged.txt"
PY="$LLMKIT_CACHE/venv/bin/python"

setup() {
    [ -f "$FIX" ] || skip "fixtures missing (make fixtures)"
    head -c 12000 "$CALIB" > "$BATS_TEST_TMPDIR/text.txt"
}

teardown() {
    unmount_full
}

# gguf_key FILE KEY : the value of a string or integer key (gguf-py)
gguf_key() {
    "$PY" - "$1" "$2" <<'EOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
f = r.fields[sys.argv[2]]
v = f.parts[f.data[0]]
print(bytes(v).decode() if f.types[0] == gguf.GGUFValueType.STRING else int(v[0]))
EOF
}

# data_sha256 FILE : SHA-256 of a GGUF's tensor data section (gguf-py's offset)
data_sha256() {
    "$PY" - "$1" <<'EOF'
import sys, hashlib, gguf
r = gguf.GGUFReader(sys.argv[1])
print(hashlib.sha256(open(sys.argv[1], 'rb').read()[r.data_offset:]).hexdigest())
EOF
}

# term_once ERR ARGS... : draft-train ARGS in the background (stderr to
# ERR), SIGTERM (or $SIG) once the caller's `ready` succeeds; st = its exit
# status
term_once() {
    local err=$1 pid i
    shift
    with_hup draft-train "$@" 2> "$err" 3>&- &
    pid=$!
    for ((i = 0; i < 2400; i++)); do
        ready && break
        sleep 0.05
    done
    kill -"${SIG:-TERM}" $pid
    st=0
    wait $pid || st=$?
}

# term_at_checkpoint OUT ARGS... : draft-train -m $FIX -o OUT ARGS, SIGTERM
# once OUT.ckpt exists (stderr to OUT.err)
term_at_checkpoint() {
    local out=$1
    shift
    ready() { [ -e "$out.ckpt" ]; }
    term_once "$out.err" -m "$FIX" -o "$out" "$@"
}

# term_when PATTERN ARGS... : draft-train ARGS, SIGTERM once its stderr
# (err) holds PATTERN
term_when() {
    local pat=$1
    shift
    ready() { grep -q "$pat" err 2> /dev/null; }
    term_once err "$@"
}

# flip_byte FILE OFFSET : the lowest bit of FILE's byte at OFFSET flipped
flip_byte() {
    python3 -c "
import sys
f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 1]))" "$1" "$2"
}

# keep_forge ENTRY N|vocab : a loss mask entry whose sequence N's
# (0-based) features hash and one of its rows' bytes, or whose draft
# vocabulary's hash, differ, sealed again (the header's SHA-256 of the rest
# made right); keep_row ENTRY : the offset of a byte of its first row
keep_forge() {
    python3 -c "
import sys, struct, hashlib
p, what = sys.argv[1], sys.argv[2]
b = bytearray(open(p, 'rb').read())
n, S = struct.unpack_from('<QQ', b, 8)
if what == 'vocab':
    b[96] ^= 1
else:
    b[160 + 64 * int(what)] ^= 1
    b[160 + 64 * n + S * int(what) + 3] ^= 1
b[32:96] = hashlib.sha256(b[160:]).hexdigest().encode()
open(p, 'wb').write(b)" "$1" "$2"
}
keep_row() {
    python3 -c "
import sys, struct
print(160 + 64 * struct.unpack_from('<Q', open(sys.argv[1], 'rb').read(), 8)[0] + 4)" "$1"
}

# many_prompts FILE : 4000 short prompts whose responses (up to the
# context) would take the tiny model minutes to generate
many_prompts() {
    python3 -c "
import json, sys
with open(sys.argv[1], 'w') as f:
    for i in range(4000):
        f.write(json.dumps({'prompt': 'story %d:' % i}) + '\\n')
" "$1"
}

@test "draft-train --help: stdout, exit 0" {
    run -0 --separate-stderr draft-train --help
    assert_output --partial "usage: draft-train"
    assert_output --partial "--max-time SECONDS"
    [ -z "$stderr" ]
}

@test "draft-train: usage errors exit 2" {
    run -2 --separate-stderr draft-train --bogus
    [[ $stderr == *"usage: draft-train"* ]]
    run -2 --separate-stderr draft-train --data x -o y --epochs 1
    [[ $stderr == *"no model (-m)"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y
    [[ $stderr == *"give --epochs or --max-time"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --arch eagle2
    [[ $stderr == *"--arch: 'eagle2' is not supported"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --ttt-steps 3
    [[ $stderr == *"--ttt-steps: only with --arch eagle3"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --init zero
    [[ $stderr == *"--init: 'zero' is not one of random, target"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --init target
    [[ $stderr == *"--init target: only with --arch eagle3"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --arch eagle3 \
        --ttt-steps 17
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 0
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o - --epochs 1
    # decimal numbers only: strtod would take a hex float or leading blanks
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --max-time 0x10
    [[ $stderr == *"--max-time: invalid number '0x10'"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --max-time " 5"
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs 1 --lr 0x1p-3
    run -2 --separate-stderr draft-train -m "$FIX" --data x -o y --epochs " 5"
}

@test "draft-train: a file that is no GGUF is bad data (3), nothing written" {
    printf 'not a model at all' > "$BATS_TEST_TMPDIR/bad.gguf"
    run -3 --separate-stderr draft-train -m "$BATS_TEST_TMPDIR/bad.gguf" \
        --data "$BATS_TEST_TMPDIR/text.txt" -o "$BATS_TEST_TMPDIR/h.gguf" --epochs 1
    [[ $stderr == *"bad.gguf"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/h.gguf" ]
}

@test "draft-train: a model that is a FIFO is refused at once (4), not waited on" {
    mkfifo "$BATS_TEST_TMPDIR/fifo"
    run -4 --separate-stderr timeout 20 draft-train -m "$BATS_TEST_TMPDIR/fifo" \
        --data "$BATS_TEST_TMPDIR/text.txt" -o "$BATS_TEST_TMPDIR/h.gguf" --epochs 1
    [ "$stderr" = "draft-train: '$BATS_TEST_TMPDIR/fifo': is a FIFO, not a regular file" ]
    [ ! -e "$BATS_TEST_TMPDIR/h.gguf" ]
}

@test "draft-train: too little text for two sequences is refused" {
    printf 'hello world' > "$BATS_TEST_TMPDIR/tiny.txt"
    run -2 --separate-stderr draft-train -m "$FIX" --data "$BATS_TEST_TMPDIR/tiny.txt" \
        -o "$BATS_TEST_TMPDIR/h.gguf" --epochs 1
    [[ $stderr == *"need at least 2 sequences"* ]]
    [ ! -e "$BATS_TEST_TMPDIR/h.gguf" ]
}

@test "draft-train: trains a head on the fixture; same seed, same bytes; the cache is reused" {
    cd "$BATS_TEST_TMPDIR"
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h1.gguf --epochs 2 \
        --seq-len 32 --cache cache --json
    [[ $stderr == *"wrote 'h1.gguf'"*"(features computed)"* ]]
    [[ $stderr == *"peak memory"* ]]
    # one line per step, then the evaluation; the held-out loss below the first step's
    n=$(jq -r 'select(.type=="step") | .step' <<<"$output" | wc -l)
    [ "$n" -gt 10 ]
    [ "$(jq -r 'select(.type=="eval") | .schema' <<<"$output")" = "draft-train/1" ]
    first=$(jq -r 'select(.type=="step") | .loss' <<<"$output" | head -1)
    last=$(jq -r 'select(.type=="eval") | .loss' <<<"$output")
    python3 -c "import sys; sys.exit(not float(sys.argv[2]) < float(sys.argv[1]))" "$first" "$last"
    ls cache/*.eaglefeat.zst
    [ "$(gguf_key h1.gguf general.architecture)" = eagle ]
    [ "$(gguf_key h1.gguf eagle.embedding_length)" = 64 ]
    [ "$(gguf_key h1.gguf eagle.base.tensor_sha256)" = "$(data_sha256 "$FIX")" ]
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 \
        --seq-len 32 --cache cache
    [[ $stderr == *"(features from the cache)"* ]]
    cmp h1.gguf h2.gguf
    # another seed, another head
    run -0 draft-train -m "$FIX" --data text.txt -o h3.gguf --epochs 2 --seq-len 32 --seed 2 -q
    run -1 cmp -s h1.gguf h3.gguf     # differ (1), not missing (2)
    # an existing output needs -f
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h1.gguf --epochs 1 --seq-len 32
    cmp h1.gguf h2.gguf
}

@test "draft-train --arch eagle3: an EAGLE-3 head; same seed, same bytes; its own cache entry" {
    cd "$BATS_TEST_TMPDIR"
    run -0 draft-train -m "$FIX" --data text.txt -o e1.gguf --epochs 1 --seq-len 32 --cache c -q
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h1.gguf --epochs 2 \
        --seq-len 32 --cache c --json --arch eagle3 --ttt-steps 3 --draft-vocab 100 -v
    [[ $stderr == *"EAGLE-3 head"*"(started from the model's last layer), CE over 100 tokens"* ]]
    [[ $stderr == *"(features computed)"* ]]
    [ "$(ls c/*.eaglefeat.zst | wc -l)" -eq 2 ]
    # the training-time test's loss: 3 weighted steps; it falls
    first=$(jq -r 'select(.type=="step") | .loss' <<<"$output" | head -1)
    last=$(jq -r 'select(.type=="eval") | .loss' <<<"$output")
    python3 -c "import sys; sys.exit(not float(sys.argv[2]) < float(sys.argv[1]))" "$first" "$last"
    [ "$(jq -r 'select(.type=="step") | .reg' <<<"$output" | sort -u)" = 0 ]
    [ "$(gguf_key h1.gguf general.architecture)" = eagle3 ]
    [ "$(gguf_key h1.gguf eagle3.version)" = 1 ]
    [ "$(gguf_key h1.gguf eagle3.draft_vocab_size)" = 100 ]
    [ "$(gguf_key h1.gguf eagle3.embedding_length)" = 64 ]
    "$PY" - h1.gguf <<'EOF'
import sys, gguf
r = gguf.GGUFReader(sys.argv[1])
t = {x.name: x for x in r.tensors}
assert list(t['fc.weight'].shape) == [192, 64], t['fc.weight'].shape
assert list(t['blk.0.attn_q.weight'].shape) == [128, 64]
assert list(t['output.weight'].shape) == [64, 100]
f = r.fields['eagle3.feature_layers']
assert [int(f.parts[i][0]) for i in f.data] == [1, 1, 0]
EOF
    [[ $stderr == *"of the positions counted), kernels"* ]]
    [ "$(ls c/*.100.eaglekeep | wc -l)" -eq 1 ]
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100 -v
    [[ $stderr == *"(features from the cache)"* ]]
    [[ $stderr == *"of the positions counted, from the cache), kernels"* ]]
    cmp h1.gguf h2.gguf
    # a damaged loss mask entry is recomputed, with a warning, to the same
    # head: one row's 0/1 flipped (still a valid row: its SHA-256 tells)
    local k; k=$(ls c/*.100.eaglekeep)
    flip_byte "$k" "$(keep_row "$k")"
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"warning: loss mask cache"*"not one of this run; recomputing"* ]]
    cmp h1.gguf h2.gguf
    # an entry whose third sequence had other features (other answers
    # under the same key) and another row: the other sequences' rows serve,
    # its own are recomputed, to the same head (its stale row taken would
    # change it); one of another draft vocabulary of the same size serves
    # none
    keep_forge "$k" 2
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"warning: loss mask cache"*": 1 of its sequences' features are not this run's; recomputing those"* ]]
    cmp h1.gguf h2.gguf
    keep_forge "$k" vocab
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"warning: loss mask cache"*"not one of this run; recomputing"* ]]
    cmp h1.gguf h2.gguf
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100 -v
    [[ $stderr != *"warning"* && $stderr == *"of the positions counted, from the cache)"* ]]
    # fewer unrolled steps train another head
    run -0 draft-train -m "$FIX" --data text.txt -o h3.gguf --epochs 2 --seq-len 32 -q \
        --cache c --arch eagle3 --ttt-steps 2 --draft-vocab 100
    run -1 cmp -s h1.gguf h3.gguf
    # the default start of a llama model's EAGLE-3 head is --init target;
    # a random start trains another head
    run -0 draft-train -m "$FIX" --data text.txt -o h5.gguf --epochs 2 --seq-len 32 -q \
        --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100 --init target
    cmp h1.gguf h5.gguf
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h5.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100 --init random -v
    [[ $stderr == *"EAGLE-3 head"*"(random start), CE over 100 tokens"* ]]
    run -1 cmp -s h1.gguf h5.gguf
    # a start from the target, barely trained (--lr 1e-9): its LM head is
    # the model's rows of the draft vocabulary, its final norm the model's
    run -0 draft-train -m "$FIX" --data text.txt -o h6.gguf --epochs 1 --seq-len 32 -q \
        --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100 --lr 1e-9
    "$PY" - "$FIX" h6.gguf <<'EOF'
import sys, gguf, numpy as np
m = gguf.GGUFReader(sys.argv[1]); h = gguf.GGUFReader(sys.argv[2])
mt = {x.name: x for x in m.tensors}; ht = {x.name: x for x in h.tensors}
lm = np.array(mt['output.weight' if 'output.weight' in mt else 'token_embd.weight'].data)
f = h.fields['eagle3.draft_vocab']
ids = [int(f.parts[i][0]) for i in f.data]
assert len(ids) == 100 and ids != list(range(100)), ids[:10]
hl = np.array(ht['output.weight'].data)
assert hl.shape == (100, lm.shape[1]), hl.shape
err = np.abs(hl - lm[ids]).max() / np.abs(lm[ids]).max()
assert err < 1e-5, err
on = np.array(ht['output_norm.weight'].data); mon = np.array(mt['output_norm.weight'].data)
assert np.abs(on - mon).max() < 1e-5 * np.abs(mon).max()
EOF
    # entries that are not files are neither followed nor opened: symbolic
    # links (to a file the run must not write through) and FIFOs (which
    # would block the read) are removed and the entries written again
    local f k; k=$(ls c/*.100.eaglekeep)
    echo victim > victim
    for f in "$k" "${k%.100.eaglekeep}.eaglefeat.zst"; do rm "$f"; ln -s "$PWD/victim" "$f"; done
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 2 -f \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"warning: feature cache"*"not a regular file; removed, recomputing"* ]]
    [[ $stderr == *"warning: loss mask cache"*"not a regular file; removed, recomputing"* ]]
    [ "$(cat victim)" = victim ]
    [ -z "$(find c -type l)" ]
    cmp h1.gguf h2.gguf
    for f in "$k" "${k%.100.eaglekeep}.eaglefeat.zst"; do rm "$f"; mkfifo "$f"; done
    run -0 --separate-stderr timeout 300 draft-train -m "$FIX" --data text.txt -o h2.gguf \
        --epochs 2 -f --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"not a regular file; removed, recomputing"* ]]
    [ -z "$(find c -type p)" ]
    cmp h1.gguf h2.gguf
    # a directory in an entry's place is an error before any work (4)
    rm "$k"; mkdir "$k"
    run -4 --separate-stderr draft-train -m "$FIX" --data text.txt -o h4.gguf --epochs 2 \
        --seq-len 32 --cache c --arch eagle3 --ttt-steps 3 --draft-vocab 100
    [[ $stderr == *"loss mask cache '$k': is a directory" ]]
    [ ! -e h4.gguf ]
}

@test "draft-train --arch eagle3: --resume ends with the uninterrupted head; an EAGLE-1 run refuses its checkpoint" {
    cd "$BATS_TEST_TMPDIR"
    a=(--data text.txt --epochs 8 --seq-len 32 --arch eagle3 --ttt-steps 2 --draft-vocab 80 -q)
    draft-train -m "$FIX" -o full.gguf "${a[@]}"
    term_at_checkpoint part.gguf "${a[@]}" --checkpoint-every 5
    [ "$st" -eq 143 ]
    [ "$(gguf_key part.gguf.ckpt general.architecture)" = eagle3 ]
    cp part.gguf.ckpt e1.gguf.ckpt
    run -3 --separate-stderr draft-train -m "$FIX" -o e1.gguf --data text.txt --epochs 8 \
        --seq-len 32 --draft-vocab 80 --checkpoint-every 5 --resume -q
    [[ $stderr == *"checkpoint of another run"* ]]
    run -0 draft-train -m "$FIX" -o part.gguf "${a[@]}" --checkpoint-every 5 --resume
    cmp full.gguf part.gguf
}

@test "draft-train: a corrupt cache entry is recomputed with a warning" {
    cd "$BATS_TEST_TMPDIR"
    run -0 draft-train -m "$FIX" --data text.txt -o h1.gguf --epochs 1 --seq-len 32 --cache c -q
    f=$(ls c/*.eaglefeat.zst)
    cp "$f" orig
    printf 'garbage' | dd of="$f" bs=1 seek=40 conv=notrunc 2>/dev/null
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h2.gguf --epochs 1 \
        --seq-len 32 --cache c
    [[ $stderr == *"warning: feature cache"*"recomputing"* ]]
    cmp h1.gguf h2.gguf
    # one bit inside the compressed features: the frame's checksum tells
    cp orig "$f"
    flip_byte "$f" $(($(stat -c %s "$f") / 2))
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o h3.gguf --epochs 1 \
        --seq-len 32 --cache c
    [[ $stderr == *"warning: feature cache"*"recomputing"* ]]
    cmp h1.gguf h3.gguf
}

@test "draft-train: JSON Lines data trains on the text members" {
    cd "$BATS_TEST_TMPDIR"
    python3 -c "
import json
t = open('text.txt').read()
with open('d.jsonl', 'w') as f:
    for i in range(0, len(t), 3000):
        f.write(json.dumps({'text': t[i:i + 3000]}) + '\n')
"
    run -0 --separate-stderr draft-train -m "$FIX" --data d.jsonl -o h.gguf --epochs 1 --seq-len 32 -v
    [[ $stderr == *"sequences of 32"* ]]
    printf '{"text": "a"}\n{"nope": 1}\n' > bad.jsonl
    run -3 --separate-stderr draft-train -m "$FIX" --data bad.jsonl -o h2.gguf --epochs 1
    [[ $stderr == *"line 2"* ]]
}

# distill_data : d.jsonl of prompts, single-user chats and a text line made
# from the calibration text; p.jsonl and c.jsonl the same prompts as
# generate --batch requests (plain, and for --chat)
distill_data() {
    python3 -c "
import json
w = open('text.txt').read().split()
d, p, c = open('d.jsonl', 'w'), open('p.jsonl', 'w'), open('c.jsonl', 'w')
for i in range(10):
    q = ' '.join(w[i * 30:i * 30 + 8 + i])
    if i % 2:
        d.write(json.dumps({'prompt': q}) + '\\n')
        p.write(json.dumps({'id': i, 'prompt': q}) + '\\n')
    else:
        d.write(json.dumps({'messages': [{'role': 'user', 'content': q}]}) + '\\n')
        c.write(json.dumps({'id': i, 'prompt': q}) + '\\n')
d.write(json.dumps({'text': ' '.join(w[400:900])}) + '\\n')
"
}

@test "draft-train: self-distillation - prompts and chats answered by the model as generate --batch answers them" {
    cd "$BATS_TEST_TMPDIR"
    distill_data
    run -0 --separate-stderr draft-train -m "$FIX" --data d.jsonl -o h1.gguf --epochs 1 --seq-len 32 \
        --gen-tokens 24 -v --cache cache
    [[ $stderr == *"10 prompts, "*" response tokens generated by the model"* ]]
    local n; n=$(sed -n 's/.*10 prompts, \([0-9]*\) response tokens.*/\1/p' <<<"$stderr")
    # the same responses, token for token in number, from generate --batch
    generate -q -m "$FIX" --batch p.jsonl -n 24 --temp 0 > p.out
    generate -q -m "$FIX" --batch c.jsonl -n 24 --temp 0 --chat > c.out
    [ "$n" -gt 0 ]
    [ "$n" = "$(cat p.out c.out | jq -s 'map(.completion_tokens) | add')" ]
    # deterministic; the responses count: a cached run of the same options
    # reuses the features, other options make other ones
    run -0 --separate-stderr draft-train -m "$FIX" --data d.jsonl -o h2.gguf --epochs 1 --seq-len 32 \
        --gen-tokens 24 -v --cache cache
    [[ $stderr == *"(features from the cache)"* ]]
    cmp h1.gguf h2.gguf
    run -0 --separate-stderr draft-train -m "$FIX" --data d.jsonl -o h3.gguf --epochs 1 --seq-len 32 \
        --gen-tokens 24 --gen-temp 0.9 -v --cache cache
    [[ $stderr == *"(features computed)"* ]]
    run -1 cmp -s h1.gguf h3.gguf     # differ (1), not missing (2)
}

@test "draft-train: the loss counts the responses' positions only (EAGLE's loss mask), its share as the token counts of generate --batch give it" {
    cd "$BATS_TEST_TMPDIR"
    python3 -c "
import json
w = open('text.txt').read().split()
q, p = open('q.jsonl', 'w'), open('p.jsonl', 'w')
for i in range(12):
    t = ' '.join(w[i * 40:i * 40 + 3 + 2 * i])
    q.write(json.dumps({'prompt': t}) + '\\n')
    p.write(json.dumps({'id': i, 'prompt': t}) + '\\n')
"
    run -0 --separate-stderr draft-train -m "$FIX" --data q.jsonl -o h.gguf --epochs 1 --seq-len 32 \
        --gen-tokens 20 --batch 1 --json -v
    local got; got=$(sed -n "s/.*the loss over the responses: \([0-9.]*\)% of the positions.*/\1/p" <<<"$stderr")
    [ -n "$got" ]
    printf '%s\n' "$output" > log.jsonl
    # a position counts when the token it reads is a response's.  Sequence
    # k holds rows k * 32 + 1 .. k * 32 + 32 of the stream; one a step
    # (--batch 1), the held-out ones (the last 1/20 in the bit-reversed
    # order) evaluated; the requests' results in request order
    generate -q -m "$FIX" --batch p.jsonl -n 20 --temp 0 > p.out
    python3 -c "
import json
f = []
for o in sorted((json.loads(l) for l in open('p.out')), key=lambda o: o['line']):
    f += [0] * o['prompt_tokens'] + [1] * o['completion_tokens']
use = f
n = (len(f) - 1) // 32
cnt = [sum(use[k * 32 + 1:k * 32 + 33]) for k in range(n)]
bits = (n - 1).bit_length()
order = [v for v in (int(format(j, '0%db' % bits)[::-1], 2) for j in range(1 << bits)) if v < n]
kept = [k for k in order if cnt[k] > 0]
m = len(kept)
hold = max(1, m // 20)
log = [json.loads(l) for l in open('log.jsonl')]
steps = sorted(o['positions'] for o in log if o['type'] == 'step')
ev = [o['positions'] for o in log if o['type'] == 'eval']
assert steps == sorted(cnt[k] for k in kept[:m - hold]), (steps, cnt)
assert ev == [sum(cnt[k] for k in kept[m - hold:])], ev
assert '%.1f' % (100.0 * sum(cnt) / (n * 32)) == '$got'
assert 0 < min(steps) and max(steps) < 32 and m < n
json.dump({'cnt': cnt, 'order': order}, open('seqs.json', 'w'))
print(n - m)
" > left
    [ "$(cat left)" -ge 2 ]
    [[ $stderr == *"; $(cat left) sequences without one left out"* ]]
    # --train-on-prompts: every sequence, every position trains; the
    # held-out figures still count the responses'
    run -0 --separate-stderr draft-train -m "$FIX" --data q.jsonl -o a.gguf --epochs 1 --seq-len 32 \
        --gen-tokens 20 --batch 1 --json -v --train-on-prompts
    [[ $stderr == *"the loss over every position (--train-on-prompts); the responses' (the held-out figures'): $got% of them"* ]]
    printf '%s\n' "$output" > all.jsonl
    python3 -c "
import json
q = json.load(open('seqs.json'))
cnt, order = q['cnt'], q['order']
n = len(cnt)
hold = max(1, n // 20)
log = [json.loads(l) for l in open('all.jsonl')]
assert [o['positions'] for o in log if o['type'] == 'step'] == [32] * (n - hold)
assert [o['positions'] for o in log if o['type'] == 'eval'] == [sum(cnt[k] for k in order[n - hold:])]
"
    run -1 cmp -s h.gguf a.gguf
    # EAGLE-3 over a draft vocabulary: each way's cache entries (features,
    # loss mask) are its own, so that a run after the other way's gives
    # the head of a run without a cache
    local e3=(--arch eagle3 --ttt-steps 2 --draft-vocab 64 --epochs 1 --seq-len 32 --gen-tokens 20)
    draft-train -q -m "$FIX" --data q.jsonl -o n1.gguf "${e3[@]}"
    draft-train -q -m "$FIX" --data q.jsonl -o n2.gguf "${e3[@]}" --train-on-prompts
    run -0 --separate-stderr draft-train -m "$FIX" --data q.jsonl -o c1.gguf "${e3[@]}" --cache c
    run -0 --separate-stderr draft-train -m "$FIX" --data q.jsonl -o c2.gguf "${e3[@]}" --cache c \
        --train-on-prompts -v
    [[ $stderr != *"warning"* && $stderr != *"from the cache"* ]]
    # every feature from the passes that answered: no feature entry (a
    # later run answers again and takes them again), the loss mask's kept
    [[ $stderr == *"the features of "*" sequences taken from the passes that answered its prompts, 0 computed"* ]]
    [ -z "$(compgen -G 'c/*.eaglefeat.zst')" ]
    [ -n "$(compgen -G 'c/*.eaglekeep')" ]
    cmp n1.gguf c1.gguf
    # the loss mask's entry alone serves the next run: the same head
    run -0 --separate-stderr draft-train -m "$FIX" --data q.jsonl -o c3.gguf "${e3[@]}" --cache c -v
    [[ $stderr == *"of the positions counted, from the cache)"* ]]
    cmp n1.gguf c3.gguf
    cmp n2.gguf c2.gguf
    run -1 cmp -s n1.gguf n2.gguf
    # a prompt longer than the sequences cut from it, with a one-token
    # response past their end: no position counted; with
    # --train-on-prompts it trains and says so of the held-out figures
    python3 -c "
import json; print(json.dumps({'prompt': open('text.txt').read()[:300]}))" > long.jsonl
    # (the response's token, index prompt_tokens, is in no sequence of 16 + 1
    # from 0: prompt_tokens is no multiple of 16)
    local pt; pt=$(jq -c '{id: 0, prompt}' long.jsonl | generate -q -m "$FIX" --batch - -n 1 --temp 0 |
        jq .prompt_tokens)
    [ $((pt % 16)) -ne 0 ]
    run -2 --separate-stderr draft-train -m "$FIX" --data long.jsonl -o l.gguf --epochs 1 \
        --seq-len 16 --gen-tokens 1
    [[ $stderr == *"'long.jsonl': no position to train on: "*"no sequence of --seq-len holds one"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt --eval long.jsonl -o l.gguf \
        --epochs 1 --seq-len 16 --gen-tokens 1
    [[ $stderr == *"--eval 'long.jsonl': no position to measure: "* ]]
    [ ! -e l.gguf ]
    run -0 --separate-stderr draft-train -m "$FIX" --data long.jsonl -o l.gguf --epochs 1 \
        --seq-len 16 --gen-tokens 1 --train-on-prompts
    [[ $stderr == *"; held-out: no response position; "* ]]
    # text counts everywhere: no such line; nothing for --train-on-prompts to add
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o t.gguf --epochs 1 --seq-len 32 -v
    [[ $stderr != *"the loss over"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o t2.gguf --epochs 1 --seq-len 32 \
        --train-on-prompts
    [[ $stderr == *"'text.txt': --train-on-prompts needs \"prompt\" or \"messages\" lines"* ]]
}

@test "draft-train: SIGTERM during self-distillation stops the generation: exit 143, nothing written" {
    cd "$BATS_TEST_TMPDIR"
    # minutes of generation (4000 prompts, responses up to the context):
    # the signal lands while it runs, and the run stops there instead of
    # generating to the end first
    many_prompts many.jsonl
    term_when "generating the model's responses to 4000 prompts" -m "$FIX" --data many.jsonl \
        -o h.gguf --epochs 1 --seq-len 32 --gen-tokens 4096 -t 1 -v
    [ "$st" -eq 143 ]
    grep -q "interrupted during self-distillation" err
    [ ! -e h.gguf ] && [ ! -e h.gguf.ckpt ]
    [ -z "$(compgen -G '*.tmp.*')" ]
}

@test "draft-train: SIGHUP (the terminal gone) stops the run as SIGTERM does: exit 129, nothing written" {
    cd "$BATS_TEST_TMPDIR"
    many_prompts many.jsonl
    SIG=HUP term_when "generating the model's responses to 4000 prompts" -m "$FIX" \
        --data many.jsonl -o h.gguf --epochs 1 --seq-len 32 --gen-tokens 4096 -t 1 -v
    [ "$st" -eq 129 ]
    grep -q "interrupted during self-distillation" err
    [ ! -e h.gguf ] && [ ! -e h.gguf.ckpt ]
    [ -z "$(compgen -G '*.tmp.*')" ]
}

@test "draft-train: SIGTERM during the features keeps the ones done in --cache; the next run goes on from them" {
    need_model SMOL SmolLM2-135M-Instruct.Q4_1.gguf
    cd "$BATS_TEST_TMPDIR"
    # the whole calibration text: a few hundred sequences of 256, minutes of
    # features for the real model; the signal lands once the bar is drawn
    term_when "features" -m "$SMOL" --data "$CALIB" -o h.gguf --epochs 1 --seq-len 256 \
        --cache c --progress -t 1
    [ "$st" -eq 143 ]
    local k; k=$(sed -n "s/.*interrupted during the features, after \([0-9]*\) of [0-9]* sequences (cached in 'c\/.*\.eaglefeat\.zst').*/\1/p" err)
    [ -n "$k" ] && [ "$k" -ge 1 ]
    [[ "$(grep "interrupted during the features" err)" == "draft-train: '$CALIB': interrupted during the features"* ]]
    [ ! -e h.gguf ] && [ ! -e h.gguf.ckpt ]
    [ -z "$(compgen -G '*.tmp.*')" ] && [ -z "$(compgen -G 'c/*.tmp.*')" ]
    # a budget spent at once: only what the cache holds (at least 2)
    run -0 --separate-stderr draft-train -m "$SMOL" --data "$CALIB" -o h.gguf --seq-len 256 \
        --max-time 0.001 --cache c -t 1 -v
    [[ $stderr == *"sequences (spread over it; $k from the cache)"* ]]
}

@test "draft-train --max-time: the budget covers the data's preparation (responses and features cut, cached, added up, repeated by --resume)" {
    cd "$BATS_TEST_TMPDIR"
    # responses that would take hours: no prompt starts after --gen-share
    # of the budget (default a quarter); the ones started finish, and the
    # run ends
    many_prompts many.jsonl
    run -0 --separate-stderr draft-train -m "$FIX" --data many.jsonl -o h1.gguf --seq-len 32 \
        --gen-tokens 4096 --max-time 8 --gen-share 0.5 --cache cache -v
    [[ $stderr == *"none started after 4.0 s of --max-time (--gen-share 0.5))"* ]]
    [[ $stderr == *"--max-time: the model's responses to the first "*" of 4000 prompts"* ]]
    [[ $stderr == *"training for the "*" s left of --max-time"* ]]
    [ -s h1.gguf ]
    ls cache/*.eaglefeat.zst
    # a budget that tokenizing 100 KB of text already spends: the features
    # of the first 2 sequences (spread over the text; one held out), cached
    head -c 100000 "$CALIB" > t100.txt
    run -0 --separate-stderr draft-train -m "$FIX" --data t100.txt -o h2.gguf --seq-len 32 \
        --max-time 0.001 --cache c2 -v
    [[ $stderr == *"--max-time: the features of the first 2 of the data's "*" sequences (spread over it; 0 from the cache)"* ]]
    [[ $stderr == *"2 sequences of 32 (1 held out)"* ]]
    [ -s h2.gguf ]
    # the next run goes on from them; then the whole data is in the cache
    run -0 --separate-stderr draft-train -m "$FIX" --data t100.txt -o h3.gguf --seq-len 32 \
        --epochs 1 --cache c2 -v
    [[ $stderr != *"--max-time:"* ]]
    [[ $stderr == *"(features computed)"* ]]
    run -0 --separate-stderr draft-train -m "$FIX" --data t100.txt -o h4.gguf --seq-len 32 \
        --epochs 1 --cache c2 -v
    [[ $stderr == *"(features from the cache)"* ]]
    cmp h3.gguf h4.gguf
    # --resume repeats the interrupted run's data, whatever its own time
    term_at_checkpoint r.gguf --data many.jsonl --seq-len 32 --gen-tokens 4096 --max-time 8 \
        --checkpoint-every 2 -v
    [ "$st" -eq 143 ]
    local first; first=$(sed -n "s/.*responses to the first \([0-9]*\) of 4000.*/\1/p" r.gguf.err)
    [ -n "$first" ]
    grep -q "none started after 2.0 s of --max-time (--gen-share 0.25))" r.gguf.err
    run -0 --separate-stderr draft-train -m "$FIX" --data many.jsonl -o r.gguf --seq-len 32 \
        --gen-tokens 4096 --max-time 8 --checkpoint-every 2 --resume -v
    [[ $stderr == *"--resume: the model's responses to the first $first of 4000 prompts"* ]]
    [[ $stderr == *"resuming from 'r.gguf.ckpt'"* ]]
    [ -s r.gguf ] && [ ! -e r.gguf.ckpt ]
}

@test "draft-train under ulimit -v: out of memory is exit 5 at once (an OpenBLAS worker that cannot map its buffer retries forever: exit handlers would wait for it)" {
    # AddressSanitizer cannot start under an address-space limit
    [ "${LLMKIT_SAN:-}" != address ] || skip "ulimit -v under AddressSanitizer"
    cd "$BATS_TEST_TMPDIR"
    run -5 --separate-stderr bash -c "ulimit -v 81920; exec timeout 300 draft-train -m '$FIX' \
        --data '$CALIB' --seq-len 32 --max-time 1 -t 1 -o h.gguf -q --cache c"
    [[ $stderr == *"out of memory"* ]]
    [ ! -e h.gguf ]
    [ -z "$(compgen -G 'h.gguf*')" ]
}

@test "draft-train: prompts too long for the context are left out with one warning; no checkpoint beside a FIFO" {
    cd "$BATS_TEST_TMPDIR"
    python3 -c "
import json
print(json.dumps({'prompt': 'word ' * 600}))
for i in range(20):
    print(json.dumps({'prompt': 'story %d:' % i}))
print(json.dumps({'prompt': 'more ' * 700}))
" > long.jsonl
    run -0 --separate-stderr draft-train -m "$FIX" --data long.jsonl -o h.gguf --seq-len 32 --epochs 1 \
        --gen-tokens 64 -v
    [[ $stderr == *"2 prompts have no fewer tokens than the model's context of "*"(the first: prompt 1, "*"left out"* ]]
    [[ $stderr == *"22 prompts, "*" response tokens generated"* ]]
    # the checkpoint goes beside the output: not beside a FIFO (or a device)
    mkfifo fifo
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o fifo --seq-len 32 --epochs 1 \
        --checkpoint-every 5 -f
    [[ $stderr == *"'fifo' is not a regular file: no checkpoint can go beside it"* ]]
    [ ! -e fifo.ckpt ]
    # a checkpoint that is a FIFO is refused (an I/O error), not waited on
    mkfifo f2.gguf.ckpt
    run -4 --separate-stderr timeout 60 draft-train -m "$FIX" --data text.txt -o f2.gguf \
        --seq-len 32 --epochs 1 --resume
    [[ $stderr == *"--resume: 'f2.gguf.ckpt': is a FIFO, not a regular file"* ]]
    mkdir f3.gguf.ckpt
    run -4 --separate-stderr draft-train -m "$FIX" --data text.txt -o f3.gguf --seq-len 32 \
        --epochs 1 --resume
    [[ $stderr == *"--resume: 'f3.gguf.ckpt': is a directory, not a regular file"* ]]
}

@test "draft-train: self-distillation options and bad prompt lines" {
    cd "$BATS_TEST_TMPDIR"
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --epochs 1 --gen-tokens 8
    [[ $stderr == *'--gen-tokens and --gen-temp need "prompt" or "messages" lines'* ]]
    # --gen-share: the share of --max-time in which responses start
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --epochs 1 --gen-share 0.4
    [[ $stderr == *"--gen-share: only with --max-time"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --max-time 9 --gen-share 0
    [[ $stderr == *"--gen-share: '0' is out of range [1e-06, 0.75]"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --max-time 9 --gen-share 0.8
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --max-time 9 --gen-share 0.5
    [[ $stderr == *'--gen-share needs "prompt" or "messages" lines'* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --epochs 1 --gen-temp -1
    [[ $stderr == *"--gen-temp: '-1' is out of range [0, 10]"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf --epochs 1 --gen-tokens 0
    [[ $stderr == *"--gen-tokens: '0' is out of range [1, 1048576]"* ]]
    for bad in '{"prompt": 3}' '{"text": "a", "prompt": "b"}' '{"messages": [{"role": "user"}]}' \
               '{"messages": []}' '{"prompt": ""}'; do
        printf '{"prompt": "fine"}\n%s\n' "$bad" > bad.jsonl
        run -3 --separate-stderr draft-train -m "$FIX" --data bad.jsonl -o h.gguf --epochs 1
        [[ $stderr == *"'bad.jsonl': line 2: "* ]]
        [ ! -e h.gguf ]
    done
}

@test "data/distill-prompts.jsonl is what scripts/mkdistill-prompts makes from the calibration text" {
    "$TOP/scripts/mkdistill-prompts" --calib "$CALIB" -o "$BATS_TEST_TMPDIR/p.jsonl"
    cmp "$TOP/data/distill-prompts.jsonl" "$BATS_TEST_TMPDIR/p.jsonl"
    run -0 jq -e -s 'length > 100 and all(has("prompt") or has("messages"))' "$TOP/data/distill-prompts.jsonl"
    run ! "$TOP/scripts/mkdistill-prompts" --calib "$SHARED/data/wikitext-2-test.raw" -o "$BATS_TEST_TMPDIR/w.jsonl"
}

@test "mkdistill-prompts --plain: 200-word passages from sentence starts, one after every two lines, seeded" {
    cd "$BATS_TEST_TMPDIR"
    local mk="$TOP/scripts/mkdistill-prompts"
    "$mk" --calib "$CALIB" -n 7 -o c.jsonl
    "$mk" --calib "$CALIB" -n 7 --plain 5 -o p.jsonl
    "$mk" --calib "$CALIB" -n 7 --plain 5 --seed 1 -o p1.jsonl
    "$mk" --calib "$CALIB" -n 7 --plain 5 --seed 2 -o p2.jsonl
    cmp p.jsonl p1.jsonl
    ! cmp -s p.jsonl p2.jsonl
    python3 - "$CALIB" <<'PY'
import json, sys
rd = lambda f: [json.loads(l) for l in open(f)]
c, p = rd('c.jsonl'), rd('p.jsonl')
q = [o for o in p if o not in c]
assert len(q) == 5 and len(p) == 12, (len(q), len(p))
# two lines, a passage, ..., the passages past the last pair after them
assert p == c[0:2] + q[0:1] + c[2:4] + q[1:2] + c[4:6] + q[2:3] + c[6:7] + q[3:5], "order"
words = open(sys.argv[1], encoding='utf-8').read().split()
text = ' '.join(words)
for o in q:
    w = o['prompt'].split()
    assert list(o) == ['prompt'] and len(w) == 200, len(w)
    assert '<|endoftext|>' not in o['prompt']
    assert o['prompt'] in text
    i = text.index(o['prompt'])
    assert i == 0 or text[:i].rstrip()[-1] in '.!?"\')]', text[i - 20:i]
assert len({o['prompt'] for o in q}) == 5, "repeated"
PY
    # every passage the text has: none crosses a separator, none repeats
    run -0 "$mk" --calib "$CALIB" -n 0 --plain 100000 -o all.jsonl
    [[ $output == *"--plain: "*" of 100000 passages"* ]]
    [ "$(grep -c . all.jsonl)" -gt 1000 ]
    ! grep -q 'endoftext' all.jsonl
    [ "$(sort all.jsonl | uniq -d | wc -l)" -eq 0 ]
    run ! "$mk" --calib "$CALIB" --plain -1 -o bad.jsonl
    [[ $output == *"--plain must be 0 to 100000"* ]]
    run ! "$mk" --calib "$CALIB" --seed 2 -o bad.jsonl
    [[ $output == *"--seed: only with --self or --plain"* ]]
    run ! "$mk" --calib "$CALIB" --plain 2 --model x.gguf -o bad.jsonl
    [[ $output == *"--model: only with --self"* ]]
    [ ! -e bad.jsonl ]
}

@test "mkdistill-prompts --self: questions the model writes itself, one after each calibration line, none of --exclude's" {
    need_model m SmolLM2-135M-Instruct.Q4_1.gguf
    cd "$BATS_TEST_TMPDIR"
    local mk="$TOP/scripts/mkdistill-prompts"
    "$mk" --calib "$CALIB" -o c.jsonl
    "$mk" --calib "$CALIB" --self 12 --model "$m" -t 1 -o s.jsonl
    "$mk" --calib "$CALIB" --self 12 --model "$m" -t 1 -o s2.jsonl
    cmp s.jsonl s2.jsonl
    # the first question as a held-out prompt: dropped, the others kept
    python3 -c "
import json
c = open('c.jsonl').read().splitlines()
q = [json.loads(l) for l in open('s.jsonl').read().splitlines() if l not in c]
print(json.dumps({'prompt': '  ' + q[0]['messages'][0]['content'].upper()}))" > ex.jsonl
    "$mk" --calib "$CALIB" --self 12 --model "$m" -t 1 --exclude ex.jsonl -o x.jsonl
    python3 - <<'PY'
import json
rd = lambda f: [json.loads(l) for l in open(f)]
c, s, x = rd('c.jsonl'), rd('s.jsonl'), rd('x.jsonl')
ex = json.loads(open('ex.jsonl').read())['prompt']
q = [o for o in s if o not in c]
assert 1 <= len(q) <= 12, len(q)
assert s == [o for i in range(len(c)) for o in [c[i]] + q[i:i + 1]], "not one after each"
for o in q:
    m = o['messages']
    assert len(m) == 1 and m[0]['role'] == 'user' and m[0]['content'].strip() == m[0]['content']
    assert m[0]['content']
norm = lambda t: ' '.join(t.lower().split())
assert len({norm(o['messages'][0]['content']) for o in q}) == len(q), "repeated"
assert norm(q[0]['messages'][0]['content']) == norm(ex)
assert [o for o in x if o not in c] == q[1:]
PY
    run ! "$mk" --calib "$CALIB" --self -1 -o bad.jsonl
    run ! "$mk" --calib "$CALIB" --exclude ex.jsonl -o bad.jsonl
    [[ $output == *"--exclude: only with --self"* ]]
    # -n bounds the calibration lines, --self the questions
    "$mk" --calib "$CALIB" -n 5 --self 12 --model "$m" -t 1 -o n5.jsonl
    [ "$(head -10 n5.jsonl)" = "$(paste -d '\n' <(head -5 c.jsonl) <(grep -vxFf c.jsonl s.jsonl | head -5))" ]
    [ "$(wc -l < n5.jsonl)" -eq "$((5 + $(grep -cvxFf c.jsonl s.jsonl)))" ]
    run ! "$mk" --calib "$CALIB" --self 2 --model /nonexistent.gguf -o bad.jsonl
    [[ $output == *"/nonexistent.gguf"* ]]
    echo '{"prompt": ' > broken.jsonl
    run ! "$mk" --calib "$CALIB" --self 2 --model "$m" --exclude broken.jsonl -o bad.jsonl
    [[ $output == *"'broken.jsonl': line 1"* ]]
    [ ! -e bad.jsonl ]
    # a FIFO is not read as --exclude (standard input is: --exclude -)
    mkfifo fifo
    run -4 timeout 60 "$mk" --calib "$CALIB" --self 2 --model "$m" --exclude fifo -o bad.jsonl
    [[ $output == *"--exclude 'fifo': not a regular file"* ]]
    [ -p fifo ]
    [ -z "$(compgen -G '*.tmp*')" ]
}

# mk_one_line RC ARGS... : scripts/mkdistill-prompts ARGS exits RC with one
# line on stderr (no Python traceback) and nothing on stdout
mk_one_line() {
    local rc=$1
    shift
    run "-$rc" --separate-stderr "$TOP/scripts/mkdistill-prompts" "$@"
    [ "${#stderr_lines[@]}" -eq 1 ] || { echo "stderr: $stderr"; return 1; }
    [[ $stderr == "mkdistill-prompts: "* ]]
    [ -z "$output" ]
}

@test "mkdistill-prompts: an output that is an input is refused even with -f; one that exists only with -f" {
    cd "$BATS_TEST_TMPDIR"
    local mk="$TOP/scripts/mkdistill-prompts"
    head -c 20000 "$CALIB" > c.txt
    cp c.txt c0.txt
    ln -s c.txt c-link
    ln c.txt c-hard
    for o in c.txt c-link c-hard; do
        for f in "" -f; do
            mk_one_line 2 --calib c.txt -n 5 $f -o "$o"
            [[ $stderr == *"'$o': is also an input of this run (--calib): refusing to overwrite it"* ]]
        done
    done
    "$mk" --calib - -n 5 -o - < c.txt > from-stdin.jsonl
    mk_one_line 2 --calib - -n 5 -f -o c-link < c.txt
    [[ $stderr == *"'c-link': is also an input of this run (--calib)"* ]]
    # --exclude too (refused before the model runs: no model needed)
    echo '{"prompt": "x"}' > ex.jsonl
    cp ex.jsonl ex0.jsonl
    mk_one_line 2 --calib c.txt --self 2 --model none.gguf --exclude ex.jsonl -f -o ex.jsonl
    [[ $stderr == *"'ex.jsonl': is also an input of this run (--exclude)"* ]]
    cmp c.txt c0.txt
    cmp ex.jsonl ex0.jsonl
    [ -L c-link ]
    # an existing output: refused, then replaced with -f (or --force)
    "$mk" --calib c.txt -n 5 -o out.jsonl
    mk_one_line 2 --calib c.txt -n 3 -o out.jsonl
    [[ $stderr == *"'out.jsonl': already exists (use --force to overwrite)"* ]]
    [ "$(wc -l < out.jsonl)" -eq 5 ]
    "$mk" --calib c.txt -n 3 -f -o out.jsonl
    [ "$(wc -l < out.jsonl)" -eq 3 ]
    "$mk" --calib c.txt -n 4 --force -o out.jsonl
    [ "$(wc -l < out.jsonl)" -eq 4 ]
    # a symbolic link is followed: its target replaced with -f, the link kept
    ln -s out.jsonl out-link
    mk_one_line 2 --calib c.txt -n 2 -o out-link
    [[ $stderr == *"'out-link': already exists (use --force to overwrite)"* ]]
    "$mk" --calib c.txt -n 2 -f -o out-link
    [ -L out-link ] && [ "$(readlink out-link)" = out.jsonl ]
    [ "$(wc -l < out.jsonl)" -eq 2 ]
    ln -s nowhere.jsonl dangling
    mk_one_line 4 --calib c.txt -n 2 -f -o dangling
    [[ $stderr == *"'dangling': is a symbolic link to nothing"* ]]
    # a FIFO is written in place, a directory refused
    mkfifo fifo
    local rd
    cat fifo > got.jsonl &
    rd=$!
    timeout 60 "$mk" --calib c.txt -n 5 -o fifo
    wait "$rd"
    [ -p fifo ]
    cmp got.jsonl <(head -5 from-stdin.jsonl)
    mkdir dir.jsonl
    mk_one_line 4 --calib c.txt -n 2 -f -o dir.jsonl
    [[ $stderr == *"'dir.jsonl': is a directory"* ]]
    [ -z "$(compgen -G '*.tmp*')" ]
}

@test "mkdistill-prompts: bad input is one line, exit 3 (data) or 4 (I/O); out of memory exit 5" {
    cd "$BATS_TEST_TMPDIR"
    head -c 20000 "$CALIB" > c.txt
    printf 'fine words\n\nthen a \377 byte\n' > bad.txt
    mk_one_line 3 --calib bad.txt -o o.jsonl
    [[ $stderr == *"--calib 'bad.txt': line 3: not UTF-8 (byte 0xff)"* ]]
    mk_one_line 3 --calib - -o o.jsonl < bad.txt
    mk_one_line 4 --calib missing.txt -o o.jsonl
    [[ $stderr == *"--calib 'missing.txt': No such file or directory"* ]]
    mk_one_line 4 --calib . -o o.jsonl
    [[ $stderr == *"--calib '.': not a regular file"* ]]
    for bad in '{"prompt": ' '[1, 2]' '{"messages": 3}' $'{"prompt": "\377"}'; do
        printf '{"prompt": "fine"}\n%s\n' "$bad" > ex.jsonl
        mk_one_line 3 --calib c.txt --self 2 --model none.gguf --exclude ex.jsonl -o o.jsonl
        [[ $stderr == *"'ex.jsonl': line 2: "* ]]
    done
    mk_one_line 4 --calib c.txt --self 2 --model none.gguf --exclude missing.jsonl -o o.jsonl
    [[ $stderr == *"--exclude 'missing.jsonl': No such file or directory"* ]]
    # 30 MB of address space: Python starts and makes c.txt's lines, big.txt
    # (8 MB) does not fit
    run -0 --separate-stderr bash -c 'ulimit -v 30000 && exec "$@"' sh \
        "$TOP/scripts/mkdistill-prompts" --calib c.txt -o small.jsonl
    [ -s small.jsonl ]
    for i in $(seq 20); do cat "$CALIB"; done > big.txt
    run -5 --separate-stderr bash -c 'ulimit -v 30000 && exec "$@"' sh \
        "$TOP/scripts/mkdistill-prompts" --calib big.txt -o o.jsonl
    [ "$stderr" = "mkdistill-prompts: out of memory" ]
    [ ! -e o.jsonl ]
    [ -z "$(compgen -G '*.tmp*')" ]
}

@test "mkdistill-prompts: bad option values are usage errors (exit 2)" {
    cd "$BATS_TEST_TMPDIR"
    local args
    for args in "--every 0" "--variants 7" "--variants 0" "-n -1" "-n x" "--self -1" "--plain 100001" \
                "--seed 1" "--plain 1 --seed -1" "-t 2" "--model m.gguf" "--self 1 -t 0" "--bogus" \
                "--calib - --self 1 --exclude -"; do
        run -2 --separate-stderr "$TOP/scripts/mkdistill-prompts" --calib "$CALIB" $args -o o.jsonl
        [[ $stderr == "mkdistill-prompts: "* ]]
        [[ $stderr == *"usage: mkdistill-prompts "* ]]
    done
    run -2 --separate-stderr "$TOP/scripts/mkdistill-prompts" --calib "$SHARED/data/wikitext-2-test.raw" -o o.jsonl
    [[ $stderr == *"never make prompts from evaluation text"* ]]
    run -0 --separate-stderr "$TOP/scripts/mkdistill-prompts" --help
    [[ $output == *"-f, --force"* ]]
    [ ! -e o.jsonl ]
}

@test "mkdistill-prompts: -o - writes standard output; a full disk is exit 4 and leaves nothing" {
    cd "$BATS_TEST_TMPDIR"
    local mk="$TOP/scripts/mkdistill-prompts"
    "$mk" --calib "$CALIB" -n 9 -o file.jsonl
    run -0 --separate-stderr "$mk" --calib "$CALIB" -n 9 -o -
    [ "$output" = "$(cat file.jsonl)" ]
    [ ! -e - ]
    "$mk" --calib "$CALIB" -n 9 -o - | cmp - file.jsonl
    mk_one_line 4 --calib "$CALIB" -o /dev/full
    [[ $stderr == *"'/dev/full': No space left on device"* ]]
    run -4 --separate-stderr bash -c '"$@" > /dev/full' sh "$mk" --calib "$CALIB" -o -
    [[ $stderr == *"standard output: No space left on device"* ]]
    mount_full
    mk_one_line 4 --calib "$CALIB" -o "$FULL/o.jsonl"
    [[ $stderr == *"No space left on device"* ]]
    [ "$(ls "$FULL")" = fill ]
}

# with_stop_signals CMD ARGS... & : CMD with SIGINT and SIGHUP at their
# default actions (a background job of a non-interactive shell ignores
# SIGINT, a run under nohup SIGHUP, and the script keeps what is ignored
# ignored); it execs, so that $! is CMD's pid
with_stop_signals() {
    exec python3 -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' "$@"
}

@test "mkdistill-prompts: SIGINT, SIGTERM, SIGHUP exit 130, 143, 129 and leave no file" {
    # No race: the text comes from a FIFO held open and never written, so
    # the script has made its temporary output and waits to read when the
    # signal comes.
    cd "$BATS_TEST_TMPDIR"
    local sig code pid w rc
    mkfifo in
    mkdir o
    for sig in INT:130 TERM:143 HUP:129; do
        code=${sig#*:} sig=${sig%:*}
        exec {w}<>in
        with_stop_signals timeout 120 "$TOP/scripts/mkdistill-prompts" --calib - -o o/p.jsonl \
            < in 2> err.txt {w}>&- 3>&- &
        pid=$!
        wait_for_tmp o "$pid"
        kill -"$sig" "$pid"
        rc=0
        wait "$pid" || rc=$?
        exec {w}>&-
        [ "$rc" -eq "$code" ] || { echo "SIG$sig: exit $rc"; cat err.txt; return 1; }
        grep -q "stopped by SIG$sig" err.txt
        [ -z "$(ls -A o)" ]
    done
}

@test "mkdistill-prompts --self: a failing generate's exit status is passed on, in one line" {
    # a copy of the script beside a generate that fails as one out of memory
    mkdir -p "$BATS_TEST_TMPDIR/t/scripts" "$BATS_TEST_TMPDIR/t/bin"
    cp "$TOP/scripts/mkdistill-prompts" "$BATS_TEST_TMPDIR/t/scripts/"
    cd "$BATS_TEST_TMPDIR"
    local rc
    for rc in 3 4 5; do
        printf '#!/bin/sh\necho "generate: failed as %s" >&2\nexit %s\n' "$rc" "$rc" > t/bin/generate
        chmod +x t/bin/generate
        run "-$rc" --separate-stderr t/scripts/mkdistill-prompts --calib "$CALIB" --self 2 \
            --model none.gguf -t 1 -o o.jsonl
        [ "$stderr" = "mkdistill-prompts: generate: failed as $rc" ]
        [ ! -e o.jsonl ]
    done
    [ -z "$(compgen -G '*.tmp*')" ]
}

@test "mkdistill-prompts --self: a generate killed by signal N exits 128+N, in one line" {
    # a copy of the script beside a generate that kills itself (it used to
    # exit 1)
    mkdir -p "$BATS_TEST_TMPDIR/t/scripts" "$BATS_TEST_TMPDIR/t/bin"
    cp "$TOP/scripts/mkdistill-prompts" "$BATS_TEST_TMPDIR/t/scripts/"
    cd "$BATS_TEST_TMPDIR"
    local sig
    for sig in TERM:143 KILL:137 USR1:138; do
        printf '#!/bin/sh
echo "generate: about to die" >&2
kill -%s $$
' "${sig%:*}" \
            > t/bin/generate
        chmod +x t/bin/generate
        run "-${sig#*:}" --separate-stderr timeout 120 t/scripts/mkdistill-prompts \
            --calib "$CALIB" --self 2 --model none.gguf -t 1 -o o.jsonl
        [ "$stderr" = "mkdistill-prompts: generate: killed by SIG${sig%:*}" ]
        [ ! -e o.jsonl ]
    done
    # one that caught the signal and exits 128+N itself is passed on too
    printf '#!/bin/sh
echo "generate: stopped by signal 15" >&2
exit 143
' > t/bin/generate
    run -143 --separate-stderr t/scripts/mkdistill-prompts --calib "$CALIB" --self 2 \
        --model none.gguf -t 1 -o o.jsonl
    [ "$stderr" = "mkdistill-prompts: generate: stopped by signal 15" ]
    [ -z "$(compgen -G '*.tmp*')" ]
}

@test "draft-train: SIGTERM writes a checkpoint and no head; --resume ends with the uninterrupted head" {
    cd "$BATS_TEST_TMPDIR"
    draft-train -m "$FIX" --data text.txt -o full.gguf --epochs 12 --seq-len 32 -q
    term_at_checkpoint part.gguf --data text.txt --epochs 12 --seq-len 32 --checkpoint-every 5 -q
    [ "$st" -eq 143 ]
    [ -e part.gguf.ckpt ]
    [ ! -e part.gguf ]
    [ -z "$(compgen -G '*.tmp.*')" ]
    # another run does not overwrite it unasked
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o part.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5
    [[ $stderr == *"'part.gguf.ckpt' already exists (--resume continues that run, --force overwrites it)"* ]]
    run -0 draft-train -m "$FIX" --data text.txt -o part.gguf --epochs 12 --seq-len 32 \
        --checkpoint-every 5 --resume -q
    [ ! -e part.gguf.ckpt ]
    cmp full.gguf part.gguf
    # a checkpoint of the same run with other options is refused
    term_at_checkpoint opt.gguf --data text.txt --epochs 12 --seq-len 32 --checkpoint-every 5 -q
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o opt.gguf --epochs 12 \
        --seq-len 32 --lr 0.01 --resume
    [[ $stderr == *"written with other options"* ]]
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o opt.gguf --epochs 12 \
        --seq-len 32 --weight-decay 0.5 --resume
    [[ $stderr == *"written with other options"* ]]
    # a run of --weight-decay -0 resumes as the run of 0 it is
    term_at_checkpoint z.gguf --data text.txt --epochs 12 --seq-len 32 --checkpoint-every 5 -q \
        --weight-decay 0
    run -0 draft-train -m "$FIX" --data text.txt -o z.gguf --epochs 12 --seq-len 32 \
        --checkpoint-every 5 --weight-decay -0 --resume -q
    # a checkpoint whose optimizer state or weights were overwritten, even
    # with finite numbers, is refused, naming it (its SHA-256)
    local off
    term_at_checkpoint c.gguf --data text.txt --epochs 12 --seq-len 32 --checkpoint-every 5 -q
    cp c.gguf.ckpt c.orig
    python3 -c "import sys; f = open(sys.argv[1], 'r+b'); f.seek(-64, 2); f.write(b'\x00\x00\x80\x3f' * 16)" c.gguf.ckpt
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume
    [[ $stderr == *"c.gguf.ckpt"*"corrupt checkpoint: the SHA-256 of its weights, optimizer state and metadata"* ]]
    # its metadata too: the time it had spent, lowest bit flipped
    cp c.orig c.gguf.ckpt
    off=$(python3 -c "import sys; b = open(sys.argv[1], 'rb').read(); k = b'eagle.ckpt.elapsed'; print(b.index(k) + len(k) + 4)" c.gguf.ckpt)
    flip_byte c.gguf.ckpt "$off"
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume
    [[ $stderr == *"c.gguf.ckpt"*"corrupt checkpoint"* ]]
    cp c.orig c.gguf.ckpt
    off=$("$PY" -c "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); print(r.data_offset + 64)" c.gguf.ckpt)
    flip_byte c.gguf.ckpt "$off"        # one weight one ulp off
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume
    [[ $stderr == *"corrupt checkpoint"* ]]
    # the recorded SHA-256 itself in capitals: malformed
    cp c.orig c.gguf.ckpt
    python3 -c "
import re, sys
b = open(sys.argv[1], 'rb').read()
m = re.search(rb'[0-9a-f]{64}', b[b.index(b'eagle.ckpt.sha256'):])
i = b.index(b'eagle.ckpt.sha256') + m.start()
open(sys.argv[1], 'wb').write(b[:i] + b[i:i + 64].upper() + b[i + 64:])" c.gguf.ckpt
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume
    [[ $stderr == *"its recorded SHA-256"*"is not 64 lowercase hex digits"* ]]
    # one recorded before the metadata was hashed (the SHA-256 of the
    # weights, then opt.m and opt.v, only) still resumes, to the same head
    cp c.orig c.gguf.ckpt
    "$PY" - c.gguf.ckpt <<'EOF'
import hashlib, sys, gguf
r = gguf.GGUFReader(sys.argv[1])
t = [x for x in r.tensors if not x.name.startswith('opt.')]
t += [x for n in ('opt.m', 'opt.v') for x in r.tensors if x.name == n]
sha = hashlib.sha256(b''.join(x.data.tobytes() for x in t)).hexdigest().encode()
b = open(sys.argv[1], 'rb').read()
i = b.index(b'eagle.ckpt.sha256')
i = b.index(b'\x40\x00\x00\x00\x00\x00\x00\x00', i) + 8     # the value's u64 length, 64
open(sys.argv[1], 'wb').write(b[:i] + sha + b[i + 64:])
EOF
    run -0 draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 12 --seq-len 32 \
        --checkpoint-every 5 --resume -q
    cmp full.gguf c.gguf
    # a head that is no checkpoint is refused
    cp full.gguf x.gguf.ckpt
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o x.gguf --epochs 1 \
        --seq-len 32 --resume
    [[ $stderr == *"eagle.ckpt.step"* ]]
}

@test "draft-train: a stop signal in a long step drops that step (143), the checkpoint holds the steps before it; --resume ends with the uninterrupted head" {
    # One step of all the data's 3000-odd sequences of 3 at --ttt-steps 16
    # takes seconds.  SIGTERM goes once step 1's --json line is out, so
    # step 2 is under way (or about to start, which checkpoints the same);
    # it used to be heeded only after step 2, with its checkpoint.
    cd "$BATS_TEST_TMPDIR"
    local a=(--data text.txt --epochs 2 --seq-len 3 --batch 4096 --arch eagle3 --ttt-steps 16)
    draft-train -m "$FIX" -o full.gguf "${a[@]}" -q
    ready() { grep -q '"type":"step","step":1,' out.json 2> /dev/null; }
    term_once err -m "$FIX" -o part.gguf "${a[@]}" --json > out.json
    [ "$st" -eq 143 ] || { echo "exit $st"; cat err; return 1; }
    grep -Eq "interrupted (in step 2 \(dropped\)|at step 1); checkpoint 'part.gguf.ckpt' " err
    [ "$(gguf_key part.gguf.ckpt eagle3.ckpt.step)" -eq 1 ]
    run ! grep -q '"step":2' out.json
    [ ! -e part.gguf ]
    [ -z "$(compgen -G '*.tmp.*')" ]
    run -0 draft-train -m "$FIX" -o part.gguf "${a[@]}" --resume -q
    [ ! -e part.gguf.ckpt ]
    cmp full.gguf part.gguf
}

# ckpt_set FILE KEY FMT VALUE : the checkpoint's metadata value KEY (after
# "eagle.") packed as FMT, sealed again with the SHA-256 of the weights and
# optimizer state alone (the form of checkpoints before the metadata was
# hashed, which --resume still accepts): its numbers must be checked anyway
ckpt_set() {
    "$PY" - "$@" <<'EOF'
import hashlib, struct, sys, gguf
p, key, fmt, val = sys.argv[1:5]
val = float(val) if fmt in 'fd' else int(val, 0)
b = bytearray(open(p, 'rb').read())
k = b'eagle.' + key.encode()
i = b.index(struct.pack('<Q', len(k)) + k) + 8 + len(k) + 4
struct.pack_into('<' + fmt, b, i, val)
open(p, 'wb').write(b)
r = gguf.GGUFReader(p)
t = [x for x in r.tensors if not x.name.startswith('opt.')]
t += [x for n in ('opt.m', 'opt.v') for x in r.tensors if x.name == n]
sha = hashlib.sha256(b''.join(x.data.tobytes() for x in t)).hexdigest().encode()
i = b.index(b'eagle.ckpt.sha256')
i = b.index(b'\x40\x00\x00\x00\x00\x00\x00\x00', i) + 8
b[i:i + 64] = sha
open(p, 'wb').write(b)
EOF
}

@test "draft-train --resume: a checkpoint's step and times out of range are refused (3), not run" {
    cd "$BATS_TEST_TMPDIR"
    term_at_checkpoint c.gguf --data text.txt --epochs 12 --seq-len 32 --checkpoint-every 5 -q
    [ "$st" -eq 143 ]
    cp c.gguf.ckpt c.orig
    local args=(-m "$FIX" --data text.txt -o c.gguf --epochs 12 --seq-len 32 --checkpoint-every 5
                --resume)
    for bad in "ckpt.step Q 0xffffffffffffffff" "ckpt.step Q 0x8000000000000000" \
               "ckpt.step Q 100000" "ckpt.elapsed f -1e30" "ckpt.elapsed f inf" \
               "ckpt.train_time f 1e30"; do
        cp c.orig c.gguf.ckpt
        ckpt_set c.gguf.ckpt $bad
        run -3 --separate-stderr timeout 120 draft-train "${args[@]}"
        [[ $stderr == *"c.gguf.ckpt"*@(out of range|not a finite number)* ]] ||
            { echo "$bad: $stderr"; return 1; }
        [ ! -e c.gguf ]
    done
    # the same sealing of the checkpoint as it was still resumes
    cp c.orig c.gguf.ckpt
    ckpt_set c.gguf.ckpt ckpt.step Q "$("$PY" -c "import sys, gguf; r = gguf.GGUFReader(sys.argv[1]); f = r.fields['eagle.ckpt.step']; print(int(f.parts[f.data[0]][0]))" c.orig)"
    run -0 draft-train "${args[@]}" -q
}

@test "draft-train: -o never replaces an input (--data, --eval), --force or not; nor a link or device named OUTPUT.ckpt" {
    cd "$BATS_TEST_TMPDIR"
    cp text.txt keep.txt
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o text.txt -f --epochs 1 --seq-len 32
    [[ $stderr == *"'text.txt'"*"is also an input"* ]]
    ln -s text.txt alias.txt
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o alias.txt -f --epochs 1 --seq-len 32
    [[ $stderr == *"is also an input"* ]]
    head -c 3000 text.txt > ev.txt
    cp ev.txt ev.keep
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt --eval ev.txt -o ev.txt -f \
        --epochs 1 --seq-len 32
    [[ $stderr == *"is also an input"* ]]
    cmp text.txt keep.txt && cmp ev.txt ev.keep
    # OUTPUT.ckpt a symbolic link (its target kept) or a device (never written)
    echo victim > victim.txt
    ln -s victim.txt h.gguf.ckpt
    run -4 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf -f --epochs 1 \
        --seq-len 32 --checkpoint-every 1
    [[ $stderr == *"'h.gguf.ckpt': is a symbolic link, not a regular file: refusing to write the checkpoint there"* ]]
    [ "$(cat victim.txt)" = victim ] && [ -L h.gguf.ckpt ] && [ ! -e h.gguf ]
    rm h.gguf.ckpt
    if mknod h.gguf.ckpt c 1 3 2>/dev/null; then
        run -4 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf -f --epochs 1 \
            --seq-len 32 --checkpoint-every 1
        [[ $stderr == *"'h.gguf.ckpt': is a character device, not a regular file"* ]]
        [ -c h.gguf.ckpt ]
    fi
    rm -f h.gguf.ckpt
    # or a FIFO (never opened: no writer waits) or a folder
    mkfifo h.gguf.ckpt
    run -4 --separate-stderr timeout 60 draft-train -m "$FIX" --data text.txt -o h.gguf -f \
        --epochs 1 --seq-len 32 --checkpoint-every 1
    [[ $stderr == *"'h.gguf.ckpt': is a FIFO, not a regular file: refusing to write the checkpoint there"* ]]
    [ -p h.gguf.ckpt ] && [ ! -e h.gguf ]
    rm h.gguf.ckpt
    mkdir h.gguf.ckpt
    run -4 --separate-stderr draft-train -m "$FIX" --data text.txt -o h.gguf -f --epochs 1 \
        --seq-len 32 --checkpoint-every 1
    [[ $stderr == *"'h.gguf.ckpt': is a directory, not a regular file"* ]]
    [ -d h.gguf.ckpt ] && [ ! -e h.gguf ]
}

@test "draft-train: a stop signal while an input blocks (a FIFO without a writer) exits 128 + N, not 4" {
    cd "$BATS_TEST_TMPDIR"
    mkfifo ff
    draft-train -m "$FIX" --data ff -o h.gguf --epochs 1 --seq-len 32 2> err &
    local pid=$! i
    for ((i = 0; i < 2400; i++)); do
        [ "$(cat /proc/$pid/wchan 2> /dev/null)" = wait_for_partner ] && break
        sleep 0.05
    done
    kill -INT $pid
    st=0
    wait $pid || st=$?
    [ "$st" -eq 130 ]
    [ ! -e h.gguf ]
}

@test "draft-train --eval: held out from its own file (never trained on); all the data trains; the cache stays the data's" {
    cd "$BATS_TEST_TMPDIR"
    # a missing --data or --eval file is named
    run -4 --separate-stderr draft-train -m "$FIX" --data nope.txt -o x.gguf --epochs 1
    [ "$stderr" = "draft-train: 'nope.txt': cannot open: No such file or directory" ]
    run -4 --separate-stderr draft-train -m "$FIX" --data text.txt --eval nope.txt -o x.gguf --epochs 1
    [ "$stderr" = "draft-train: --eval 'nope.txt': cannot open: No such file or directory" ]
    run -2 --separate-stderr draft-train -m "$FIX" --data - --eval - -o x.gguf --epochs 1
    [[ $stderr == *"--data and --eval cannot both read standard input"* ]]
    [ ! -e x.gguf ]
    # without it 1/20 of the data's sequences are held out; with it, none
    tail -c 3000 "$CALIB" > ev.txt
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o a.gguf --epochs 1 --seq-len 32 -v
    local nd nh
    nd=$(sed -n 's/.* \([0-9]*\) sequences of 32 (\([0-9]*\) held out).*/\1/p' <<<"$stderr")
    nh=$(sed -n 's/.* \([0-9]*\) sequences of 32 (\([0-9]*\) held out).*/\2/p' <<<"$stderr")
    [ "$nh" -eq $((nd / 20)) ]
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt --eval ev.txt -o b.gguf \
        --epochs 1 --seq-len 32 -v --json
    local ne
    ne=$(sed -n "s/.*(\([0-9]*\) held out: --eval 'ev.txt').*/\1/p" <<<"$stderr")
    [ "$ne" -gt 10 ]
    [[ $stderr == *" $((nd + ne)) sequences of 32 ($ne held out: --eval 'ev.txt')"* ]]
    # every data sequence trains: ceil(nd / 4) steps of --batch 4
    [ "$(jq -s 'map(select(.type == "step")) | length' <<<"$output")" -eq $(((nd + 3) / 4)) ]
    [ "$(jq -s 'map(select(.type == "eval")) | length' <<<"$output")" -eq 1 ]
    # the data itself as --eval: warned
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt --eval text.txt -o c.gguf \
        --epochs 1 --seq-len 32
    [[ $stderr == *"warning: --eval 'text.txt': the same text as --data: the held-out figures are of text trained on"* ]]
    # prompts in --eval are answered by the model (--gen-tokens for them alone)
    printf '{"prompt": "The history of"}\n{"messages": [{"role": "user", "content": "Why is the sky blue?"}]}\n' > evp.jsonl
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt --eval evp.jsonl -o e1.gguf \
        --arch eagle3 --draft-vocab 64 --epochs 1 --seq-len 32 --gen-tokens 40 --cache cache -v
    [[ $stderr == *"'evp.jsonl': 2 prompts, 80 response tokens generated by the model"* ]]
    [[ $stderr == *"held out: --eval 'evp.jsonl'"* ]]
    run -2 --separate-stderr draft-train -m "$FIX" --data text.txt --eval ev.txt -o x.gguf \
        --epochs 1 --seq-len 32 --gen-tokens 40
    [[ $stderr == *"--gen-tokens and --gen-temp need \"prompt\" or \"messages\" lines"* ]]
    # the cache holds the data's features and loss mask only: a run
    # without --eval from it equals one without a cache
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o e2.gguf --arch eagle3 \
        --draft-vocab 64 --epochs 1 --seq-len 32 --cache cache -v
    [[ $stderr == *"positions counted, from the cache)"*"(features from the cache)"* ]]
    draft-train -m "$FIX" --data text.txt -o e3.gguf --arch eagle3 --draft-vocab 64 --epochs 1 \
        --seq-len 32 -q
    cmp e2.gguf e3.gguf
    # --resume with --eval ends with the uninterrupted head; its
    # checkpoint is refused without --eval (another split)
    draft-train -m "$FIX" --data text.txt --eval ev.txt -o full.gguf --epochs 12 --seq-len 32 -q
    term_at_checkpoint part.gguf --data text.txt --eval ev.txt --epochs 12 --seq-len 32 \
        --checkpoint-every 5 -q
    [ "$st" -eq 143 ]
    run -3 --separate-stderr draft-train -m "$FIX" --data text.txt -o part.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume -v
    [[ $stderr == *"written with other options"*"eval=yes"* ]]
    [[ $stderr != *"sequences of 32"* ]]       # refused before the data's preparation
    run -0 draft-train -m "$FIX" --data text.txt --eval ev.txt -o part.gguf --epochs 12 \
        --seq-len 32 --checkpoint-every 5 --resume -q
    cmp full.gguf part.gguf
}

@test "draft-train --weight-decay: AdamW's decay; 0.01 is the default's run, another value another head" {
    cd "$BATS_TEST_TMPDIR"
    run -0 draft-train -m "$FIX" --data text.txt -o a.gguf --epochs 1 --seq-len 32 -q
    run -0 draft-train -m "$FIX" --data text.txt -o b.gguf --epochs 1 --seq-len 32 -q \
        --weight-decay 0.01
    cmp a.gguf b.gguf
    run -0 draft-train -m "$FIX" --data text.txt -o c.gguf --epochs 1 --seq-len 32 -q \
        --weight-decay 0
    run -1 cmp -s a.gguf c.gguf     # differ (1), not missing (2)
    for x in -0.1 10.5 nan 1e400 0x1 ""; do
        run -2 --separate-stderr draft-train -m "$FIX" --data text.txt -o d.gguf --epochs 1 \
            --weight-decay "$x"
        [[ $stderr == *"--weight-decay"* ]]
    done
    [ ! -e d.gguf ]
}

@test "draft-train: --draft-vocab restricts the cross-entropy to the text's most frequent tokens" {
    cd "$BATS_TEST_TMPDIR"
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o a.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 40 -v
    [[ $stderr == *"CE over 40 tokens"* ]]
    run -0 --separate-stderr draft-train -m "$FIX" --data text.txt -o b.gguf --epochs 1 \
        --seq-len 32 --draft-vocab 0 -v
    [[ $stderr != *"CE over 40 tokens"* ]]
    run -1 cmp -s a.gguf b.gguf     # differ (1), not missing (2)
}

@test "draft-train on Gemma 3: --init target (a llama layer's start) is refused (2), nothing written" {
    need_model GEMMA gemma-3-270m.Q4_K_M.gguf
    cd "$BATS_TEST_TMPDIR"
    run -2 --separate-stderr draft-train -m "$GEMMA" --data text.txt -o h.gguf --epochs 1 \
        --arch eagle3 --seq-len 32 --init target
    [ "$stderr" = "draft-train: '$GEMMA': --init target: the head starts from a llama model's last layer, and this is a gemma3 model" ]
    [ ! -e h.gguf ] && [ ! -e h.gguf.ckpt ]
}

@test "draft-train on Gemma 3: a final logit softcap the head cannot honour is refused (2), nothing written" {
    need_model GEMMA gemma-3-270m.Q4_K_M.gguf
    cd "$BATS_TEST_TMPDIR"
    with_softcap "$GEMMA" cap.gguf
    run -0 generate -m cap.gguf -p hi -n 1 -t 2 -q     # the copy loads
    for a in eagle1 eagle3; do
        run -2 --separate-stderr draft-train -m cap.gguf --data text.txt -o h.gguf --epochs 1 \
            --arch $a --seq-len 32
        [ "$stderr" = "draft-train: 'cap.gguf': gemma3.final_logit_softcapping 30: EAGLE heads are trained for models without a final logit softcap" ]
        [ ! -e h.gguf ] && [ ! -e h.gguf.ckpt ]
    done
}
