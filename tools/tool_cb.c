/*
 * tool_cb.c - the tools' side of the library's run_callbacks (runcb.h):
 * a TTY-aware progress bar on stderr, redrawn at most 10 times a second
 * with "\r" and ended with "\n" (zstd's policy), warnings and notes.
 */
#include "tool_cb.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "escape.h"
#include "tool.h"

/* One bar; enabled < 0 = auto (stderr is a TTY and the tool is not quiet),
 * 0 off, 1 forced on. */
struct progress {
    bool on;
    const char *label;
    uint64_t total;
    uint64_t done;
    double last_draw;
    double start;
};

static void
progress_draw(struct progress *p)
{
    double frac = p->total ? (double)p->done / (double)p->total : 0.0;
    int width = 30, fill, i;
    char bar[32];

    if (frac > 1.0)
        frac = 1.0;
    fill = (int)(frac * width);
    for (i = 0; i < width; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[width] = '\0';
    fprintf(stderr, "\r%s: %s [%s] %3d%%", cli_progname, p->label, bar, (int)(frac * 100.0));
    fflush(stderr);
    cli_line_open = true;
}

static void
progress_begin(struct progress *p, int enabled, const char *label, uint64_t total)
{
    memset(p, 0, sizeof(*p));
    if (enabled < 0)
        p->on = cli_verbosity >= 1 && isatty(STDERR_FILENO);
    else
        p->on = enabled > 0;
    p->label = label;
    p->total = total;
    p->start = now_seconds();
}

static void
progress_update(struct progress *p, uint64_t done)
{
    double t;

    p->done = done;
    if (!p->on)
        return;
    t = now_seconds();
    if (t - p->last_draw < 0.1)
        return;
    p->last_draw = t;
    progress_draw(p);
}

static void
progress_end(struct progress *p)
{
    if (!p->on)
        return;
    p->done = p->total;
    progress_draw(p);
    fputc('\n', stderr);
    cli_line_open = false;
    p->on = false;
}

/* ---- the callbacks ---- */

int tool_progress_mode = -1;

/* One bar at a time: the library runs one phase after another. */
static struct progress phase_bar;

static void
on_progress(void *ctx, const char *label, int64_t done, int64_t total)
{
    (void)ctx;
    /* a phase begins at 0, or where a run left it (features from a cache) */
    if (done == 0 || label != phase_bar.label || (uint64_t)done < phase_bar.done)
        progress_begin(&phase_bar, tool_progress_mode, label, (uint64_t)total);
    progress_update(&phase_bar, (uint64_t)done);
    if (done == total)
        progress_end(&phase_bar);
}

/* ctx: non-NULL when the messages are to be escaped (tool_callbacks(true)) */
static void
on_warn(void *ctx, const char *msg)
{
    warnmsg("%s", ctx ? ESC(msg) : msg);
}

static void
on_info(void *ctx, const char *msg)
{
    infomsg("%s", ctx ? ESC(msg) : msg);
}

struct run_callbacks
tool_callbacks(bool esc)
{
    static char escape;
    struct run_callbacks cb = { on_progress, on_warn, on_info, esc ? &escape : NULL };

    return cb;
}
