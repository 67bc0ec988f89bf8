#!/usr/bin/env bats
# Malformed GGUF files: every case exits 3 with a one-line message that names
# the file and the problem, and leaves no output (or temporary) file behind.
# The files come from tests/cli/lib/mkbad_gguf.py, which builds them with the
# Python standard library from the documented byte layout.

load common

setup_file() {
    export BAD="$BATS_FILE_TMPDIR/bad"
    python3 "$BATS_TEST_DIRNAME/lib/mkbad_gguf.py" "$BAD"
}

# bad CASE REGEX : --info and a conversion both fail with exit 3 and REGEX.
bad() {
    local f="$BAD/$1.gguf" out="$BATS_TEST_TMPDIR/out.gguf"
    run -3 --separate-stderr convert --info "$f"
    assert_output ''
    [ "${#stderr_lines[@]}" -eq 1 ] || { echo "expected one line, got: $stderr"; return 1; }
    [[ "$stderr" == "convert: '$f': "* ]] || { echo "message does not name the file: $stderr"; return 1; }
    [[ "$stderr" =~ $2 ]] || { echo "message '$stderr' does not match /$2/"; return 1; }
    run -3 --separate-stderr convert "$f" "$out"
    [[ "$stderr" =~ $2 ]] || { echo "convert: '$stderr' does not match /$2/"; return 1; }
    [ ! -e "$out" ] || { echo "output file left behind"; return 1; }
    [ -z "$(ls "$BATS_TEST_TMPDIR" | grep tmp)" ] || { echo "temporary left behind"; return 1; }
    # The same through a pipe (sequential reader).
    run -3 --separate-stderr convert - - < "$f"
    assert_output ''
    [[ "$stderr" =~ $2 ]] || { echo "pipe: '$stderr' does not match /$2/"; return 1; }
}

@test "the well-formed reference file converts" {
    run -0 convert --info "$BAD/good.gguf"
    run -0 convert "$BAD/good.gguf" "$BATS_TEST_TMPDIR/good.gguf"
    cmp "$BAD/good.gguf" "$BATS_TEST_TMPDIR/good.gguf"
}

@test "truncated after the magic" { bad trunc-after_magic 'end of file'; }
@test "truncated after the version" { bad trunc-after_version 'end of file'; }
@test "truncated after the counts" { bad trunc-after_counts 'truncated or corrupt'; }
@test "truncated inside a key" { bad trunc-mid_key 'truncated|end of file'; }
@test "truncated after the first metadata record" { bad trunc-after_kv0 'truncated|end of file'; }
@test "truncated after the third metadata record" { bad trunc-after_kv2 'end of file'; }
@test "truncated inside a tensor record" { bad trunc-mid_tinfo 'end of file'; }
@test "truncated after the first tensor record" { bad trunc-after_tinfo0 'end of file'; }
@test "truncated before the alignment padding" { bad trunc-before_pad 'data section starts past end of file'; }
@test "truncated inside the alignment padding" { bad trunc-mid_pad 'data section starts past end of file'; }
@test "truncated inside the first tensor's data" { bad trunc-mid_data0 'data past end of file'; }
@test "truncated inside the last tensor's data" { bad trunc-mid_data1 'data past end of file'; }
@test "tensor data past end of file" { bad data-past-eof 'data past end of file'; }
@test "wrong magic" {
    bad bad-magic 'unrecognised format|bad magic'
    run -3 --separate-stderr convert --from gguf --info "$BAD/bad-magic.gguf"
    [[ "$stderr" == *'bad magic'* ]]
}
@test "version 1" { bad version-1 'version 1 is no longer supported'; }
@test "version 4" { bad version-4 'unsupported GGUF version 4'; }
@test "byte-swapped version" { bad version-bigendian 'big-endian'; }
@test "overlapping offsets" { bad overlapping-offsets "has offset 0, expected 64"; }
@test "misaligned offset" { bad misaligned-offset "has offset 65, expected 64"; }
@test "gap between tensors" { bad gap-offset "has offset 128, expected 64"; }
@test "offsets out of order" { bad out-of-order-offsets "has offset 64, expected 0"; }
@test "dimensions whose product overflows" { bad dims-overflow 'overflows'; }
@test "more than 4 dimensions" { bad five-dims '5 dimensions'; }
@test "zero dimension" { bad zero-dim 'dimension 1 is 0'; }
@test "negative dimension" { bad negative-dim 'dimension 1 is -2'; }
@test "removed type id 4" { bad removed-type-4 'unknown tensor type 4'; }
@test "unknown type id 99" { bad unknown-type-99 'unknown tensor type 99'; }
@test "row not a multiple of the block size" { bad row-not-block-multiple 'not a multiple of the Q4_0 block size'; }
@test "duplicate tensor names" { bad duplicate-tensor "duplicate tensor name 'a.weight'"; }
@test "tensor name of 64 bytes" { bad long-tensor-name 'exceeds limit 63'; }
@test "duplicate keys" { bad duplicate-key "duplicate key 'llama.block_count'"; }
@test "invalid UTF-8 in a key" { bad utf8-key 'not valid UTF-8'; }
@test "empty tensor name" { bad empty-tensor-name 'tensor 0 has an empty name'; }
@test "invalid UTF-8 in a tensor name" { bad utf8-tensor-name 'not valid UTF-8'; }
@test "absurd string length" { bad huge-string 'exceeds limit'; }
@test "absurd array length" { bad huge-array 'exceeds limit 2\^30'; }
@test "absurd string-array length" { bad huge-string-array 'runs past end of file'; }
@test "nested array" { bad nested-array 'invalid array element type 9'; }
@test "unknown value type" { bad bad-value-type 'invalid type 13'; }
@test "general.alignment stored as u64" { bad alignment-u64 'expected u32'; }
@test "general.alignment not a power of two" { bad alignment-not-pow2 'not a power of two'; }
@test "general.alignment zero" { bad alignment-zero 'not a power of two'; }
@test "absurd metadata count" { bad huge-kv-count 'cannot fit'; }
@test "negative tensor count" { bad negative-tensor-count 'negative tensor count'; }
@test "absurd tensor count" { bad huge-tensor-count 'cannot fit'; }
@test "empty file" {
    run -3 --separate-stderr convert --info "$BAD/trunc-empty.gguf"
    [[ "$stderr" == *'too short'* ]]
}

@test "a name from the file reaches stderr escaped, on one line, in every tool" {
    f="$BAD/escape-tensor-name.gguf"
    for cmd in "convert --info" "quantize --type Q8_0" "generate -p hi -m" "kvstat"; do
        out=
        [ "${cmd%% *}" = quantize ] && out="$BATS_TEST_TMPDIR/o.gguf"
        run --separate-stderr $cmd "$f" $out
        echo "$cmd: $status: $stderr"
        [ "$status" -eq 3 ]
        [ "${#stderr_lines[@]}" -eq 1 ]
        [[ "$stderr" != *$'\x1b'* ]]
        [[ "$stderr" != *$'\x07'* ]]
        [[ "$stderr" != *$'\u202e'* ]]
        [[ "$stderr" == *'\x1b]0;pwned\x07\nfake: ok\u202e.weight'* ]]
    done
}
