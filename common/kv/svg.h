/*
 * svg.h - a minimal SVG 1.1 writer for plots: a standalone document (XML
 * declaration, xmlns, viewBox) that browsers and librsvg render as is.
 * Coordinates are user units with y growing downwards.  The writers do not
 * check each fprintf; callers check ferror()/fclose() on the stream (an
 * atomic xout does), so a full disk still fails the run.
 */
#ifndef LLMKIT_SVG_H
#define LLMKIT_SVG_H

#include <stddef.h>
#include <stdio.h>

/* svg_begin() : XML declaration, <svg> of w x h with a white background and a
 * <title> (escaped). */
void svg_begin(FILE *fp, double w, double h, const char *title);

/* svg_end() : closes the document. */
void svg_end(FILE *fp);

/* svg_escape() : writes s with &, <, >, " and ' escaped and control bytes
 * dropped. */
void svg_escape(FILE *fp, const char *s);

/* svg_rect() : a rectangle; fill/stroke are CSS colours or "none". */
void svg_rect(FILE *fp, double x, double y, double w, double h, const char *fill,
              const char *stroke, double stroke_width);

/* svg_line() : a segment; dash is a stroke-dasharray ("4 3") or NULL. */
void svg_line(FILE *fp, double x1, double y1, double x2, double y2, const char *stroke,
              double width, const char *dash);

/* svg_path() : a polyline through n points xy[2i], xy[2i+1]; with fill not
 * "none" the path is closed down to y = base first (an area under the
 * line).  Nothing is written for n == 0. */
void svg_path(FILE *fp, const double *xy, size_t n, const char *stroke, double width,
              const char *dash, const char *fill, double fill_opacity, double base);

/* svg_text() : text at (x, y) (baseline); anchor "start", "middle", "end";
 * rotate in degrees about (x, y) (0 = none).  The formatted text is escaped. */
void svg_text(FILE *fp, double x, double y, const char *anchor, double size, const char *fill,
              double rotate, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

/* svg_nice_step() : a tick spacing of 1, 2 or 5 times a power of ten giving
 * about `ticks` intervals over range (> 0). */
double svg_nice_step(double range, int ticks);

#endif
