#!/usr/bin/env bats
# convert HF <-> GGUF for gemma3 against llama.cpp's own converter: a small
# random-weight Gemma3ForCausalLM directory with the real Gemma 3 vocabulary
# (scripts/mkgolden-convert-arch) gives the same tensors, bit for bit, and the
# same metadata as convert_hf_to_gguf.py (tests/golden/convert/arch.json, in
# scripts/gguf-digest form); GGUF -> HF -> GGUF round trips; the real
# gemma-3-270m through transformers gives our logits; quantize's GPTQ HF
# directories shift the norms back too; refusals.

load common

GOLD="$TOP/tests/golden/convert/arch.json"
FIX="$TOP/tests/fixtures/convert-arch"

# The HF directories are rebuilt (about 40 MB: the 262144-row embedding) with
# the oracle venv when their files are not the golden's.
setup_file() {
    local py="$LLMKIT_CACHE/venv-oracle/bin/python"
    fixture_ok gemma3 && return 0
    [ -x "$py" ] || return 0
    "$py" "$TOP/scripts/mkgolden-convert-arch" --arch gemma3 --out "$FIX" >/dev/null 2>&1 || true
}

# fixture_ok NAME : the files of NAME-hf are those the golden was made from
fixture_ok() {
    local f want
    for f in $(jq -r ".$1.files | keys[]" "$GOLD"); do
        want=$(jq -r ".$1.files[\"$f\"]" "$GOLD")
        [ "$(sha256sum "$FIX/$1-hf/$f" 2>/dev/null | cut -d' ' -f1)" = "$want" ] || return 1
    done
}

# need_oracle VAR : the oracle venv's python (torch, transformers: what
# llama.cpp's converter and the logit check import), or skip, also in CI:
# scripts/pyenv-oracle builds it (about 6 GB), make check-setup does not
need_oracle() {
    local oracle_py_="$LLMKIT_CACHE/venv-oracle/bin/python"
    [ -x "$oracle_py_" ] || skip "no oracle venv $LLMKIT_CACHE/venv-oracle (scripts/pyenv-oracle, about 6 GB; make check-setup does not build it)"
    printf -v "$1" '%s' "$oracle_py_"
}

# gemma_f32 VAR : gemma-3-270m in F32 (model_f32)
gemma_f32() {
    model_f32 "$1" gemma-3-270m.Q4_K_M.gguf gemma-3-270m.F32.gguf
}

# need_hf VAR NAME : the fixture directory; without the oracle venv that
# makes it, skip; with it, a fixture not the golden's is missing (CI: fail)
need_hf() {
    local need_hf_py_
    fixture_ok "$2" || need_oracle need_hf_py_
    fixture_ok "$2" ||
        missing_input "no $2 HF fixture as the golden's (scripts/mkgolden-convert-arch needs scripts/pyenv-oracle's venv and the gemma-3-270m GGUF)" ||
        return 1
    printf -v "$1" '%s' "$FIX/$2-hf"
}

# digest VAR FILE : scripts/gguf-digest of FILE (scripts/pyenv's venv)
digest() {
    local py="$LLMKIT_CACHE/venv/bin/python"
    [ -x "$py" ] || missing_input "no gguf-py venv (scripts/pyenv)" || return 1
    printf -v "$1" '%s' "$("$py" "$TOP/scripts/gguf-digest" "$2" | jq -S .)"
}

@test "gemma3 HF -> GGUF: llama.cpp's converter's tensors (bit for bit) and keys, f32 and bf16" {
    local hf t ours
    need_hf hf gemma3
    for t in f32 bf16; do
        run -0 --separate-stderr convert --type "$t" "$hf" "$BATS_TEST_TMPDIR/g3-$t.gguf"
        digest ours "$BATS_TEST_TMPDIR/g3-$t.gguf"
        diff <(jq -S ".gemma3.$t" "$GOLD") - <<<"$ours"
    done
    # the norms were shifted (+1) and the rest copied: not a golden of zeros
    [ "$(jq -r '.gemma3.f32.tensors["blk.0.attn_norm.weight"].sha256' "$GOLD")" != \
      "$(jq -r '.gemma3.bf16.tensors["blk.0.attn_q.weight"].sha256' "$GOLD")" ]
    [ "$(jq -r '.gemma3.f32.kv["tokenizer.ggml.add_space_prefix"]' "$GOLD")" = false ]
}

@test "gemma3 GGUF -> HF -> GGUF is the identity (bf16 fixture, norms shifted back and forth)" {
    local hf a b
    need_hf hf gemma3
    run -0 --separate-stderr convert --type bf16 "$hf" "$BATS_TEST_TMPDIR/a.gguf"
    run -0 --separate-stderr convert "$BATS_TEST_TMPDIR/a.gguf" "$BATS_TEST_TMPDIR/hf"
    [ "$(jq -r '.architectures[0]' "$BATS_TEST_TMPDIR/hf/config.json")" = Gemma3ForCausalLM ]
    # llama.cpp's gemma3 pattern (every 6th layer global), not the fixture's
    # layer_types, which its converter does not carry
    [ "$(jq -c .layer_types "$BATS_TEST_TMPDIR/hf/config.json")" = \
      '["sliding_attention","sliding_attention","sliding_attention"]' ]
    [ -f "$BATS_TEST_TMPDIR/hf/tokenizer.model" ]
    run -0 --separate-stderr convert "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/b.gguf"
    digest a "$BATS_TEST_TMPDIR/a.gguf"
    digest b "$BATS_TEST_TMPDIR/b.gguf"
    [ "$a" = "$b" ]
}

@test "gemma-3-270m F32 -> HF -> GGUF: same tensors and keys (+ llama.cpp's default local rope base)" {
    local g a b
    gemma_f32 g
    run -0 --separate-stderr convert "$g" "$BATS_TEST_TMPDIR/hf"
    jq -e '.rope_local_base_freq == 10000 and .query_pre_attn_scalar == 256' \
        "$BATS_TEST_TMPDIR/hf/config.json"
    run -0 --separate-stderr convert --type f32 "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/back.gguf"
    digest a "$g"
    digest b "$BATS_TEST_TMPDIR/back.gguf"
    # the 270m GGUF predates the key; llama.cpp reads 10000 without it
    [ "$(jq '.kv["gemma3.rope.freq_base_swa"]' <<<"$a")" = null ]
    jq -e '.kv["gemma3.rope.freq_base_swa"] == 10000' <<<"$b"
    diff <(echo "$a") <(jq -S 'del(.kv["gemma3.rope.freq_base_swa"])' <<<"$b")
}

@test "gemma-3-270m exported to HF: transformers' logits match our generate's" {
    not_under_sanitizer
    local g py
    need_oracle py
    gemma_f32 g
    run -0 --separate-stderr convert "$g" "$BATS_TEST_TMPDIR/hf"
    run -0 --separate-stderr generate -m "$g" -p "The capital of France is" -n 8 --temp 0 \
        --ignore-eos --ctx 64 -t 2 --json --top-logits 8
    echo "$output" > "$BATS_TEST_TMPDIR/ours.json"
    run -0 "$py" - "$BATS_TEST_TMPDIR/hf" "$BATS_TEST_TMPDIR/ours.json" <<'PY'
import json, sys
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(2)
o = json.load(open(sys.argv[2]))
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
ids = o["prompt_token_ids"] + o["tokens"][:-1]
with torch.no_grad():
    logits = m(torch.tensor([ids])).logits[0]
n0, worst = len(o["prompt_token_ids"]), 0.0
for i, top in enumerate(o["top_logits"]):
    row = logits[n0 - 1 + i]
    assert int(row.argmax()) == o["tokens"][i], "step %d: transformers picks %d, we %d" % (i, int(row.argmax()), o["tokens"][i])
    scale = float(row.abs().max())
    for t, v in top:
        worst = max(worst, abs(float(row[t]) - v) / scale)
print("max relative logit error %.3g over %d steps" % (worst, len(o["top_logits"])))
assert worst < 1e-3, worst
PY
    echo "# $output" >&3
}

@test "refused with exit 3 and no output: multimodal gemma3, deepseek2, gemma3 without tokenizer.model" {
    local hf d
    need_hf hf gemma3
    for d in mm ds notok softcap; do
        mkdir -p "$BATS_TEST_TMPDIR/$d"
        ln -s "$hf/model.safetensors" "$BATS_TEST_TMPDIR/$d/model.safetensors"
        [ $d = notok ] || ln -s "$hf/tokenizer.model" "$BATS_TEST_TMPDIR/$d/tokenizer.model"
    done
    jq '.architectures = ["Gemma3ForConditionalGeneration"] | .model_type = "gemma3"' \
        "$hf/config.json" > "$BATS_TEST_TMPDIR/mm/config.json"
    jq '.architectures = ["DeepseekV2ForCausalLM"] | .model_type = "deepseek_v2"' \
        "$hf/config.json" > "$BATS_TEST_TMPDIR/ds/config.json"
    cp "$hf/config.json" "$BATS_TEST_TMPDIR/notok/config.json"
    jq '.attn_logit_softcapping = 50.0' "$hf/config.json" > "$BATS_TEST_TMPDIR/softcap/config.json"
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/mm" "$BATS_TEST_TMPDIR/mm.gguf"
    [[ "$stderr" == *"multimodal checkpoint 'Gemma3ForConditionalGeneration'"* ]]
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/ds" "$BATS_TEST_TMPDIR/ds.gguf"
    [[ "$stderr" == *"unsupported architecture 'DeepseekV2ForCausalLM'"* ]]
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/notok" "$BATS_TEST_TMPDIR/notok.gguf"
    [[ "$stderr" == *"needs its SentencePiece tokenizer.model"* ]]
    run -3 --separate-stderr convert "$BATS_TEST_TMPDIR/softcap" "$BATS_TEST_TMPDIR/softcap.gguf"
    [[ "$stderr" == *"attn_logit_softcapping"* ]]
    [ "$(ls "$BATS_TEST_TMPDIR" | grep -c gguf)" -eq 0 ]
}

@test "gemma3 GGUF -> GPTQ HF dir (quantize --method rtn) -> GGUF: norms shifted back and forth exactly" {
    local hf a b
    need_hf hf gemma3
    run -0 --separate-stderr convert --type f32 "$hf" "$BATS_TEST_TMPDIR/a.gguf"
    run -0 --separate-stderr quantize --method rtn --bits 4 --group-size 32 --format gptq \
        "$BATS_TEST_TMPDIR/a.gguf" "$BATS_TEST_TMPDIR/q"
    [ "$(jq -r '.architectures[0]' "$BATS_TEST_TMPDIR/q/config.json")" = Gemma3ForCausalLM ]
    run -0 --separate-stderr convert --type f32 "$BATS_TEST_TMPDIR/q" "$BATS_TEST_TMPDIR/b.gguf"
    digest a "$BATS_TEST_TMPDIR/a.gguf"
    digest b "$BATS_TEST_TMPDIR/b.gguf"
    diff <(jq -S '.tensors | with_entries(select(.key | endswith("norm.weight")))' <<<"$a") \
         <(jq -S '.tensors | with_entries(select(.key | endswith("norm.weight")))' <<<"$b")
    [ "$(jq '.tensors | with_entries(select(.key | endswith("norm.weight"))) | length' <<<"$a")" -eq 19 ]
    # the grids are lossy: the matrices differ
    [ "$(jq -r '.tensors["blk.0.attn_q.weight"].sha256' <<<"$a")" != \
      "$(jq -r '.tensors["blk.0.attn_q.weight"].sha256' <<<"$b")" ]
}

@test "gemma-3-270m exported to HF: llama.cpp's converter makes the original GGUF of it again" {
    not_under_sanitizer
    local g py conv a b
    need_oracle py
    gemma_f32 g
    conv=$(ls "$LLMKIT_CACHE"/llama.cpp-*/src/*/vendor/llama.cpp/convert_hf_to_gguf.py 2>/dev/null | tail -1)
    [ -n "$conv" ] || missing_input "no llama.cpp source (scripts/build-llamacpp)" || return 1
    run -0 --separate-stderr convert "$g" "$BATS_TEST_TMPDIR/hf"
    # its tokenizer.model loads in SentencePiece (an unk piece: Gemma's <unk>,
    # which the GGUF types CONTROL) and every token type comes back
    run -0 env PYTHONPATH="$(dirname "$conv")/gguf-py" "$py" "$conv" "$BATS_TEST_TMPDIR/hf" \
        --outtype f32 --outfile "$BATS_TEST_TMPDIR/lc.gguf"
    digest a "$g"
    digest b "$BATS_TEST_TMPDIR/lc.gguf"
    diff <(echo "$a") <(jq -S 'del(.kv["gemma3.rope.freq_base_swa"])' <<<"$b")
}
