#!/usr/bin/env bats
# kvstat: options, model inputs (config.json, GGUF header, flags), sizing,
# --compare, workloads, traces, SVG plots, output formats, atomic output.

load common

G="$TOP/tests/golden/kvstat"
VOCAB="$SHARED/vocab"

# jfield TYPE KEY : KEY of the first JSON Lines record of TYPE on stdin
jfield() {
    jq -r --arg t "$1" --arg k "$2" 'select(.type==$t) | .[$k]' | head -1
}

# mkgguf OUT KEY=u32:V KEY=str:S ... : a GGUF v3 header with no tensors
mkgguf() {
    python3 - "$@" <<'EOF'
import struct, sys
def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b
out, kvs = sys.argv[1], []
for a in sys.argv[2:]:
    k, v = a.split("=", 1)
    t, v = v.split(":", 1)
    if t == "boolarr":  # ARRAY of BOOL: "1,0,1"
        bits = [int(x) for x in v.split(",")]
        kvs.append(s(k) + struct.pack("<iIQ", 9, 7, len(bits)) + bytes(bits))
        continue
    if t == "i32" or t == "f32":
        kvs.append(s(k) + struct.pack("<ii" if t == "i32" else "<if", 5 if t == "i32" else 6,
                                      (int if t == "i32" else float)(v)))
        continue
    kvs.append(s(k) + (struct.pack("<iI", 4, int(v)) if t == "u32" else struct.pack("<i", 8) + s(v)))
open(out, "wb").write(b"GGUF" + struct.pack("<Iqq", 3, 0, len(kvs)) + b"".join(kvs))
EOF
}

# A 6-step trace with hand-checkable numbers (see the summary test).
mktrace() {
    python3 - > "$1" <<'EOF'
import json
rows = [  # step time phase running waiting used stored preempt hits
    (0, 10, "prefill", 2, 3, 4, 50, 0, 2),
    (1, 15, "decode", 2, 3, 4, 52, 0, 0),
    (2, 25, "mixed", 3, 2, 7, 100, 0, 0),
    (3, 30, "decode", 3, 2, 10, 150, 0, 0),
    (4, 40, "decode", 2, 3, 8, 120, 1, 0),
    (5, 45, "decode", 2, 3, 8, 122, 0, 0),
]
print(json.dumps({"schema": "kvtrace/1", "type": "header", "model": "test"}))
for st, t, ph, run, wait, used, stored, pre, hits in rows:
    print(json.dumps({"schema": "kvtrace/1", "step": st, "time_ms": t, "running": run,
        "waiting": wait, "blocks_used": used, "blocks_free": 10 - used, "blocks_total": 10,
        "block_size": 16, "tokens_stored": stored, "waste": 1 - stored / (used * 16),
        "preemptions": pre, "prefix_hits": hits, "phase": ph}))
EOF
}

# pngcolours FILE : number of distinct RGBA colours in an 8-bit PNG
pngcolours() {
    python3 - "$1" <<'EOF'
import struct, sys, zlib
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat = 8, b""
while pos < len(d):
    n, t = struct.unpack(">I4s", d[pos:pos + 8])
    body = d[pos + 8:pos + 8 + n]
    pos += 12 + n
    if t == b"IHDR":
        w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif t == b"IDAT":
        idat += body
assert depth == 8, "bit depth"
bpp = {0: 1, 2: 3, 4: 2, 6: 4}[ctype]
raw, stride = zlib.decompress(idat), w * bpp
prev, colours = bytearray(stride), set()
for y in range(h):
    f = raw[y * (stride + 1)]
    line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = line[i - bpp] if i >= bpp else 0
        b = prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c
            pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        colours.add(bytes(line[x:x + bpp]))
    prev = line
print(len(colours))
EOF
}

# ---- options ----

@test "--help prints every option on stdout and exits 0" {
    run -0 --separate-stderr kvstat --help
    [ -z "$stderr" ]
    assert_line --index 0 --partial 'kvstat'
    assert_output --partial 'usage: kvstat [-fhqVv] [-o file]'
    for o in --batch --block-size --compare --csv --ctx --dist --force --groups --head-dim \
             --heads --json --kv-heads --kv-lora-rank --kv-type --layers --lengths --max \
             --mean --mem --n --output --quiet --rope-dim --seed --shape --svg --trace \
             --verbose --version --weights; do
        assert_output --partial -- "$o"
    done
}

@test "--version" {
    run -0 kvstat --version
    assert_output --regexp '^kvstat \(llmkit\) [0-9]+\.[0-9]+\.[0-9]+$'
}

@test "an unknown option is a usage error (2) with the usage line on stderr" {
    run -2 --separate-stderr kvstat --bogus "$G/llama-2-7b.json"
    assert_output ''
    [[ "$stderr" == *"unrecognized option"* ]]
    [[ "$stderr" == *"usage: kvstat [-fhqVv]"* ]]
}

@test "inconsistent or bad option values are usage errors (2)" {
    run -2 --separate-stderr kvstat
    [[ "$stderr" == *"no model, workload or trace given"* ]]
    run -2 --separate-stderr kvstat --json --csv "$G/llama-2-7b.json"
    [[ "$stderr" == *"exclusive"* ]]
    run -2 --separate-stderr kvstat --kv-type q5_k "$G/llama-2-7b.json"
    [[ "$stderr" == *"unknown type 'q5_k'"* ]]
    run -2 --separate-stderr kvstat --mem 12Q "$G/llama-2-7b.json"
    [[ "$stderr" == *"--mem: invalid number '12Q'"* ]]
    run -2 --separate-stderr kvstat --svg x.svg "$G/llama-2-7b.json"
    [[ "$stderr" == *"--svg needs --trace"* ]]
    run -2 --separate-stderr kvstat --dist lognormal
    [[ "$stderr" == *"--dist needs --mean"* ]]
    run -2 --separate-stderr kvstat --dist gaussian --mean 100
    [[ "$stderr" == *"unknown distribution"* ]]
    run -2 --separate-stderr kvstat --groups 4 "$G/llama-2-7b.json"
    [[ "$stderr" == *"--groups needs --compare"* ]]
    run -2 --separate-stderr kvstat --layers 32 "$G/llama-2-7b.json"
    run -2 --separate-stderr kvstat --layers 32 --heads 32
    [[ "$stderr" == *"needs --layers, --heads and --head-dim"* ]]
    run -2 --separate-stderr kvstat --layers 32 --heads 32 --kv-heads 6 --head-dim 128
    [[ "$stderr" == *"do not divide"* ]]
    run -2 --separate-stderr kvstat --compare --groups 6 "$G/llama-2-70b.json"
    [[ "$stderr" == *"--groups 6 does not divide 64 attention heads"* ]]
}

# ---- inputs ----

@test "bad GGUF: bad magic and truncated headers are bad data (3) naming the file" {
    printf 'GGUX\3\0\0\0' > "$BATS_TEST_TMPDIR/magic.gguf"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/magic.gguf"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/magic.gguf': not a GGUF file (bad magic)" ]]
    mkgguf "$BATS_TEST_TMPDIR/full.gguf" general.architecture=str:llama llama.block_count=u32:32 \
        llama.attention.head_count=u32:32 llama.embedding_length=u32:4096
    head -c 60 "$BATS_TEST_TMPDIR/full.gguf" > "$BATS_TEST_TMPDIR/trunc.gguf"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/trunc.gguf"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/trunc.gguf': "* ]]
    head -c 10 "$BATS_TEST_TMPDIR/full.gguf" > "$BATS_TEST_TMPDIR/short.gguf"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/short.gguf"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/short.gguf': "* ]]
    # a valid header without the attention keys
    mkgguf "$BATS_TEST_TMPDIR/nokeys.gguf" general.architecture=str:llama
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/nokeys.gguf"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/nokeys.gguf': no llama.block_count" ]]
}

@test "other bad inputs: not a model (3), bad config (3), missing file (4)" {
    echo 'hello' > "$BATS_TEST_TMPDIR/x.txt"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/x.txt"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/x.txt': not a GGUF file or a JSON config" ]]
    echo '{"num_hidden_layers": 32, "num_attention_heads": 7, "hidden_size": 4096}' > "$BATS_TEST_TMPDIR/c.json"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/c.json"
    [[ "$stderr" == *"'$BATS_TEST_TMPDIR/c.json': no head_dim and hidden size 4096 is not a multiple of 7 heads" ]]
    echo '{"num_hidden_layers": "32"}' > "$BATS_TEST_TMPDIR/d.json"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/d.json"
    [[ "$stderr" == *"'num_hidden_layers' is not a non-negative integer"* ]]
    echo '{"num_hidden_layers": 32,' > "$BATS_TEST_TMPDIR/e.json"
    run -3 --separate-stderr kvstat "$BATS_TEST_TMPDIR/e.json"
    [[ "$stderr" == *"invalid JSON"* ]]
    run -4 --separate-stderr kvstat "$BATS_TEST_TMPDIR/nope.gguf"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/nope.gguf': cannot open: No such file or directory" ]]
}

@test "config.json: Llama-2-7B per token, per sequence, per batch" {
    run -0 --separate-stderr kvstat --json --batch 8 "$G/llama-2-7b.json"
    [ "$(jfield model attention <<<"$output")" = MHA ]
    # 2 * 32 layers * 32 heads * 128 * 2 bytes = 524288; x 4096 = 2 GiB; x 8 = 16 GiB
    [ "$(jfield model bytes_per_token <<<"$output")" = 524288 ]
    [ "$(jfield model ctx <<<"$output")" = 4096 ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = 2147483648 ]
    [ "$(jfield model bytes_per_batch <<<"$output")" = 17179869184 ]
    # the table shows the same in binary units
    run -0 kvstat "$G/llama-2-7b.json"
    assert_line --regexp '^bytes_per_token +512 KiB$'
    assert_line --regexp '^bytes_per_seq +2 GiB$'
}

@test "a context past 2^30 tokens is counted as 2^30, with a warning; --ctx sets another" {
    sed 's/"max_position_embeddings": *[0-9]*/"max_position_embeddings": 4294967295/' \
        "$G/llama-2-7b.json" > "$BATS_TEST_TMPDIR/big.json"
    grep -q 4294967295 "$BATS_TEST_TMPDIR/big.json"
    run -0 --separate-stderr kvstat --json "$BATS_TEST_TMPDIR/big.json"
    [ "$(jfield model ctx <<<"$output")" = 1073741824 ]
    [[ "$stderr" == *"big.json': its context of 4294967295 tokens counted as 1073741824"* ]]
    run -0 --separate-stderr kvstat --json --ctx 4096 "$BATS_TEST_TMPDIR/big.json"
    [ "$(jfield model ctx <<<"$output")" = 4096 ]
    [ -z "$stderr" ]
    run -0 --separate-stderr kvstat --json "$G/llama-2-7b.json"
    [ -z "$stderr" ]
}

@test "config.json: every fixture's bytes per token (hand-computed)" {
    # falcon-7b MQA 2*32*1*64*2; starcoder MQA 2*40*1*128*2; Llama-2-70B 2*80*8*128*2;
    # Mistral 2*32*8*128*2; Qwen2-7B 2*28*4*128*2; Gemma-3-4B (text_config) 2*34*4*256*2;
    # DeepSeek-V2 MLA 60*(512+64)*2; DeepSeek-LLM-67B 2*95*8*128*2
    for c in falcon-7b:8192:MQA starcoder:20480:MQA llama-2-70b:327680:GQA mistral-7b:131072:GQA \
             qwen2-7b:57344:GQA gemma-3-4b-it:139264:GQA deepseek-v2:69120:MLA \
             deepseek-llm-67b:389120:GQA; do
        IFS=: read -r name bytes attn <<<"$c"
        run -0 --separate-stderr kvstat --json "$G/$name.json"
        [ "$(jfield model bytes_per_token <<<"$output")" = "$bytes" ] || { echo "$name"; false; }
        [ "$(jfield model attention <<<"$output")" = "$attn" ] || { echo "$name"; false; }
    done
}

@test "config.json from a directory and from stdin" {
    mkdir "$BATS_TEST_TMPDIR/m"
    cp "$G/mistral-7b.json" "$BATS_TEST_TMPDIR/m/config.json"
    run -0 --separate-stderr kvstat --json "$BATS_TEST_TMPDIR/m"
    [ "$(jfield model bytes_per_token <<<"$output")" = 131072 ]
    [ "$(jfield model sliding_window <<<"$output")" = 4096 ]
    [ "$(jfield model swa_layers <<<"$output")" = 32 ]
    [ -z "$stderr" ]
    run -0 --separate-stderr kvstat -q --json - < "$G/deepseek-v2.json"
    [ "$(jfield model input <<<"$output")" = '<stdin>' ]
    [ "$(jfield model bytes_per_token <<<"$output")" = 69120 ]
    [ -z "$stderr" ]
}

@test "GGUF headers: vocab files, an MLA header, stdin" {
    # ggml-vocab-llama-spm has Llama-2-7B's dimensions; falcon's has one KV head
    run -0 kvstat --json "$VOCAB/ggml-vocab-llama-spm.gguf" "$VOCAB/ggml-vocab-falcon.gguf"
    [ "$(jq -r 'select(.type=="model") | .bytes_per_token' <<<"$output" | paste -sd ' ')" = "524288 8192" ]
    mkgguf "$BATS_TEST_TMPDIR/ds.gguf" general.architecture=str:deepseek2 deepseek2.block_count=u32:60 \
        deepseek2.attention.head_count=u32:128 deepseek2.attention.head_count_kv=u32:128 \
        deepseek2.attention.key_length=u32:192 deepseek2.attention.value_length=u32:128 \
        deepseek2.attention.kv_lora_rank=u32:512 deepseek2.rope.dimension_count=u32:64
    run -0 kvstat --json "$BATS_TEST_TMPDIR/ds.gguf"
    [ "$(jfield model attention <<<"$output")" = MLA ]
    [ "$(jfield model bytes_per_token <<<"$output")" = 69120 ]
    run -0 kvstat --json - < "$VOCAB/ggml-vocab-llama-spm.gguf"
    [ "$(jfield model bytes_per_token <<<"$output")" = 524288 ]
    cat "$VOCAB/ggml-vocab-falcon.gguf" | kvstat --json - > "$BATS_TEST_TMPDIR/p.jsonl"
    [ "$(jfield model bytes_per_token < "$BATS_TEST_TMPDIR/p.jsonl")" = 8192 ]
}

@test "real models: SmolLM2 (GQA 9/3) and Gemma 3 (MQA, sliding window)" {
    need_model smol SmolLM2-135M-Instruct.Q4_1.gguf
    need_model gemma gemma-3-270m.Q4_K_M.gguf
    # 2 * 30 * 3 * 64 * 2 = 23040; 2 * 18 * 1 * 256 * 2 = 18432
    run -0 --separate-stderr kvstat --json "$smol" "$gemma"
    [ "$(jq -r 'select(.type=="model") | .bytes_per_token' <<<"$output" | paste -sd ' ')" = "23040 18432" ]
    [ "$(jq -r 'select(.type=="model") | .swa_layers' <<<"$output" | paste -sd ' ')" = "null 15" ]
    # weights default to the GGUF's tensor data
    run -0 kvstat -q --json "$smol" --mem 1GiB
    w=$(jfield model weights <<<"$output")
    [ "$w" -gt 90000000 ]
    [ "$w" -lt "$(stat -c %s "$smol")" ]
}

@test "a model from flags, dense and MLA" {
    run -0 kvstat --json --layers 32 --heads 32 --head-dim 128
    [ "$(jfield model bytes_per_token <<<"$output")" = 524288 ]
    [ "$(jfield model input <<<"$output")" = flags ]
    run -0 kvstat --json --layers 60 --heads 128 --head-dim 128 --kv-lora-rank 512 --rope-dim 64
    [ "$(jfield model attention <<<"$output")" = MLA ]
    [ "$(jfield model bytes_per_token <<<"$output")" = 69120 ]
}

@test "--kv-type counts block scales: q8_0 34 B and q4_0 18 B per 32 values" {
    # Llama-2-7B: a 4096-value row is 128 blocks: 4352 B (q8_0), 2304 B (q4_0); x 2 x 32 layers
    for c in f32:1048576 bf16:524288 fp8:262144 q8_0:278528 q4_0:147456; do
        IFS=: read -r t bytes <<<"$c"
        run -0 kvstat --json --kv-type "$t" "$G/llama-2-7b.json"
        [ "$(jfield model bytes_per_token <<<"$output")" = "$bytes" ] || { echo "$t"; false; }
    done
}

# ---- memory budgets ----

@test "--mem and --weights: sequences that fit, longest context" {
    # 24 GiB - 13 GiB = 11 GiB = 1408 blocks of 16 tokens x 512 KiB; 256 blocks per 4096-token seq
    run -0 kvstat --json "$G/llama-2-7b.json" --mem 24GiB --weights 13GiB
    [ "$(jfield model kv_budget <<<"$output")" = 11811160064 ]
    [ "$(jfield model max_seqs <<<"$output")" = 5 ]
    [ "$(jfield model max_ctx <<<"$output")" = 22528 ]
    [ "$(jfield model fits <<<"$output")" = true ]
    # sizes: 24G is 24GiB
    run -0 kvstat --json "$G/llama-2-7b.json" --mem 24G --weights 13G
    [ "$(jfield model max_seqs <<<"$output")" = 5 ]
    # 8 sequences of 4096 do not fit; 4 of 5632 tokens do
    run -0 kvstat --json "$G/llama-2-7b.json" --mem 24GiB --weights 13GiB --batch 8
    [ "$(jfield model fits <<<"$output")" = false ]
    run -0 kvstat --json "$G/llama-2-7b.json" --mem 24GiB --weights 13GiB --batch 4
    [ "$(jfield model max_ctx <<<"$output")" = 5632 ]
    # weights given as a file: its size
    head -c 1048576 /dev/zero > "$BATS_TEST_TMPDIR/w.bin"
    run -0 kvstat --json "$G/falcon-7b.json" --mem 2MiB --weights "$BATS_TEST_TMPDIR/w.bin"
    [ "$(jfield model kv_budget <<<"$output")" = 1048576 ]
    # 1 MiB / (16 x 8 KiB) = 8 blocks; a 2048-token sequence needs 128
    [ "$(jfield model max_seqs <<<"$output")" = 0 ]
    [ "$(jfield model max_ctx <<<"$output")" = 128 ]
    # a --weights FILE that is no regular file: an I/O error (4), naming what it is
    mkfifo "$BATS_TEST_TMPDIR/w.fifo"
    run -4 --separate-stderr kvstat --json "$G/falcon-7b.json" --mem 2MiB --weights "$BATS_TEST_TMPDIR/w.fifo"
    [ "$stderr" = "kvstat: --weights: '$BATS_TEST_TMPDIR/w.fifo': is a FIFO, not a regular file" ]
    run -4 --separate-stderr kvstat --json "$G/falcon-7b.json" --mem 2MiB --weights "$BATS_TEST_TMPDIR"
    [ "$stderr" = "kvstat: --weights: '$BATS_TEST_TMPDIR': is a directory, not a regular file" ]
}

# ---- --compare ----

@test "--compare: GQA 4x at 32K (Mistral-7B), MQA 71x (falcon-7b), MLA 98.2% (DeepSeek-V2)" {
    run -0 kvstat -q --json --compare --ctx 32K "$G/mistral-7b.json"
    [ "$(jq -r 'select(.variant=="MHA") | .bytes_per_seq' <<<"$output")" = 17179869184 ]
    [ "$(jq -r 'select(.variant=="GQA-8") | "\(.bytes_per_seq) \(.reduction) \(.own)"' <<<"$output")" = "4294967296 4 true" ]
    run -0 kvstat --json --compare "$G/falcon-7b.json"
    [ "$(jq -r 'select(.type=="variant") | .variant' <<<"$output" | paste -sd ' ')" = "MHA MQA MLA-256+32" ]
    [ "$(jq -r 'select(.variant=="MQA") | "\(.bytes_per_token) \(.reduction)"' <<<"$output")" = "8192 71" ]
    run -0 kvstat --json --compare "$G/deepseek-v2.json"
    [ "$(jq -r 'select(.variant=="MHA") | .bytes_per_token' <<<"$output")" = 3932160 ]
    [ "$(jq -r 'select(.type=="variant" and .attention=="MLA") | "\(.variant) \(.own) \(.saving)"' <<<"$output")" = "MLA-512+64 true 0.982421875" ]
    run -0 kvstat --json --compare --groups 16 --kv-lora-rank 256 --rope-dim 32 "$G/llama-2-70b.json"
    [ "$(jq -r 'select(.type=="variant" and .attention=="GQA") | "\(.variant) \(.reduction) \(.own)"' <<<"$output")" = "GQA-16 4 false" ]
    [ "$(jq -r 'select(.type=="variant" and .attention=="MLA") | "\(.variant) \(.bytes_per_token)"' <<<"$output")" = "MLA-256+32 46080" ]
    run -0 kvstat --compare "$G/llama-2-70b.json"
    assert_line --regexp '^meta-llama/Llama-2-70b-hf +GQA-8 +GQA +yes .* 8\.00x +87\.50%$'
}

# ---- workloads ----

@test "workload: ShareGPT-like lengths waste 60-80% contiguous, under 4% paged" {
    run -0 --separate-stderr kvstat --json --dist lognormal --mean 161,338 --max 2048 --n 20000 --seed 1
    max=$(jq -r 'select(.policy=="contiguous-max") | .waste' <<<"$output")
    paged=$(jq -r 'select(.policy=="paged") | .waste' <<<"$output")
    python3 -c "import sys; m, p = $max, $paged; sys.exit(0 if 0.6 < m < 0.8 and p < 0.04 else 1)"
    [[ "$stderr" == *"requests clipped to --max 2048"* ]]
    # seeded: the same numbers again, others with another seed
    run -0 kvstat -q --json --dist lognormal --mean 161,338 --max 2048 --n 20000 --seed 1
    [ "$(jq -r 'select(.policy=="paged") | .waste' <<<"$output")" = "$paged" ]
    run -0 kvstat -q --json --dist lognormal --mean 161,338 --max 2048 --n 20000 --seed 2
    [ "$(jq -r 'select(.policy=="paged") | .waste' <<<"$output")" != "$paged" ]
}

@test "workload: concurrency in --mem, every distribution runs" {
    run -0 kvstat -q --json "$G/llama-2-7b.json" --mem 24GiB --weights 13GiB \
        --dist lognormal --mean 161,338 --max 2048 --n 20000
    # contiguous-max: 11 GiB / (2048 x 512 KiB) = 11 requests
    [ "$(jq -r 'select(.policy=="contiguous-max") | .concurrency' <<<"$output")" = 11 ]
    p=$(jq -r 'select(.policy=="paged") | .concurrency' <<<"$output")
    [ "$p" -gt 33 ]
    for d in fixed uniform geometric exponential lognormal zipf pareto; do
        run -0 kvstat -q --json --dist "$d" --mean 300 --max 1024 --n 500 --block-size 32
        [ "$(jfield workload requests <<<"$output")" = 500 ] || { echo "$d"; false; }
    done
    run -0 kvstat -q --json --dist fixed --mean 100,50 --max 1024 --n 10
    [ "$(jfield workload mean_len <<<"$output")" = 150 ]
}

@test "workload: --lengths file, hand-computed waste" {
    # prompt 7, output 2, blocks of 4: stores 8 then 9 tokens; paged holds 8 then
    # 12 slots (waste 1 - 17/20), contiguous-max 16 + 16 (1 - 17/32)
    printf '# prompt output\n7 2\n' > "$BATS_TEST_TMPDIR/l.txt"
    run -0 kvstat --json --lengths "$BATS_TEST_TMPDIR/l.txt" --max 16 --block-size 4
    [ "$(jq -r 'select(.policy=="paged") | .waste' <<<"$output")" = 0.15 ]
    [ "$(jq -r 'select(.policy=="contiguous-max") | .waste' <<<"$output")" = 0.46875 ]
    [ "$(jq -r 'select(.policy=="contiguous-oracle") | .final_waste' <<<"$output")" = 0 ]
    printf '100 20\n30,5\n\n' > "$BATS_TEST_TMPDIR/m.txt"
    run -0 kvstat --json --lengths "$BATS_TEST_TMPDIR/m.txt"
    [ "$(jfield workload requests <<<"$output")" = 2 ]
    [ "$(jfield workload max_len <<<"$output")" = 120 ]
    printf '10 20\n10 x\n' > "$BATS_TEST_TMPDIR/bad.txt"
    run -3 --separate-stderr kvstat --lengths "$BATS_TEST_TMPDIR/bad.txt"
    [[ "$stderr" == "kvstat: '$BATS_TEST_TMPDIR/bad.txt': line 2: expected 'PROMPT OUTPUT'"* ]]
}

# ---- traces ----

@test "--trace: summary and per-phase table of a trace" {
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    run -0 kvstat --json --trace "$BATS_TEST_TMPDIR/t.jsonl"
    t() { jfield trace "$1" <<<"$output"; }
    [ "$(t steps)" = 6 ]
    [ "$(t duration_ms)" = 35 ]
    [ "$(t peak_blocks_used)" = 10 ]
    [ "$(t peak_step)" = 3 ]
    # mean blocks (4+4+7+10+8+8)/6 = 6.8333; waste 1 - 594/656
    [ "$(t mean_blocks_used)" = 6.83333333 ]
    [ "$(t mean_utilisation)" = 0.683333333 ]
    [ "$(t peak_utilisation)" = 1 ]
    [ "$(t waste)" = 0.0945121951 ]
    [ "$(t preemptions)" = 1 ]
    [ "$(t prefix_hits)" = 2 ]
    [ "$(t peak_running)" = 3 ]
    [ "$(jq -r 'select(.type=="phase") | "\(.phase):\(.steps):\(.time_ms):\(.mean_blocks_used)"' <<<"$output" | paste -sd ' ')" = \
      "prefill:1:0:4 decode:4:25:7.5 mixed:1:10:7" ]
    # with one model, blocks in bytes: 10 blocks x 16 tokens x 8 KiB (falcon-7b)
    run -0 kvstat --json --trace "$BATS_TEST_TMPDIR/t.jsonl" "$G/falcon-7b.json"
    [ "$(jfield trace peak_bytes <<<"$output")" = 1310720 ]
    # the table
    run -0 kvstat --trace - < "$BATS_TEST_TMPDIR/t.jsonl"
    assert_line --regexp '^peak_blocks_used +10$'
    assert_line --regexp '^decode +4 +25 +7\.5 +75\.00% '
}

@test "--trace: bad lines are bad data (3) naming file and line" {
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    f="$BATS_TEST_TMPDIR/b.jsonl"
    { head -3 "$BATS_TEST_TMPDIR/t.jsonl"; echo '{"schema":"kvtrace/1","step":9}'; } > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == "kvstat: '$f': line 4: missing 'time_ms'" ]]
    sed 's/"blocks_free": 6/"blocks_free": 5/' "$BATS_TEST_TMPDIR/t.jsonl" > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == *"line 2: blocks_used 4 + blocks_free 5 != blocks_total 10" ]]
    sed 's,kvtrace/1,kvtrace/2,' "$BATS_TEST_TMPDIR/t.jsonl" > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == *"line 1: unsupported schema 'kvtrace/2'"* ]]
    { cat "$BATS_TEST_TMPDIR/t.jsonl"; tail -1 "$BATS_TEST_TMPDIR/t.jsonl"; } > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == *"line 8: step 5 does not follow step 5" ]]
    echo 'not json' > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == *"line 1: invalid JSON"* ]]
    : > "$f"
    run -3 --separate-stderr kvstat --trace "$f"
    [[ "$stderr" == *"no step records in trace" ]]
}

@test "--svg renders: a standalone SVG that rasterises to a non-blank image" {
    command -v rsvg-convert >/dev/null || skip "rsvg-convert (librsvg2-bin) not installed"
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    run -0 kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl" --svg "$BATS_TEST_TMPDIR/t.svg" -q
    head -c 200 "$BATS_TEST_TMPDIR/t.svg" | grep -q '<svg xmlns="http://www.w3.org/2000/svg"'
    grep -q '>blocks used<' "$BATS_TEST_TMPDIR/t.svg"
    grep -q '>time (ms)<' "$BATS_TEST_TMPDIR/t.svg"
    rsvg-convert -f png -o "$BATS_TEST_TMPDIR/t.png" "$BATS_TEST_TMPDIR/t.svg"
    n=$(pngcolours "$BATS_TEST_TMPDIR/t.png")
    echo "colours: $n"
    [ "$n" -gt 10 ]
    # a blank SVG of the same size has one colour: the check can fail
    printf '<svg xmlns="http://www.w3.org/2000/svg" width="90" height="52"><rect width="90" height="52" fill="#fff"/></svg>' \
        > "$BATS_TEST_TMPDIR/blank.svg"
    rsvg-convert -f png -o "$BATS_TEST_TMPDIR/blank.png" "$BATS_TEST_TMPDIR/blank.svg"
    [ "$(pngcolours "$BATS_TEST_TMPDIR/blank.png")" = 1 ]
    # a long trace is thinned but keeps its peaks; --svg - writes the plot to stdout
    python3 -c '
import json
for s in range(5000):
    u = 900 if s == 3333 else s % 400
    print(json.dumps({"schema":"kvtrace/1","step":s,"time_ms":s*2.5,"running":s%7,"waiting":s%5,
      "blocks_used":u,"blocks_free":1000-u,"blocks_total":1000,"block_size":16,"tokens_stored":u*16,
      "waste":0,"preemptions":0,"prefix_hits":0,"phase":"decode"}))' > "$BATS_TEST_TMPDIR/long.jsonl"
    kvstat --trace "$BATS_TEST_TMPDIR/long.jsonl" --svg - > "$BATS_TEST_TMPDIR/long.svg"
    grep -q 'peak 900 of 1000 blocks' "$BATS_TEST_TMPDIR/long.svg"
    rsvg-convert -f png -o "$BATS_TEST_TMPDIR/long.png" "$BATS_TEST_TMPDIR/long.svg"
    [ "$(pngcolours "$BATS_TEST_TMPDIR/long.png")" -gt 10 ]
}

# ---- output ----

@test "--json is valid JSON Lines with a schema and a final summary" {
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    run -0 kvstat -q --json --compare --mem 80GiB "$G/llama-2-70b.json" "$G/deepseek-v2.json" \
        --dist zipf --mean 200,400 --max 4096 --n 100 --trace "$BATS_TEST_TMPDIR/t.jsonl"
    while IFS= read -r line; do
        python3 -m json.tool <<<"$line" > /dev/null
        [ "$(jq -r .schema <<<"$line")" = kvstat/1 ]
    done <<<"$output"
    [ "$(tail -1 <<<"$output" | jq -r .type)" = summary ]
    [ "$(tail -1 <<<"$output" | jq -c '[.models, .variants, .policies, .trace_steps]')" = "[2,8,8,6]" ]
    # keys are snake_case
    if jq -r 'keys[]' <<<"$output" | grep -v '^[a-z0-9_]*$'; then return 1; fi
}

@test "--csv has one header line per record type" {
    run -0 kvstat -q --csv --compare "$G/llama-2-7b.json"
    assert_line --index 0 --regexp '^type,input,name,arch,attention,'
    assert_line --index 1 --regexp '^model,.*/llama-2-7b.json,meta-llama/Llama-2-7b-hf,llama,MHA,32,32,32,128,128,,,4096,,,f16,16,262144,524288,'
    # (a blank line separates the record types; bats' lines skip it)
    assert_line --index 2 --regexp '^type,model,variant,'
    assert_line --index 3 --regexp '^variant,meta-llama/Llama-2-7b-hf,MHA,MHA,true,32,,,262144,524288,'
}

@test "-o writes atomically; an existing file is kept unless -f" {
    run -0 kvstat --json "$G/llama-2-7b.json"
    expect=$output
    run -0 kvstat --json "$G/llama-2-7b.json" -o "$BATS_TEST_TMPDIR/out.jsonl"
    assert_output ''
    [ "$(cat "$BATS_TEST_TMPDIR/out.jsonl")" = "$expect" ]
    echo keep > "$BATS_TEST_TMPDIR/k.txt"
    run -2 --separate-stderr kvstat "$G/llama-2-7b.json" -o "$BATS_TEST_TMPDIR/k.txt"
    [[ "$stderr" == *"already exists (use --force to overwrite)"* ]]
    [ "$(cat "$BATS_TEST_TMPDIR/k.txt")" = keep ]
    run -0 kvstat -f --json "$G/llama-2-7b.json" -o "$BATS_TEST_TMPDIR/k.txt"
    [ "$(cat "$BATS_TEST_TMPDIR/k.txt")" = "$expect" ]
    [ -z "$(ls "$BATS_TEST_TMPDIR" | grep '\.tmp\.')" ]
}

@test "no output file after a failure" {
    mktrace "$BATS_TEST_TMPDIR/t.jsonl"
    printf 'GGUX' > "$BATS_TEST_TMPDIR/bad.gguf"
    run -3 kvstat "$G/llama-2-7b.json" "$BATS_TEST_TMPDIR/bad.gguf" -o "$BATS_TEST_TMPDIR/o.txt"
    [ ! -e "$BATS_TEST_TMPDIR/o.txt" ]
    echo '{"schema":"kvtrace/1"}' >> "$BATS_TEST_TMPDIR/t.jsonl"
    run -3 kvstat --trace "$BATS_TEST_TMPDIR/t.jsonl" --svg "$BATS_TEST_TMPDIR/p.svg" -o "$BATS_TEST_TMPDIR/o.txt"
    [ ! -e "$BATS_TEST_TMPDIR/p.svg" ]
    [ ! -e "$BATS_TEST_TMPDIR/o.txt" ]
    [ -z "$(ls "$BATS_TEST_TMPDIR" | grep '\.tmp\.')" ]
}

# ---- sliding windows: each layer keeps its window or the whole context ----

@test "sliding windows: Gemma 3 at --ctx 32768, 3 global and 15 local layers of 512 (GGUF, hand-computed)" {
    need_model gemma gemma-3-270m.Q4_K_M.gguf
    # a layer's token: 1 KV head * 256 * (K + V) * 2 bytes = 1024;
    # 3 * 32768 * 1024 + 15 * 512 * 1024 = 108527616 (all in full: 603979776)
    run -0 --separate-stderr kvstat --json --ctx 32768 "$gemma"
    [ "$(jfield model bytes_per_seq <<<"$output")" = 108527616 ]
    [ "$(jfield model bytes_per_seq_no_window <<<"$output")" = 603979776 ]
    [ "$(jfield model bytes_per_token <<<"$output")" = 18432 ]
    [ -z "$stderr" ]
    # short of the window every layer keeps everything: 18 * 300 * 1024
    run -0 kvstat --json --ctx 300 "$gemma"
    [ "$(jfield model bytes_per_seq <<<"$output")" = 5529600 ]
    # a budget in blocks of 16, as generate's pool holds them: a window
    # layer keeps its 512 tokens, 128 of slack and a 512-token chunk, 72
    # blocks, and a partial block at each end: 74 (kv_swa_slots); per
    # sequence (3 * 2048 + 15 * 74) * 16 * 1024 = 118849536 (generate's
    # kv_bytes), so 1 GiB holds 9; the longest context for one sequence, b
    # blocks: (3 * 16 * b + 15 * 74 * 16) * 1024 <= 2^30 -> b = 21475
    run -0 kvstat --json --ctx 32768 --mem 1GiB --weights 0 "$gemma"
    [ "$(jfield model bytes_per_seq_paged <<<"$output")" = 118849536 ]
    [ "$(jfield model max_seqs <<<"$output")" = 9 ]
    [ "$(jfield model max_ctx <<<"$output")" = $((21475 * 16)) ]
    # at 32760 tokens the full layers take 2048 blocks all the same
    run -0 kvstat --json --ctx 32760 --mem 118849535 --weights 0 "$gemma"
    [ "$(jfield model max_seqs <<<"$output")" = 0 ]
    run -0 kvstat --json --ctx 32760 --mem 118849536 --weights 0 "$gemma"
    [ "$(jfield model max_seqs <<<"$output")" = 1 ]
}

@test "sliding windows from config.json: Gemma 3's pattern of 6, layer_types, Qwen2's use_sliding_window false" {
    # gemma-3-4b: 34 layers, every 6th global (5), 29 local of 1024; a token
    # in a layer: 4 * 256 * 2 * 2 = 4096 bytes
    run -0 --separate-stderr kvstat --json --ctx 32768 "$G/gemma-3-4b-it.json"
    [ "$(jfield model swa_layers <<<"$output")" = 29 ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = $(( (5 * 32768 + 29 * 1024) * 4096 )) ]
    # layer_types says which layers slide, whatever the pattern
    jq '.text_config.layer_types = [range(34) | if . < 30 then "sliding_attention" else "full_attention" end]' \
        "$G/gemma-3-4b-it.json" > "$BATS_TEST_TMPDIR/lt.json"
    run -0 kvstat --json --ctx 32768 "$BATS_TEST_TMPDIR/lt.json"
    [ "$(jfield model swa_layers <<<"$output")" = 30 ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = $(( (4 * 32768 + 30 * 1024) * 4096 )) ]
    # Qwen2's config has a sliding_window it does not use
    jq '.sliding_window = 4096 | .use_sliding_window = false' "$G/qwen2-7b.json" > "$BATS_TEST_TMPDIR/q.json"
    run -0 kvstat --json --ctx 32768 "$BATS_TEST_TMPDIR/q.json"
    [ "$(jfield model sliding_window <<<"$output")" = null ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = $((57344 * 32768)) ]
    # --compare rows count every layer in full, and say so
    run -0 --separate-stderr kvstat --json --compare "$G/gemma-3-4b-it.json"
    [[ "$stderr" == *"29 of 34 layers use a 1024-token sliding window; the attention comparison"* ]]
}

@test "sliding windows in a GGUF: a per-layer mask (BOOL array) and a period" {
    mkgguf "$BATS_TEST_TMPDIR/m.gguf" general.architecture=str:gemma3 gemma3.block_count=u32:4 \
        gemma3.attention.head_count=u32:4 gemma3.attention.head_count_kv=u32:2 \
        gemma3.attention.key_length=u32:64 gemma3.attention.value_length=u32:64 \
        gemma3.attention.sliding_window=u32:100 \
        gemma3.attention.sliding_window_pattern=boolarr:1,0,1,1
    # a layer's token: 2 * 64 * 2 * 2 = 512 bytes; 1 full layer, 3 of 100
    run -0 kvstat --json --ctx 1000 "$BATS_TEST_TMPDIR/m.gguf"
    [ "$(jfield model swa_layers <<<"$output")" = 3 ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = $(( (1000 + 3 * 100) * 512 )) ]
    mkgguf "$BATS_TEST_TMPDIR/p.gguf" general.architecture=str:gemma3 gemma3.block_count=u32:4 \
        gemma3.attention.head_count=u32:4 gemma3.attention.head_count_kv=u32:2 \
        gemma3.attention.key_length=u32:64 gemma3.attention.value_length=u32:64 \
        gemma3.attention.sliding_window=u32:100 gemma3.attention.sliding_window_pattern=u32:2
    run -0 kvstat --json --ctx 1000 "$BATS_TEST_TMPDIR/p.gguf"
    [ "$(jfield model swa_layers <<<"$output")" = 2 ]
    [ "$(jfield model bytes_per_seq <<<"$output")" = $(( (2 * 1000 + 2 * 100) * 512 )) ]
}

@test "a sliding-window layout that does not fit the layers is bad data (3), not the family's default" {
    local m="$BATS_TEST_TMPDIR/m.gguf" c="$BATS_TEST_TMPDIR/c.json"
    gg() {   # PATTERN MESSAGE
        mkgguf "$m" general.architecture=str:gemma3 gemma3.block_count=u32:4 \
            gemma3.attention.head_count=u32:4 gemma3.attention.head_count_kv=u32:2 \
            gemma3.attention.key_length=u32:64 gemma3.attention.value_length=u32:64 \
            gemma3.attention.sliding_window=u32:100 gemma3.attention.sliding_window_pattern=$1
        run -3 --separate-stderr kvstat --json "$m"
        [[ "$stderr" == *"'$m': "*"$2"* ]] || { echo "stderr: $stderr (wanted $2)"; return 1; }
        # generate's loader reads the keys with the same parser
        run -3 --separate-stderr generate -m "$m" -p hi -n 1
        [[ "$stderr" == *"$2"* ]]
    }
    gg boolarr:1,0,1 "'gemma3.attention.sliding_window_pattern' has 3 entries for 4 layers"
    gg boolarr:1,0,1,1,0 "has 5 entries for 4 layers"
    gg u32:0 "key 'gemma3.attention.sliding_window_pattern': period 0 out of range"
    gg i32:-2 "period -2 out of range"
    gg f32:2 "has type f32, expected an integer period or a bool array"
    gg str:6 "has type str,"
    cf() {   # JQ MESSAGE
        jq "$1" "$G/gemma-3-4b-it.json" > "$c"
        run -3 --separate-stderr kvstat --json "$c"
        [[ "$stderr" == *"'$c': "*"$2"* ]] || { echo "stderr: $stderr (wanted $2)"; return 1; }
    }
    cf '.text_config.layer_types = [range(33) | "sliding_attention"]' \
        "'layer_types' has 33 entries for 34 layers"
    cf '.text_config.layer_types = [range(40) | "sliding_attention"]' \
        "'layer_types' has 40 entries for 34 layers"
    cf '.text_config.layer_types = [range(34) | if . == 7 then "sliding" else "full_attention" end]' \
        "'layer_types'[7] is not \"sliding_attention\" or \"full_attention\""
    cf '.text_config.layer_types = "sliding_attention"' "'layer_types' is not an array"
    cf '.text_config.sliding_window_pattern = 0' \
        "'sliding_window_pattern' = 0 is not a period of 1 or more layers"
    cf '.text_config.sliding_window_pattern = -6' "'sliding_window_pattern' = -6 is not a period"
    cf '.text_config.sliding_window_pattern = "6"' "'sliding_window_pattern' is not an integer"
    # what is right still reads
    jq '.text_config.sliding_window_pattern = 2' "$G/gemma-3-4b-it.json" > "$c"
    run -0 kvstat --json "$c"
    [ "$(jfield model swa_layers <<<"$output")" = 17 ]
}
