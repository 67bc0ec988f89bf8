#!/usr/bin/env bats
# generate on deepseek2 (MLA, dense layers) against llama.cpp: the small
# random-weight models of scripts/mkgolden-mla (built here, deterministic)
# and its goldens tests/golden/generate/mla.json (llama.cpp AVX2 build):
# per-position logits (build/tests/test_mla), greedy continuations alone
# and in batch mode, the latent KV cache's bytes against kvstat, perplexity,
# and the refusal of a mixture-of-experts layout and of the older unsplit
# attn_kv_b.

load common

GOLD="$TOP/tests/golden/generate/mla.json"

setup_file() {
    local py="${LLMKIT_CACHE}/venv/bin/python"
    export MLA="$BATS_FILE_TMPDIR/mla"
    if [ ! -x "$py" ]; then
        [ "${CI:-}" != true ] || { echo "no venv at $py (scripts/pyenv)" >&2; return 1; }
        return 0
    fi
    "$py" "$TOP/scripts/mkgolden-mla" --models "$MLA" >&2 || {
        [ "${CI:-}" != true ] || return 1
        rm -rf "$MLA"
    }
}

need_mla() {
    [ -f "$MLA/mla-qlora.gguf" ] || skip "no MLA test models (scripts/pyenv and scripts/build-llamacpp make them possible)"
}

# greedy M CASE... : generate --json on model M, each golden case's prompt:
# llama.cpp's prompt tokens and its 32 greedy tokens
greedy_case() {
    local mi=$1 ci=$2 m prompt
    m=$(jq -r ".models[$mi].model" "$GOLD")
    prompt=$(jq -j ".models[$mi].cases[$ci].prompt" "$GOLD"; printf x)
    prompt=${prompt%x}
    run -0 --separate-stderr generate -m "$MLA/$m" -p "$prompt" --temp 0 -n 32 --ctx 512 -t 2 --json
    [ "$(jq -c .prompt_token_ids <<<"$output")" = "$(jq -c ".models[$mi].cases[$ci].prompt_tokens" "$GOLD")" ]
    # llama.cpp's tokens, or the same up to a step where llama.cpp's own top-1
    # and top-2 logits are within 0.01 (our logits differ from its by ~1e-6
    # relative), reported
    python3 - "$(jq -c .tokens <<<"$output")" "$(jq -c ".models[$mi].cases[$ci].greedy" "$GOLD")" \
        "$(jq -c ".models[$mi].cases[$ci].margins" "$GOLD")" "$m case $ci" <<'PY' >&3
import json, sys
got, want, margins, name = json.loads(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
if got == want:
    sys.exit(0)
s = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
m = margins[s] if s < len(margins) else None
print("# %s: same first %d tokens, then %s vs llama.cpp %s (llama.cpp margin %s)" %
      (name, s, got[s] if s < len(got) else "end", want[s] if s < len(want) else "end", m))
sys.exit(0 if m is not None and m < 0.01 else 1)
PY
}

@test "deepseek2: per-position logits of 256+ positions match llama.cpp's (top-1, max relative error)" {
    need_mla
    local t="$TOP/build/tests/test_mla"
    [ -x "$t" ] || skip "build/tests/test_mla not built (make check-unit builds it)"
    cd "$TOP"
    LLMKIT_MLA_DIR="$MLA" run -0 --separate-stderr "$t"
    [[ "$stderr" == *"top-1 agreement"* ]]
}

@test "deepseek2: greedy continuations equal llama.cpp's, with and without q_lora, with YaRN" {
    need_mla
    for mi in 0 1 2; do
        for ci in 0 1 2; do
            greedy_case "$mi" "$ci"
        done
    done
}

@test "deepseek2: batch mode gives each request llama.cpp's greedy tokens" {
    need_mla
    local m
    m=$(jq -r ".models[0].model" "$GOLD")
    jq -c '.models[0].cases[] | {id: .name, prompt: .prompt, max_tokens: 32, temperature: 0}' \
        "$GOLD" >"$BATS_TEST_TMPDIR/req.jsonl"
    run -0 --separate-stderr generate -m "$MLA/$m" --batch "$BATS_TEST_TMPDIR/req.jsonl" -t 2
    for name in story wiki code; do
        got=$(jq -c "select(.id == \"$name\") | .tokens" <<<"$output")
        want=$(jq -c ".models[0].cases[] | select(.name == \"$name\") | .greedy" "$GOLD")
        [ "$got" = "$want" ] || { echo "$name: $got vs llama.cpp $want"; return 1; }
    done
}

@test "deepseek2: the KV cache holds the latent and the RoPE key only: generate's KV bytes equal kvstat's MLA figure" {
    need_mla
    local ctx kb ks
    for ctx in 4096 1000; do
        run -0 --separate-stderr generate -m "$MLA/mla-qlora.gguf" -p hi -n 1 --ctx "$ctx" --json
        kb=$(jq .kv_bytes <<<"$output")
        run -0 --separate-stderr kvstat --json --ctx "$ctx" "$MLA/mla-qlora.gguf"
        ks=$(jq -s '.[0].bytes_per_seq' <<<"$output")
        [ "$(jq -s '.[0].attention' <<<"$output")" = '"MLA"' ]
        # 3 layers x (kv_lora_rank 32 + rope 8) x f16; whole 16-token blocks
        [ "$(jq -s '.[0].bytes_per_token' <<<"$output")" = 240 ]
        [ "$kb" = $(((ctx + 15) / 16 * 16 * 240)) ]
        [ "$ks" = $((ctx * 240)) ]
        [ "$kb" -ge "$ks" ] && [ "$kb" -lt $((ks + 16 * 240)) ]
    done
}

@test "deepseek2: DeepSeek-V2's cache geometry (60 layers, 512 + 64) costs 69,120 bytes a token, in generate and kvstat alike" {
    need_mla
    run -0 --separate-stderr generate -m "$MLA/mla-v2.gguf" -p "a b c" -n 2 --ctx 4096 --json
    [ "$(jq .kv_bytes <<<"$output")" = $((4096 * 69120)) ]
    run -0 --separate-stderr kvstat --json --ctx 4096 "$MLA/mla-v2.gguf"
    [ "$(jq -s '.[0].bytes_per_token' <<<"$output")" = 69120 ]
    [ "$(jq -s '.[0].bytes_per_seq' <<<"$output")" = $((4096 * 69120)) ]
}

@test "deepseek2: --perplexity equals llama-perplexity's on wikitext-2 (ctx 128, 4 chunks, 3 models)" {
    need_mla
    local data=${LLMKIT_WIKITEXT:-$SHARED/data/wikitext-2-test.raw} mi want got
    [ -f "$data" ] || skip "no $data"
    head -c "$(jq '.models[0].ppl.wikitext_bytes' "$GOLD")" "$data" >"$BATS_TEST_TMPDIR/wiki.txt"
    for mi in 0 1 2; do
        run -0 --separate-stderr generate -m "$MLA/$(jq -r ".models[$mi].model" "$GOLD")" \
            --perplexity "$BATS_TEST_TMPDIR/wiki.txt" --ctx "$(jq ".models[$mi].ppl.ctx" "$GOLD")" \
            --chunks "$(jq ".models[$mi].ppl.chunks" "$GOLD")" -t 2 --json
        got=$(jq .ppl <<<"$output")
        want=$(jq ".models[$mi].ppl.ppl" "$GOLD")
        # (random weights: a PPL of the order of 1e14; its log within 1e-4)
        python3 -c "import math,sys; g,w=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(math.log(g)-math.log(w))>1e-4)" "$got" "$want" ||
            { echo "model $mi: ppl $got, llama-perplexity $want"; return 1; }
    done
}

@test "deepseek2: a mixture-of-experts layout is refused naming its tensor, the unsplit attn_kv_b naming its keys (exit 3)" {
    need_mla
    run -3 --separate-stderr generate -m "$MLA/mla-moe.gguf" -p hi -n 1
    [[ "$stderr" == *"mixture-of-experts"*"'blk.1.ffn_gate_inp.weight'"*"dense deepseek2 models only"* ]]
    [ "$(wc -l <<<"$stderr")" -eq 1 ]
    run -3 --separate-stderr generate -m "$MLA/mla-kvb.gguf" -p hi -n 1
    [[ "$stderr" == *"key_length_mla"*"attn_kv_b"* ]]
}
