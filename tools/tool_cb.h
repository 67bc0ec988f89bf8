/*
 * tool_cb.h - the run_callbacks (runcb.h) every tool hands to its run_*():
 * progress bars on stderr, warnings (warnmsg) and notes (infomsg).
 */
#ifndef LLMKIT_TOOL_CB_H
#define LLMKIT_TOOL_CB_H

#include <stdbool.h>

#include "runcb.h"

/* -1 auto (stderr is a terminal and the tool is not quiet), 0 never, 1
 * always: the mode of the bars tool_callbacks() draws (--[no-]progress). */
extern int tool_progress_mode;

/* tool_callbacks() : callbacks for a run_*(): a progress bar on stderr per
 * phase (tool_progress_mode), warnings through warnmsg() and notes through
 * infomsg().  esc: escape the messages with ESC() too (escape.h: also their
 * backslashes), for messages that quote untrusted names unescaped. */
struct run_callbacks tool_callbacks(bool esc);

#endif
