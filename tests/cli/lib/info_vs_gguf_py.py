#!/usr/bin/env python3
"""info_vs_gguf_py.py MODEL.gguf INFO.jsonl - checks that `convert --info --json`
agrees with the gguf Python package's reader (gguf.GGUFReader) on every tensor's
name, type, shape and offsets, and on the metadata keys and their types.
Exits 0 when they agree, 1 with a list of differences otherwise."""
import json
import sys

from gguf import GGUFReader, GGUFValueType

TYPE_NAMES = {GGUFValueType.UINT8: 'u8', GGUFValueType.INT8: 'i8', GGUFValueType.UINT16: 'u16',
              GGUFValueType.INT16: 'i16', GGUFValueType.UINT32: 'u32', GGUFValueType.INT32: 'i32',
              GGUFValueType.FLOAT32: 'f32', GGUFValueType.BOOL: 'bool', GGUFValueType.STRING: 'str',
              GGUFValueType.ARRAY: 'arr', GGUFValueType.UINT64: 'u64', GGUFValueType.INT64: 'i64',
              GGUFValueType.FLOAT64: 'f64'}


def main():
    r = GGUFReader(sys.argv[1])
    ours = [json.loads(line) for line in open(sys.argv[2])]
    tensors = [o for o in ours if o['type'] == 'tensor']
    kvs = [o for o in ours if o['type'] == 'kv']
    errs = []
    # GGUFReader adds GGUF.version/tensor_count/kv_count pseudo-fields first.
    fields = [f for f in r.fields.values() if not f.name.startswith('GGUF.')]
    if [f.name for f in fields] != [k['key'] for k in kvs]:
        errs.append('metadata keys differ')
    for f, k in zip(fields, kvs):
        if TYPE_NAMES[f.types[0]] != k['value_type']:
            errs.append('%s: type %s vs %s' % (f.name, TYPE_NAMES[f.types[0]], k['value_type']))
        if f.types[0] == GGUFValueType.ARRAY and len(f.data) != k['count']:
            errs.append('%s: count %d vs %d' % (f.name, len(f.data), k['count']))
    if len(r.tensors) != len(tensors):
        errs.append('tensor count %d vs %d' % (len(r.tensors), len(tensors)))
    for t, o in zip(r.tensors, tensors):
        if t.name != o['name']:
            errs.append('name %s vs %s' % (t.name, o['name']))
        if t.tensor_type.name != o['ggml_type'] or int(t.tensor_type) != o['ggml_type_id']:
            errs.append('%s: type %s vs %s' % (t.name, t.tensor_type.name, o['ggml_type']))
        if [int(x) for x in t.shape] != o['shape']:
            errs.append('%s: shape %s vs %s' % (t.name, list(t.shape), o['shape']))
        if int(t.data_offset) != o['file_offset']:
            errs.append('%s: data offset %d vs %d' % (t.name, t.data_offset, o['file_offset']))
        if int(t.n_bytes) != o['bytes']:
            errs.append('%s: bytes %d vs %d' % (t.name, t.n_bytes, o['bytes']))
    for e in errs[:20]:
        print(e)
    print('%s: %d keys, %d tensors compared, %d differences' % (sys.argv[1], len(kvs), len(tensors), len(errs)))
    sys.exit(1 if errs else 0)


if __name__ == '__main__':
    main()
