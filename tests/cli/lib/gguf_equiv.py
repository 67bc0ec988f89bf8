#!/usr/bin/env python3
"""gguf_equiv.py A.gguf B.gguf [--data-only] - checks, with the gguf Python
package's reader, that two GGUF files hold the same tensors (matched by name:
same type, shape and bytes) and equivalent metadata: every {arch}.* and
tokenizer.* key with the same type and value, general.architecture equal.
Exits 0 when equivalent, 1 with the differences otherwise."""
import sys

import numpy as np
from gguf import GGUFReader


def fields(r):
    out = {}
    for f in r.fields.values():
        if f.name.startswith('GGUF.'):
            continue
        out[f.name] = (list(f.types), [bytes(np.asarray(f.parts[i]).tobytes()) for i in f.data])
    return out


def main():
    data_only = '--data-only' in sys.argv
    paths = [x for x in sys.argv[1:] if x != '--data-only']
    a, b = GGUFReader(paths[0]), GGUFReader(paths[1])
    errs = []
    ta = {t.name: t for t in a.tensors}
    tb = {t.name: t for t in b.tensors}
    if set(ta) != set(tb):
        errs.append('tensor names differ: only in A %s, only in B %s' %
                    (sorted(set(ta) - set(tb))[:5], sorted(set(tb) - set(ta))[:5]))
    for n in sorted(set(ta) & set(tb)):
        x, y = ta[n], tb[n]
        if x.tensor_type != y.tensor_type:
            errs.append('%s: type %s vs %s' % (n, x.tensor_type.name, y.tensor_type.name))
        elif list(x.shape) != list(y.shape):
            errs.append('%s: shape %s vs %s' % (n, list(x.shape), list(y.shape)))
        elif bytes(x.data.tobytes()) != bytes(y.data.tobytes()):
            errs.append('%s: data differs' % n)
    if not data_only:
        fa, fb = fields(a), fields(b)
        arch = fa.get('general.architecture')
        if arch != fb.get('general.architecture'):
            errs.append('general.architecture differs')
        prefix = bytes(arch[1][0]).decode() + '.' if arch else 'llama.'
        keys = sorted(k for k in set(fa) | set(fb) if k.startswith(prefix) or k.startswith('tokenizer.'))
        for k in keys:
            if k not in fa or k not in fb:
                errs.append('%s only in %s' % (k, 'A' if k in fa else 'B'))
            elif fa[k] != fb[k]:
                errs.append('%s differs' % k)
    for e in errs[:30]:
        print(e)
    print('%s vs %s: %d tensors, %d differences' % (paths[0], paths[1], len(ta), len(errs)))
    sys.exit(1 if errs else 0)


if __name__ == '__main__':
    main()
