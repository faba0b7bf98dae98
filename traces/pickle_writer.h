/* A streaming writer of Python pickles (protocol 2): dicts, lists, str, int, float, bool and
 * None, written straight to a FILE as they come, so a file of any length needs no tree in
 * memory. Python's pickle.load reads the result (torch.cuda._memory_viz loads the memory
 * snapshot this way), and so does the small unpickler of pytorch.org/memory_viz (MemoryViz.js),
 * which is why long containers are written in batches: it spreads one batch into a call. Containers are opened and closed in order; inside a dict, keys (str)
 * and values alternate. Misuse (a value where a key is due, closing the wrong container, too
 * deep a nesting) is a programming error and asserts. It writes no memo, no classes, no
 * tuples and no bytes, and it does not read pickles.
 * Write errors are not reported per call: the FILE's error flag is checked by whoever closes
 * it (fb_json_close). */
#ifndef FB_PICKLE_WRITER_H
#define FB_PICKLE_WRITER_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define FB_PKL_MAX_DEPTH 16
#define FB_PKL_BATCH 1000 /* items per SETITEMS / APPENDS, as Python's pickler batches */

typedef struct fb_pkl {
  FILE *f;
  int depth;
  char kind[FB_PKL_MAX_DEPTH];   /* 'd' dict, 'l' list */
  bool want_key[FB_PKL_MAX_DEPTH]; /* dict: the next item is a key */
  int batch[FB_PKL_MAX_DEPTH];  /* items (dict: pairs) since the container's last MARK */
} fb_pkl;

/* Starts a pickle on f (the protocol header). Exactly one value follows, then fb_pkl_end. */
void fb_pkl_begin(fb_pkl *p, FILE *f);
void fb_pkl_end(fb_pkl *p);

void fb_pkl_dict(fb_pkl *p);
void fb_pkl_list(fb_pkl *p);
void fb_pkl_close(fb_pkl *p);  /* closes the innermost dict or list */

void fb_pkl_key(fb_pkl *p, const char *k);  /* a dict key (a str) */
void fb_pkl_str(fb_pkl *p, const char *s); /* NULL writes None */
void fb_pkl_int(fb_pkl *p, int64_t v);
void fb_pkl_float(fb_pkl *p, double v);
void fb_pkl_bool(fb_pkl *p, bool v);
void fb_pkl_none(fb_pkl *p);

#endif
