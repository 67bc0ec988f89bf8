#!/usr/bin/env bats
# generate on small random-weight qwen2 and qwen3 models (scripts/mkfixture-arch:
# GQA 2 and 4, q/k/v biases, per-head QK norm, untied and tied heads, the
# real Qwen2 vocabulary) against llama.cpp's goldens on the same files
# (scripts/mkfixture-arch --golden tests/golden/arch): prompt tokens, 300
# greedy tokens and the 8 largest logits of each step (max relative error,
# top-1 agreement), batch mode, perplexity; the F16 twins (--f16: llama.cpp's
# tinyBLAS for the prompt, ggml_vec_dot_f16 for each generated token) bit for
# bit; convert GGUF -> HF -> GGUF.

load common

GOLD="$TOP/tests/golden/arch"
FIX="$TOP/tests/fixtures/arch"

# The fixtures are built here (tens of MB: the vocabulary's 151936 rows), by
# the venv's gguf-py from the vocabulary in the llama.cpp source that
# scripts/build-llamacpp unpacks; a file whose sha256 is not the golden's is
# rebuilt.
setup_file() {
    local py="$LLMKIT_CACHE/venv/bin/python" a want have
    mkdir -p "$FIX"
    for a in qwen2 qwen3; do
        want=$(jq -r .model.sha256 "$GOLD/$a-tiny.json")
        have=$(sha256sum "$FIX/$a-tiny.gguf" 2>/dev/null | cut -d' ' -f1)
        [ "$want" = "$have" ] && continue
        [ -x "$py" ] || continue
        "$py" "$TOP/scripts/mkfixture-arch" --arch "$a" --out "$FIX" >/dev/null 2>&1 || true
    done
    # the F16 twins (their goldens: -tiny-f16.json)
    for a in qwen2 qwen3; do
        want=$(jq -r .model.sha256 "$GOLD/$a-tiny-f16.json")
        have=$(sha256sum "$FIX/$a-tiny-f16.gguf" 2>/dev/null | cut -d' ' -f1)
        [ "$want" = "$have" ] || [ ! -x "$py" ] ||
            "$py" "$TOP/scripts/mkfixture-arch" --f16 --arch "$a" --out "$FIX" >/dev/null 2>&1 || true
    done
}

# tiny NAME : qwen2 -> qwen2-tiny, qwen2-f16 -> qwen2-tiny-f16
tiny() {
    local a=${1%-f16}
    printf '%s-tiny%s' "$a" "${1#"$a"}"
}

# need_fixture VAR NAME : the fixture's path (NAME qwen2, qwen3, qwen2-f16,
# qwen3-f16), or skip (CI: fail) when it could not be built as the golden's
need_fixture() {
    local f="$FIX/$(tiny "$2").gguf" g="$GOLD/$(tiny "$2").json"
    [ "$(sha256sum "$f" 2>/dev/null | cut -d' ' -f1)" = "$(jq -r .model.sha256 "$g")" ] ||
        missing_input "no $2 fixture as the golden's (scripts/mkfixture-arch needs scripts/pyenv's venv and the llama.cpp source of scripts/build-llamacpp)" ||
        return 1
    printf -v "$1" '%s' "$f"
}

# compare GOLDEN OURS [exact] : tokens identical, every step's golden top-8
# ids among our top 16 with relative error (|ours - llama.cpp| / the step's
# largest |logit|) under 1e-4 (exact: every one the same f32), top-1 the same
# at every step
compare() {
    python3 - "$1" "$2" "${3:-}" <<'PY'
import json, struct, sys
g, o = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
exact, nexact = sys.argv[3] == "exact", 0
f32 = lambda v: struct.pack("<f", v)
assert o["prompt_token_ids"] == g["prompt_tokens"], "prompt tokens differ"
n, worst, top1 = len(g["top"]), 0.0, 0
assert len(o["top_logits"]) == n == len(o["tokens"])
for i in range(n):
    ours = {t: v for t, v in o["top_logits"][i]}
    scale = max(abs(v) for _, v in g["top"][i])
    for t, v in g["top"][i]:
        assert t in ours, "step %d: llama.cpp's token %d not in our top 16" % (i, t)
        worst = max(worst, abs(ours[t] - v) / scale)
        nexact += f32(ours[t]) == f32(v)
    top1 += o["top_logits"][i][0][0] == g["top"][i][0][0]
first = next((i for i, (a, b) in enumerate(zip(g["tokens"], o["tokens"])) if a != b), None)
total = sum(len(s) for s in g["top"])
print("# %d positions: max relative error %.3g, %d/%d logits bit-identical, top-1 agreement %d/%d, tokens %s" %
      (n, worst, nexact, total, top1, n, "identical" if first is None else "differ from %d" % first))
ok = worst < 1e-4 and top1 == n and first is None and (not exact or nexact == total)
sys.exit(0 if ok else 1)
PY
}

# arch_case NAME [exact] [generate options...]
arch_case() {
    local a=$1 how=${2:-} m g="$GOLD/$(tiny "$1").json"
    need_fixture m "$a"
    run -0 --separate-stderr generate -m "$m" -p "$(jq -r .prompt "$g")" --temp 0 --ignore-eos \
        -n "$(jq '.tokens | length' "$g")" --ctx 512 -t 2 --json --top-logits 16 "${@:3}"
    printf '%s\n' "$output" > "$BATS_TEST_TMPDIR/ours.json"
    compare "$g" "$BATS_TEST_TMPDIR/ours.json" "$how" >&3
}

@test "qwen2 (biases, GQA 2, untied head): llama.cpp's 300 greedy tokens and logits" {
    not_under_sanitizer
    arch_case qwen2
}

@test "qwen3 (QK norm, GQA 4, key_length != n_embd / n_head, tied head): llama.cpp's 300 greedy tokens and logits" {
    not_under_sanitizer
    arch_case qwen3
}

@test "qwen2 and qwen3 F16: llama.cpp's 300 greedy tokens and logits bit for bit (tinyBLAS prompt, vec_dot decode)" {
    not_under_sanitizer
    arch_case qwen2-f16 exact
    arch_case qwen3-f16 exact
}

# (--kernel ref: the float matmuls are the same bits, test_matmul_mirror,
# but not every other reference op)
@test "qwen2 F16: llama.cpp's bits with --kernel avx2 and (where available) avx512" {
    not_under_sanitizer
    local k m
    need_fixture m qwen2-f16
    for k in avx2 avx512; do
        # exit 2: no such kernels on this CPU
        run --separate-stderr generate --kernel "$k" -m "$m" -p hi -n 1 -q
        if [ "$status" -eq 2 ]; then
            echo "# no $k kernels here" >&3
            continue
        fi
        echo "# --kernel $k" >&3
        arch_case qwen2-f16 exact --kernel "$k"
    done
}

@test "qwen2 and qwen3 (and F16) --batch: each request's greedy tokens as alone, and llama.cpp's" {
    not_under_sanitizer
    local a m g
    for a in qwen2 qwen3 qwen2-f16 qwen3-f16; do
        need_fixture m "$a"
        g="$GOLD/$(tiny "$a").json"
        # the golden prompt and two more, with the first 40 golden tokens
        # as requests of their own
        {
            jq -c '{id: "gold", prompt: .prompt, max_tokens: 40, temperature: 0}' "$g"
            echo '{"id": "b", "prompt": "Hello there, how are you?", "max_tokens": 24, "temperature": 0}'
            jq -c '{id: "toks", tokens: .prompt_tokens[0:6], max_tokens: 24, temperature: 0}' "$g"
        } > "$BATS_TEST_TMPDIR/reqs"
        run -0 --separate-stderr generate -m "$m" --batch "$BATS_TEST_TMPDIR/reqs" --ctx 512 -t 2 --ignore-eos
        [ "$(jq -c 'select(.id == "gold") | .tokens' <<<"$output")" = "$(jq -c '.tokens[0:40]' "$g")" ]
        jq -c '[.id, .tokens]' <<<"$output" | sort > "$BATS_TEST_TMPDIR/batch"
        {
            generate -m "$m" -p "$(jq -r .prompt "$g")" -n 40 --temp 0 --ignore-eos --ctx 512 -t 2 --json -q |
                jq -c '["gold", .tokens]'
            generate -m "$m" -p "Hello there, how are you?" -n 24 --temp 0 --ignore-eos --ctx 512 -t 2 --json -q |
                jq -c '["b", .tokens]'
        } > "$BATS_TEST_TMPDIR/alone"
        grep -v '"toks"' "$BATS_TEST_TMPDIR/batch" > "$BATS_TEST_TMPDIR/batch2"
        diff <(sort "$BATS_TEST_TMPDIR/alone") "$BATS_TEST_TMPDIR/batch2"
        [ "$(grep -c '"toks"' "$BATS_TEST_TMPDIR/batch")" -eq 1 ]
    done
}

@test "qwen2 and qwen3 (and F16) --perplexity: llama-perplexity's on wikitext-2 (4 chunks of 512)" {
    not_under_sanitizer
    local a m g data want got
    data=${LLMKIT_WIKITEXT:-$SHARED/data/wikitext-2-test.raw}
    [ -f "$data" ] || skip "no $data"
    for a in qwen2 qwen3 qwen2-f16 qwen3-f16; do
        need_fixture m "$a"
        g="$GOLD/$(tiny "$a").json"
        [ "$(sha256sum < "$data" | cut -d' ' -f1)" = "$(jq -r .perplexity.data.sha256 "$g")" ]
        run -0 --separate-stderr generate -m "$m" --perplexity "$data" --ctx 512 \
            --chunks "$(jq .perplexity.chunks "$g")" -t 2 --json
        want=$(jq .perplexity.ppl "$g")
        got=$(jq 'select(.type == "perplexity") | .ppl' <<<"$output")
        echo "# $a: PPL $got, llama.cpp $want" >&3
        python3 -c "import sys; w, g = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(g - w) > 1e-4 * w)" "$want" "$got"
    done
}

@test "qwen2: <|im_end|> (not the eos id) ends generation, as llama.cpp's end-of-generation set has it" {
    local m py="$LLMKIT_CACHE/venv/bin/python" g="$GOLD/qwen2-tiny.json"
    need_fixture m qwen2
    # a copy whose LM head row of <|im_end|> (151645) is that of the 6th
    # golden token with its block scales doubled: <|im_end|> wins a step
    "$py" - "$m" "$BATS_TEST_TMPDIR/eog.gguf" "$(jq '.tokens[5]' "$g")" <<'PY'
import sys, shutil
import numpy as np
from gguf import GGUFReader
src, dst, tok = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = next(t for t in GGUFReader(src).tensors if t.name == "output.weight")
row = t.n_bytes // int(t.shape[1])                       # Q8_0: 34 bytes per 32 values
shutil.copyfile(src, dst)
with open(dst, "r+b") as f:
    f.seek(t.data_offset + tok * row)
    b = bytearray(f.read(row))
    for i in range(0, row, 34):                          # f16 scale, 32 x int8
        b[i:i + 2] = (np.frombuffer(bytes(b[i:i + 2]), np.float16) * 2).tobytes()
    f.seek(t.data_offset + 151645 * row)
    f.write(b)
PY
    run -0 --separate-stderr generate -m "$BATS_TEST_TMPDIR/eog.gguf" -p "$(jq -r .prompt "$g")" \
        --temp 0 -n 40 --ignore-eos --ctx 512 -t 2 --json
    local all=$output k
    k=$(jq '.tokens | index(151645)' <<<"$all")
    [ "$k" != null ]
    run -0 --separate-stderr generate -m "$BATS_TEST_TMPDIR/eog.gguf" -p "$(jq -r .prompt "$g")" \
        --temp 0 -n 40 --ctx 512 -t 2 --json
    [ "$(jq -r .finish_reason <<<"$output")" = stop ]
    [ "$(jq -c .tokens <<<"$output")" = "$(jq -c ".tokens[0:$k]" <<<"$all")" ]
}

@test "qwen chat template: ChatML prompt tokens as llama.cpp builds them, the template recognised" {
    local m
    need_fixture m qwen3
    run -0 --separate-stderr generate -m "$m" --chat --system "Be brief." -p "Hi" -n 1 --temp 0 --json
    # <|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n
    [ "$(jq -c .prompt_token_ids <<<"$output")" = "[151644,8948,198,3430,9814,13,151645,198,151644,872,198,13048,151645,198,151644,77091,198]" ]
    [[ "$stderr" != *guess* ]]
}

@test "qwen2/qwen3 with a broken tensor are refused by name" {
    local m
    need_fixture m qwen3
    python3 - "$m" "$BATS_TEST_TMPDIR/bad.gguf" <<'PY'
import sys
b = open(sys.argv[1], "rb").read()
# rename blk.1.attn_q_norm.weight (same length: the layout is unchanged)
i = b.index(b"blk.1.attn_q_norm.weight")
open(sys.argv[2], "wb").write(b[:i] + b"blk.1.attn_x_norm.weight" + b[i + 24:])
PY
    run -3 --separate-stderr generate -m "$BATS_TEST_TMPDIR/bad.gguf" -p hi -n 1
    [[ "$stderr" == *"missing tensor 'blk.1.attn_q_norm.weight'"* ]]
}

@test "convert qwen2 and qwen3: GGUF -> HF (Qwen2/Qwen3ForCausalLM, read by safetensors and tokenizers) -> GGUF, identical tensors and metadata" {
    local a f py="$LLMKIT_CACHE/venv/bin/python"
    for a in qwen2 qwen3; do
        f="$FIX/$a-tiny-f16.gguf"
        { [ -f "$f" ] && "$py" -c 'import gguf, safetensors, tokenizers' 2>/dev/null; } ||
            missing_input "no $a F16 fixture or no venv (scripts/pyenv, scripts/mkfixture-arch --f16)" ||
            return 1
        rm -rf "$BATS_TEST_TMPDIR/hf"
        run -0 --separate-stderr convert "$f" "$BATS_TEST_TMPDIR/hf"
        [ "$(jq -r '.architectures[0]' "$BATS_TEST_TMPDIR/hf/config.json")" = "${a^}ForCausalLM" ]
        [ "$(jq -r .model_type "$BATS_TEST_TMPDIR/hf/config.json")" = "$a" ]
        # qwen2: q/k/v biases; qwen3: none, and head_dim 32 (8 heads of a 128 model)
        if [ "$a" = qwen2 ]; then
            jq -e '.attention_bias == true and .head_dim == null' "$BATS_TEST_TMPDIR/hf/config.json"
        else
            jq -e '.attention_bias == false and .head_dim == 32' "$BATS_TEST_TMPDIR/hf/config.json"
        fi
        "$py" "$TOP/tests/cli/lib/check_hf_dir.py" "$f" "$BATS_TEST_TMPDIR/hf"
        run -0 --separate-stderr convert -f "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/back.gguf"
        "$py" "$TOP/tests/cli/lib/gguf_equiv.py" "$f" "$BATS_TEST_TMPDIR/back.gguf"
    done
}

@test "convert qwen2 and qwen3: an HF tensor of another shape than config.json implies is refused (3), biases and QK norms too" {
    local a f T=$BATS_TEST_TMPDIR name shape want
    for a in qwen2 qwen3; do
        f="$FIX/$a-tiny-f16.gguf"
        [ -f "$f" ] || missing_input "no $a F16 fixture (scripts/mkfixture-arch --f16)" || return 1
        rm -rf "$T/hf"
        convert -q "$f" "$T/hf"
        # (qwen2: n_embd 128, 4 heads of 32, 2 KV heads, FFN 320, q/k/v biases;
        # qwen3: 8 heads of 32, 2 KV heads, per-head Q/K norms of 32)
        while read -r b name shape want; do
            [ "$b" = "$a" ] || continue
            sft_shape "$T/hf" "$name" ${shape//,/ }
            run -3 --separate-stderr convert "$T/hf" "$T/o.gguf"
            [ "$stderr" = "convert: '$T/hf/model.safetensors': tensor '$name' has shape [${shape//,/, }], config.json implies [${want//,/, }]" ] ||
                { echo "$a $name: $stderr"; false; }
            [ ! -e "$T/o.gguf" ]
            sft_shape "$T/hf" "$name" ${want//,/ }
        done <<'CASES'
qwen2 model.layers.0.self_attn.k_proj.bias 32,2 64
qwen2 model.layers.1.self_attn.q_proj.weight 64,256 128,128
qwen2 lm_head.weight 128,151936 151936,128
qwen3 model.layers.0.self_attn.q_norm.weight 16,2 32
qwen3 model.layers.2.self_attn.q_proj.weight 128,256 256,128
qwen3 model.layers.1.self_attn.o_proj.weight 256,128 128,256
CASES
        # the shapes put back, it converts
        run -0 --separate-stderr convert "$T/hf" "$T/o.gguf"
        rm "$T/o.gguf"
    done
}

@test "--top-logits: needs --json and a prompt, 1..64, largest first, the first the greedy token" {
    local m="$TOP/tests/fixtures/tiny-llama-f32.gguf"
    run -2 --separate-stderr generate -m "$m" -p hi -n 1 --top-logits 4
    [[ "$stderr" == *"--top-logits needs --json"* ]]
    run -2 --separate-stderr generate -m "$m" -p hi -n 1 --json --top-logits 65
    run -2 --separate-stderr generate -m "$m" --perplexity /dev/null --json --top-logits 4
    run -0 --separate-stderr generate -m "$m" -p hi -n 3 --temp 0 --json --top-logits 64
    # sorted, the first the greedy token, 64 distinct ids per step
    jq -e '[.top_logits[] | (map(.[1]) | . == (sort | reverse)) and (map(.[0]) | unique | length) == 64] | all' <<<"$output"
    jq -e '[.tokens, [.top_logits[][0][0]]] | .[0] == .[1]' <<<"$output"
}
