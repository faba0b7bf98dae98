/* A minimal JSON scanner over a text held in memory: it validates and walks values without
 * building a tree, handing back each value as a [begin, end) span of the text so a caller can
 * copy it verbatim or read the few scalars it needs. Used by `fsdpbench trace-merge`.
 * Strict where it matters for robustness (RFC 8259 grammar, nesting depth bounded by
 * FB_JS_MAX_DEPTH, every span inside the buffer); it does not unescape strings (keys are
 * compared as written) and does not convert numbers other than integers. */
#ifndef FB_JSON_SCAN_H
#define FB_JSON_SCAN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FB_JS_MAX_DEPTH 64

/* Skips whitespace. */
const char *fb_js_ws(const char *p, const char *end);
/* The end of the value starting at p (after whitespace), NULL when it is not valid JSON. */
const char *fb_js_skip(const char *p, const char *end);

/* Walks the elements of an object or array. */
typedef struct fb_js_iter {
  const char *p, *end;
  bool object, first;
} fb_js_iter;

/* Starts at the value v (after whitespace): false when it is not an object / array. */
bool fb_js_open(fb_js_iter *it, const char *v, const char *end, bool object);
/* Next element: 1 with its value span [*val, *vend) (and, in an object, the key's raw text
 * between the quotes in [*key, *key + *klen)), 0 after the last one, -1 on a syntax error. */
int fb_js_next(fb_js_iter *it, const char **key, size_t *klen, const char **val,
               const char **vend);

/* Whether the raw key equals name (no escapes involved). */
bool fb_js_key_is(const char *key, size_t klen, const char *name);
/* An integer value (no fraction, no exponent) that fits int64. */
bool fb_js_int64(const char *v, const char *vend, int64_t *out);

#endif
