/* Pickle writer (pickle_writer.h): protocol 2 opcodes as Python's pickle.py defines them.
 * A dict is EMPTY_DICT MARK key value ... SETITEMS, a list EMPTY_LIST MARK item ... APPENDS,
 * with MARK ... SETITEMS / APPENDS repeated every FB_PKL_BATCH items. Ints take the
 * shortest of BININT1 / BININT2 / BININT / LONG1, floats BINFLOAT (big-endian IEEE 754),
 * strings BINUNICODE with bytes >= 0x80 written as '?' so that the text always decodes as
 * UTF-8. It keeps no state beyond the nesting stack. */
#include "pickle_writer.h"

#include <assert.h>
#include <string.h>

enum {
  OP_PROTO = 0x80, OP_STOP = '.', OP_MARK = '(', OP_EMPTY_DICT = '}', OP_SETITEMS = 'u',
  OP_EMPTY_LIST = ']', OP_APPENDS = 'e', OP_BININT1 = 'K', OP_BININT2 = 'M', OP_BININT = 'J',
  OP_LONG1 = 0x8a, OP_BINFLOAT = 'G', OP_BINUNICODE = 'X', OP_NEWTRUE = 0x88,
  OP_NEWFALSE = 0x89, OP_NONE = 'N'
};

static void put_le(FILE *f, uint64_t v, int n) {
  for (int i = 0; i < n; i++) fputc((int)((v >> (8 * i)) & 0xff), f);
}

/* Ends the innermost container's batch: its items so far go into it. */
static void flush_batch(fb_pkl *p, int d) {
  fputc(p->kind[d] == 'd' ? OP_SETITEMS : OP_APPENDS, p->f);
  p->batch[d] = 0;
}

/* Bookkeeping before a key (is_key) or a value: keys and values alternate inside a dict, and
 * the top level holds exactly one value (depth -1 once it is written). A full batch is
 * flushed, and a new MARK set, before the next list item or dict key. */
static void item(fb_pkl *p, bool is_key) {
  assert(p->f && p->depth >= 0 && "pickle: value after the top-level one");
  if (p->depth == 0) {
    assert(!is_key && "pickle: key outside a dict");
    return;
  }
  const int d = p->depth - 1;
  if (p->kind[d] == 'd') {
    assert(p->want_key[d] == is_key && "pickle: dict keys and values must alternate");
    p->want_key[d] = !is_key;
  } else {
    assert(!is_key && "pickle: key inside a list");
  }
  if (p->kind[d] == 'l' || is_key) {
    if (p->batch[d] == FB_PKL_BATCH) {
      flush_batch(p, d);
      fputc(OP_MARK, p->f);
    }
    p->batch[d]++;
  }
}

/* After a complete value at the top level: nothing else may follow but fb_pkl_end. */
static void done(fb_pkl *p) {
  if (p->depth == 0) p->depth = -1;
}

void fb_pkl_begin(fb_pkl *p, FILE *f) {
  assert(p && f);
  memset(p, 0, sizeof *p);
  p->f = f;
  fputc(OP_PROTO, f);
  fputc(2, f);
}

void fb_pkl_end(fb_pkl *p) {
  assert(p->depth == -1 && "pickle: one complete value must precede the end");
  fputc(OP_STOP, p->f);
}

static void open_container(fb_pkl *p, char kind, int op) {
  item(p, false);
  assert(p->depth < FB_PKL_MAX_DEPTH && "pickle: nested too deep");
  fputc(op, p->f);
  fputc(OP_MARK, p->f);
  p->kind[p->depth] = kind;
  p->want_key[p->depth] = kind == 'd';
  p->batch[p->depth] = 0;
  p->depth++;
}

void fb_pkl_dict(fb_pkl *p) { open_container(p, 'd', OP_EMPTY_DICT); }
void fb_pkl_list(fb_pkl *p) { open_container(p, 'l', OP_EMPTY_LIST); }

void fb_pkl_close(fb_pkl *p) {
  assert(p->depth > 0 && "pickle: close without an open container");
  const int d = p->depth - 1;
  assert((p->kind[d] != 'd' || p->want_key[d]) && "pickle: dict closed after a key");
  flush_batch(p, d);
  p->depth--;
  done(p);
}

static void put_str(fb_pkl *p, const char *s) {
  const size_t n = strlen(s);
  assert(n <= UINT32_MAX);
  fputc(OP_BINUNICODE, p->f);
  put_le(p->f, n, 4);
  for (size_t i = 0; i < n; i++) fputc((unsigned char)s[i] < 0x80 ? s[i] : '?', p->f);
}

void fb_pkl_key(fb_pkl *p, const char *k) {
  assert(k);
  item(p, true);
  put_str(p, k);
}

void fb_pkl_str(fb_pkl *p, const char *s) {
  if (!s) {
    fb_pkl_none(p);
    return;
  }
  item(p, false);
  put_str(p, s);
  done(p);
}

void fb_pkl_int(fb_pkl *p, int64_t v) {
  item(p, false);
  if (v >= 0 && v < 256) {
    fputc(OP_BININT1, p->f);
    put_le(p->f, (uint64_t)v, 1);
  } else if (v >= 0 && v < 65536) {
    fputc(OP_BININT2, p->f);
    put_le(p->f, (uint64_t)v, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    fputc(OP_BININT, p->f);
    put_le(p->f, (uint64_t)v, 4); /* two's complement, little-endian */
  } else {
    fputc(OP_LONG1, p->f);
    fputc(8, p->f);
    put_le(p->f, (uint64_t)v, 8);
  }
  done(p);
}

void fb_pkl_float(fb_pkl *p, double v) {
  item(p, false);
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  fputc(OP_BINFLOAT, p->f);
  for (int i = 7; i >= 0; i--) fputc((int)((bits >> (8 * i)) & 0xff), p->f);
  done(p);
}

void fb_pkl_bool(fb_pkl *p, bool v) {
  item(p, false);
  fputc(v ? OP_NEWTRUE : OP_NEWFALSE, p->f);
  done(p);
}

void fb_pkl_none(fb_pkl *p) {
  item(p, false);
  fputc(OP_NONE, p->f);
  done(p);
}
