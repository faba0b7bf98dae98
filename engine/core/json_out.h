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
/* Opens dir/name for writing with a 1 MiB buffer, through a temporary beside it (files.h):
 * FB_EUSAGE when dir/name exists and is not a regular file, FB_EIO naming the path on other
 * failures. */
fb_status fb_json_open(const char *dir, const char *name, FILE **out);
/* Flushes, closes and renames the file into place; FB_EIO naming the file when a write failed
 * (then nothing is written there). FB_EUSAGE when the destination became something other
 * than a regular file meanwhile. */
fb_status fb_json_close(FILE *f, const char *what);
/* Closes without writing anything at dir/name (a failed writer's half file is dropped). */
void fb_json_discard(FILE *f);

#endif
