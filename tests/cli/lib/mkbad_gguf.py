#!/usr/bin/env python3
"""mkbad_gguf.py DIR - writes a small valid GGUF (good.gguf) and one malformed
variant per case into DIR, for tests/cli/gguf-bad.bats.  Standard library only:
the files are built from the byte layout of the GGUF spec (ggml docs/gguf.md),
independently of llmkit's own writer."""
import os
import struct
import sys

ALIGN = 32
T_U32, T_I32, T_F32, T_BOOL, T_STR, T_ARR, T_U64 = 4, 5, 6, 7, 8, 9, 10


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return struct.pack('<Q', len(b)) + b


def kv(key, typ, payload):
    return s(key) + struct.pack('<I', typ) + payload


def tinfo(name, dims, typ, off):
    return s(name) + struct.pack('<I', len(dims)) + b''.join(struct.pack('<q', d) for d in dims) + \
        struct.pack('<Iq', typ, off)


def pad(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


class G:
    """A GGUF under construction; render() gives the bytes and section marks."""

    def __init__(self):
        self.magic = b'GGUF'
        self.version = 3
        self.kvs = [
            kv('general.architecture', T_STR, s('llama')),
            kv('general.alignment', T_U32, struct.pack('<I', ALIGN)),
            kv('llama.block_count', T_U32, struct.pack('<I', 1)),
            kv('tokenizer.ggml.tokens', T_ARR, struct.pack('<IQ', T_STR, 3) + s('a') + s('b') + s('c')),
        ]
        # (name, dims, type, nbytes); F32 = 0
        self.tensors = [('a.weight', [8, 2], 0, 64), ('b.weight', [8], 0, 32)]
        self.offsets = None
        self.n_kv = None
        self.n_tensors = None

    def render(self):
        offs = []
        o = 0
        for _, _, _, nb in self.tensors:
            offs.append(o)
            o += pad(nb)
        if self.offsets is not None:
            offs = self.offsets
        head = self.magic + struct.pack('<I', self.version)
        head += struct.pack('<qq', len(self.tensors) if self.n_tensors is None else self.n_tensors,
                            len(self.kvs) if self.n_kv is None else self.n_kv)
        marks = {'after_magic': 4, 'after_version': 8, 'after_counts': 24}
        body = b''
        for i, k in enumerate(self.kvs):
            if i == 0:
                marks['mid_key'] = len(head) + 10
            body += k
            marks['after_kv%d' % i] = len(head) + len(body)
        infos = b''
        for i, (n, dims, typ, nb) in enumerate(self.tensors):
            infos += tinfo(n, dims, typ, offs[i])
            marks['after_tinfo%d' % i] = len(head) + len(body) + len(infos)
        hdr = head + body + infos
        marks['mid_tinfo'] = len(head) + len(body) + 5
        marks['before_pad'] = len(hdr)
        data_off = pad(len(hdr))
        out = hdr + b'\0' * (data_off - len(hdr))
        marks['mid_pad'] = len(hdr) + max(1, (data_off - len(hdr)) // 2) if data_off > len(hdr) else len(hdr)
        for i, (_, _, _, nb) in enumerate(self.tensors):
            out += bytes((j * 7 + i) & 0x7f for j in range(nb))
            out += b'\0' * (pad(nb) - nb)
            marks['mid_data%d' % i] = data_off + offs[i] + nb // 2 if i < len(offs) else len(out)
        return out, marks


def main():
    d = sys.argv[1]
    os.makedirs(d, exist_ok=True)

    def w(name, data):
        with open(os.path.join(d, name + '.gguf'), 'wb') as f:
            f.write(data)

    good, marks = G().render()
    w('good', good)
    # Truncation at every section boundary.
    for m in ['after_magic', 'after_version', 'after_counts', 'mid_key', 'after_kv0', 'after_kv2',
              'mid_tinfo', 'after_tinfo0', 'before_pad', 'mid_pad', 'mid_data0', 'mid_data1']:
        w('trunc-' + m, good[:marks[m]])
    w('trunc-empty', b'')
    w('trunc-2bytes', b'GG')

    g = G(); g.magic = b'GGUX'; w('bad-magic', g.render()[0])
    g = G(); g.version = 1; w('version-1', g.render()[0])
    g = G(); g.version = 4; w('version-4', g.render()[0])
    g = G(); g.version = 0x03000000; w('version-bigendian', g.render()[0])

    g = G(); g.offsets = [0, 0]; w('overlapping-offsets', g.render()[0])
    g = G(); g.offsets = [0, 65]; w('misaligned-offset', g.render()[0])
    g = G(); g.offsets = [0, 128]; w('gap-offset', g.render()[0])
    g = G(); g.offsets = [64, 0]; w('out-of-order-offsets', g.render()[0])
    g = G(); g.tensors[1] = ('b.weight', [8], 0, 32); data = g.render()[0]; w('data-past-eof', data[:-40])
    g = G(); g.tensors[0] = ('a.weight', [1 << 40, 1 << 40], 0, 64); w('dims-overflow', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [8, 2, 1, 1, 1], 0, 64); w('five-dims', g.render()[0])
    # a name that would retitle a terminal and start a new line, in an error message
    g = G(); g.tensors[0] = ('\x1b]0;pwned\x07\nfake: ok\u202e.weight', [8, 2, 1, 1, 1], 0, 64)
    w('escape-tensor-name', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [8, 0], 0, 64); w('zero-dim', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [8, -2], 0, 64); w('negative-dim', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [8, 2], 4, 64); w('removed-type-4', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [8, 2], 99, 64); w('unknown-type-99', g.render()[0])
    g = G(); g.tensors[0] = ('a.weight', [33, 2], 2, 64); w('row-not-block-multiple', g.render()[0])
    g = G(); g.tensors[1] = ('a.weight', [8], 0, 32); w('duplicate-tensor', g.render()[0])
    g = G(); g.tensors[0] = ('x' * 64, [8, 2], 0, 64); w('long-tensor-name', g.render()[0])
    g = G(); g.tensors[0] = (b'a\xff\xfe.weight', [8, 2], 0, 64); w('utf8-tensor-name', g.render()[0])
    g = G(); g.tensors[0] = ('', [8, 2], 0, 64); w('empty-tensor-name', g.render()[0])
    g = G(); g.kvs.append(kv('llama.block_count', T_U32, struct.pack('<I', 2))); w('duplicate-key', g.render()[0])
    g = G(); g.kvs.append(kv(b'bad\xc3\x28key', T_U32, struct.pack('<I', 2))); w('utf8-key', g.render()[0])
    g = G(); g.kvs.append(kv('general.name', T_STR, struct.pack('<Q', 1 << 62) + b'abc')); w('huge-string', g.render()[0])
    g = G(); g.kvs.append(kv('x.arr', T_ARR, struct.pack('<IQ', T_U32, 1 << 40))); w('huge-array', g.render()[0])
    g = G(); g.kvs.append(kv('x.arr', T_ARR, struct.pack('<IQ', T_STR, (1 << 29)) + s('a'))); w('huge-string-array', g.render()[0])
    g = G(); g.kvs.append(kv('x.arr', T_ARR, struct.pack('<IQ', T_ARR, 1) + struct.pack('<IQ', T_U32, 0)))
    w('nested-array', g.render()[0])
    g = G(); g.kvs.append(kv('x.bad', 13, struct.pack('<I', 0))); w('bad-value-type', g.render()[0])
    g = G(); g.kvs[1] = kv('general.alignment', T_U64, struct.pack('<Q', 32)); w('alignment-u64', g.render()[0])
    g = G(); g.kvs[1] = kv('general.alignment', T_U32, struct.pack('<I', 24)); w('alignment-not-pow2', g.render()[0])
    g = G(); g.kvs[1] = kv('general.alignment', T_U32, struct.pack('<I', 0)); w('alignment-zero', g.render()[0])
    g = G(); g.n_kv = 1 << 60; w('huge-kv-count', g.render()[0])
    g = G(); g.n_tensors = -1; w('negative-tensor-count', g.render()[0])
    g = G(); g.n_tensors = 1 << 40; w('huge-tensor-count', g.render()[0])


if __name__ == '__main__':
    main()
