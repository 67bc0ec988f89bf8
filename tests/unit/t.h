/*
 * t.h - a tiny C unit-test harness.  Each test binary returns the number of
 * failed checks (0 = pass); scripts/run-ctests treats 77 as "skipped".
 */
#ifndef LLMKIT_T_H
#define LLMKIT_T_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int t_fail, t_checks;

#define CHECK(c) do { t_checks++; if (!(c)) { t_fail++; \
    fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)
#define CHECK_EQ(a, b) do { long long _a = (long long)(a), _b = (long long)(b); t_checks++; \
    if (_a != _b) { t_fail++; fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", \
    __FILE__, __LINE__, #a, #b, _a, _b); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (a), _b = (b); t_checks++; \
    if (!(fabs(_a - _b) <= (tol))) { t_fail++; fprintf(stderr, "%s:%d: %s ~ %s failed: %.9g vs %.9g\n", \
    __FILE__, __LINE__, #a, #b, _a, _b); } } while (0)
#define CHECK_STR(a, b) do { const char *_a = (a), *_b = (b); t_checks++; \
    if (!_a || !_b || strcmp(_a, _b)) { t_fail++; fprintf(stderr, "%s:%d: %s == \"%s\" failed: got \"%s\"\n", \
    __FILE__, __LINE__, #a, _b ? _b : "(null)", _a ? _a : "(null)"); } } while (0)

#define T_DONE() do { if (t_fail) fprintf(stderr, "%s: %d of %d checks failed\n", __FILE__, t_fail, t_checks); \
    return t_fail > 125 ? 125 : t_fail; } while (0)

#endif
