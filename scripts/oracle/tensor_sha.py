# tensor_sha.py - a fingerprint of the tensors of a safetensors file, with
# the Python standard library only (any python3; the tests use it too):
#
#   python3 tensor_sha.py FILE.safetensors
#
# prints sha256 of the lines "name DTYPE [shape] sha256(bytes)\n", sorted by
# name: the tensors' names, types, shapes and bytes, not the header's layout
# or __metadata__ (which carries the writer's version).
import hashlib
import json
import struct
import sys


def tensor_sha(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        lines = []
        for name in sorted(k for k in header if k != "__metadata__"):
            t = header[name]
            b, e = t["data_offsets"]
            f.seek(base + b)
            data = f.read(e - b)
            lines.append("%s %s %s %s\n" % (name, t["dtype"], list(t["shape"]),
                                            hashlib.sha256(data).hexdigest()))
    return hashlib.sha256("".join(lines).encode()).hexdigest()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: tensor_sha.py FILE.safetensors")
    print(tensor_sha(sys.argv[1]))
