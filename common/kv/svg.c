/*
 * svg.c - the SVG writer (see svg.h).  Numbers are written with "%.2f": a
 * hundredth of a unit is below what a screen shows, and short files load fast.
 */
#include "svg.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

void
svg_escape(FILE *fp, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': fputs("&amp;", fp); break;
        case '<': fputs("&lt;", fp); break;
        case '>': fputs("&gt;", fp); break;
        case '"': fputs("&quot;", fp); break;
        case '\'': fputs("&apos;", fp); break;
        default:
            /* XML 1.0 forbids most control characters even as references */
            if (c >= 0x20 || c == '\t')
                fputc(c, fp);
            break;
        }
    }
}

void
svg_begin(FILE *fp, double w, double h, const char *title)
{
    fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
                "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
                "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            w, h, w, h);
    fputs("<title>", fp);
    svg_escape(fp, title ? title : "");
    fputs("</title>\n", fp);
    svg_rect(fp, 0, 0, w, h, "#ffffff", "none", 0);
}

void
svg_end(FILE *fp)
{
    fputs("</svg>\n", fp);
}

void
svg_rect(FILE *fp, double x, double y, double w, double h, const char *fill, const char *stroke,
         double stroke_width)
{
    fprintf(fp, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"", x, y,
            w, h, fill);
    if (stroke && strcmp(stroke, "none"))
        fprintf(fp, " stroke=\"%s\" stroke-width=\"%.2f\"", stroke, stroke_width);
    fputs("/>\n", fp);
}

void
svg_line(FILE *fp, double x1, double y1, double x2, double y2, const char *stroke, double width,
         const char *dash)
{
    fprintf(fp, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                "stroke-width=\"%.2f\"", x1, y1, x2, y2, stroke, width);
    if (dash)
        fprintf(fp, " stroke-dasharray=\"%s\"", dash);
    fputs("/>\n", fp);
}

void
svg_path(FILE *fp, const double *xy, size_t n, const char *stroke, double width, const char *dash,
         const char *fill, double fill_opacity, double base)
{
    size_t i;
    int area = fill && strcmp(fill, "none");

    if (n == 0)
        return;
    fputs("<path d=\"", fp);
    if (area) {
        fprintf(fp, "M%.2f %.2f", xy[0], base);
        for (i = 0; i < n; i++)
            fprintf(fp, " L%.2f %.2f", xy[2 * i], xy[2 * i + 1]);
        fprintf(fp, " L%.2f %.2f Z", xy[2 * (n - 1)], base);
    } else {
        for (i = 0; i < n; i++)
            fprintf(fp, "%s%.2f %.2f", i ? " L" : "M", xy[2 * i], xy[2 * i + 1]);
    }
    fprintf(fp, "\" fill=\"%s\"", area ? fill : "none");
    if (area)
        fprintf(fp, " fill-opacity=\"%.2f\"", fill_opacity);
    fprintf(fp, " stroke=\"%s\" stroke-width=\"%.2f\" stroke-linejoin=\"round\"",
            stroke ? stroke : "none", width);
    if (dash)
        fprintf(fp, " stroke-dasharray=\"%s\"", dash);
    fputs("/>\n", fp);
}

void
svg_text(FILE *fp, double x, double y, const char *anchor, double size, const char *fill,
         double rotate, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fprintf(fp, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"%.1f\" fill=\"%s\" text-anchor=\"%s\"",
            x, y, size, fill, anchor);
    if (rotate != 0)
        fprintf(fp, " transform=\"rotate(%.1f %.2f %.2f)\"", rotate, x, y);
    fputc('>', fp);
    svg_escape(fp, buf);
    fputs("</text>\n", fp);
}

double
svg_nice_step(double range, int ticks)
{
    double raw, mag, f;

    if (!(range > 0) || ticks < 1)
        return 1.0;
    raw = range / ticks;
    mag = pow(10.0, floor(log10(raw)));
    f = raw / mag;
    if (f <= 1.0)
        f = 1.0;
    else if (f <= 2.0)
        f = 2.0;
    else if (f <= 5.0)
        f = 5.0;
    else
        f = 10.0;
    return f * mag;
}
