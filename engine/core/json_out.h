/* Small helpers for writing JSON with stdio: escaped strings, numbers that stay valid JSON
 * (NaN and infinities become null), a large output buffer, and `mkdir -p`.
 * Used by the report, the Chrome trace and the memory snapshot writers. It does not parse. */
#ifndef FB_JSON_OUT_H
#define FB_JSON_OUT_H
#include <stdint.h>
#include <stdio.h>

#include "status.h"

/* Writes s as a JSON string literal (quotes included); NULL writes "". */
void fb_json_str(FILE *f, const char *s);
/* Writes x with 17 significant digits, or null when not finite. */
void fb_json_num(FILE *f, double x);
/* Writes x with `prec` digits after the point (fixed), or null when not finite. */
void fb_json_fixed(FILE *f, double x, int prec);
void fb_json_int(FILE *f, int64_t x);

/* Creates dir and its parents (like mkdir -p). FB_EIO naming the path on failure. */
fb_status fb_mkdir_p(const char *dir);
/* Opens dir/name for writing with a 1 MiB buffer. FB_EIO naming the path on failure. */
fb_status fb_json_open(const char *dir, const char *name, FILE **out);
/* Flushes and closes; FB_EIO naming the file when a write failed. */
fb_status fb_json_close(FILE *f, const char *what);

#endif
