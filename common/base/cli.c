#include "cli.h"

#include <time.h>

#include "status.h"

int
rc_from_st(int st)
{
    if (st < 0)
        st = -st;
    switch (st) {
    case ST_OK: return RC_OK;
    case ST_IO: return RC_IO;
    case ST_FORMAT: return RC_DATA;
    case ST_NOMEM: return RC_RESOURCE;
    case ST_DEVICE: return RC_RESOURCE;
    case ST_RANGE: return RC_USAGE;
    case ST_CHECK: return RC_CHECK;
    default: return RC_FAIL;
    }
}

double
now_seconds(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
