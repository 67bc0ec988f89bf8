"""speccurve - the verify pass's cost curve of `generate --spec-tokens auto`
(its JSON's speculative.verify_cost_ms: milliseconds per verify pass of n
tokens, measured at position 0) and the best speedup over plain decoding
that such a curve allows, for scripts/bench-spec and scripts/bench-eagle;
with the runs' verify_slot_ms (what a token's pass costs more per slot of
context it reads, fitted from their own passes), also at longer contexts."""


def curve(specs):
    """the fastest cost seen for each n over the runs' speculative objects"""
    c = {}
    for s in specs:
        for k, v in s.get('verify_cost_ms', {}).items():
            c.setdefault(int(k), []).append(v)
    return {k: min(v) for k, v in sorted(c.items())}


def slot_ms(specs):
    """the median of the runs' fitted verify_slot_ms (those that fitted one), or 0"""
    v = sorted(s['verify_slot_ms'] for s in specs if s.get('verify_slot_ms', 0) > 0)
    return v[len(v) // 2] if v else 0.0


def at_context(cost, slot, ctx):
    """the curve over ctx slots of context: t(n) + n * ctx * slot"""
    return {k: v + k * ctx * slot for k, v in cost.items()}


def bound(cost, a):
    """the best speedup a drafter whose k-th draft token is kept with
    probability a^k (a chain) gets from cost: max over chain lengths k of
    the expected tokens per pass times cost(1) / cost(k + 1), linear
    between measured n"""
    if 1 not in cost:
        return 0
    ks = sorted(cost)
    best, e, ak = 1.0, 1.0, 1.0
    for k in range(1, 32):
        ak *= a
        e += ak
        n = k + 1
        lo = max([x for x in ks if x <= n] or [ks[0]])
        hi = min([x for x in ks if x >= n] or [ks[-1]])
        t = cost[lo] if hi == lo else cost[lo] + (n - lo) / (hi - lo) * (cost[hi] - cost[lo])
        best = max(best, e * cost[1] / t)
    return best


def report(cost, slot=0.0):
    """the lines bench-spec and bench-eagle print under their tables"""
    out = ['verify pass cost (ms, the fastest of the runs): ' +
           ', '.join('t(%d) = %.2f' % (k, v) for k, v in cost.items())]
    if 1 in cost:
        out.append('relative to one token: ' +
                   ', '.join('%d: %.2fx' % (k, v / cost[1]) for k, v in cost.items()))
        out.append('the best speedup this curve allows at per-token acceptance 0.5 / 0.7 / 0.9: '
                   '%.2fx / %.2fx / %.2fx' % (bound(cost, 0.5), bound(cost, 0.7), bound(cost, 0.9)))
    if 1 in cost and slot > 0:
        out.append('a token reads its context at %.4f ms per slot (the runs\' median fit): ' % slot +
                   'the bound at 0.5 / 0.7 / 0.9 over ' + '; '.join(
                       '%d slots %.2fx / %.2fx / %.2fx' % ((c,) + tuple(
                           bound(at_context(cost, slot, c), a) for a in (0.5, 0.7, 0.9)))
                       for c in (256, 1024, 4096)))
    return out
