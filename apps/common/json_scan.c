/* JSON scanner (json_scan.h): recursive descent with a depth bound; every function checks
 * `end` before it reads. It allocates nothing and keeps no state beyond the iterator. */
#include "json_scan.h"

#include <string.h>

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

const char *fb_js_ws(const char *p, const char *end) {
  while (p < end && is_ws(*p)) p++;
  return p;
}

static const char *skip_depth(const char *p, const char *end, int depth);

static const char *skip_string(const char *p, const char *end) {
  if (p >= end || *p != '"') return NULL;
  for (p++; p < end; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') return p + 1;
    if (c < 0x20) return NULL;
    if (c != '\\') continue;
    if (++p >= end) return NULL;
    if (*p == 'u') {
      for (int i = 0; i < 4; i++) {
        if (++p >= end) return NULL;
        char h = *p;
        if (!is_digit(h) && !((h | 0x20) >= 'a' && (h | 0x20) <= 'f')) return NULL;
      }
    } else if (!strchr("\"\\/bfnrt", *p)) {
      return NULL;
    }
  }
  return NULL;
}

static const char *skip_digits(const char *p, const char *end) {
  if (p >= end || !is_digit(*p)) return NULL;
  while (p < end && is_digit(*p)) p++;
  return p;
}

static const char *skip_number(const char *p, const char *end) {
  if (p < end && *p == '-') p++;
  if (p < end && *p == '0') p++;
  else if (!(p = skip_digits(p, end))) return NULL;
  if (p < end && *p == '.' && !(p = skip_digits(p + 1, end))) return NULL;
  if (p < end && (*p == 'e' || *p == 'E')) {
    p++;
    if (p < end && (*p == '+' || *p == '-')) p++;
    if (!(p = skip_digits(p, end))) return NULL;
  }
  return p;
}

static const char *skip_literal(const char *p, const char *end, const char *lit) {
  size_t n = strlen(lit);
  return (size_t)(end - p) >= n && !memcmp(p, lit, n) ? p + n : NULL;
}

/* Object or array: elements separated by commas, keys in objects. */
static const char *skip_container(const char *p, const char *end, int depth) {
  const bool object = *p == '{';
  const char close = object ? '}' : ']';
  p = fb_js_ws(p + 1, end);
  if (p < end && *p == close) return p + 1;
  for (;;) {
    if (object) {
      if (!(p = skip_string(p, end))) return NULL;
      p = fb_js_ws(p, end);
      if (p >= end || *p != ':') return NULL;
      p++;
    }
    if (!(p = skip_depth(p, end, depth + 1))) return NULL;
    p = fb_js_ws(p, end);
    if (p >= end) return NULL;
    if (*p == close) return p + 1;
    if (*p != ',') return NULL;
    p = fb_js_ws(p + 1, end);
  }
}

static const char *skip_depth(const char *p, const char *end, int depth) {
  if (depth > FB_JS_MAX_DEPTH) return NULL;
  p = fb_js_ws(p, end);
  if (p >= end) return NULL;
  switch (*p) {
  case '{':
  case '[': return skip_container(p, end, depth);
  case '"': return skip_string(p, end);
  case 't': return skip_literal(p, end, "true");
  case 'f': return skip_literal(p, end, "false");
  case 'n': return skip_literal(p, end, "null");
  default: return skip_number(p, end);
  }
}

const char *fb_js_skip(const char *p, const char *end) { return skip_depth(p, end, 0); }

bool fb_js_open(fb_js_iter *it, const char *v, const char *end, bool object) {
  v = fb_js_ws(v, end);
  if (v >= end || *v != (object ? '{' : '[')) return false;
  *it = (fb_js_iter){.p = v + 1, .end = end, .object = object, .first = true};
  return true;
}

int fb_js_next(fb_js_iter *it, const char **key, size_t *klen, const char **val,
               const char **vend) {
  const char *p = fb_js_ws(it->p, it->end);
  const char close = it->object ? '}' : ']';
  if (p >= it->end) return -1;
  if (*p == close) {
    it->p = p + 1;
    return 0;
  }
  if (!it->first) {
    if (*p != ',') return -1;
    p = fb_js_ws(p + 1, it->end);
  }
  it->first = false;
  if (it->object) {
    const char *k = p, *ke = skip_string(p, it->end);
    if (!ke) return -1;
    if (key) *key = k + 1;
    if (klen) *klen = (size_t)(ke - k - 2);
    p = fb_js_ws(ke, it->end);
    if (p >= it->end || *p != ':') return -1;
    p++;
  }
  p = fb_js_ws(p, it->end);
  const char *e = skip_depth(p, it->end, 1);
  if (!e) return -1;
  *val = p;
  *vend = e;
  it->p = e;
  return 1;
}

bool fb_js_key_is(const char *key, size_t klen, const char *name) {
  return strlen(name) == klen && !memcmp(key, name, klen);
}

bool fb_js_int64(const char *v, const char *vend, int64_t *out) {
  const char *p = v;
  bool neg = p < vend && *p == '-';
  if (neg) p++;
  if (p >= vend) return false;
  uint64_t x = 0;
  const uint64_t lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  for (; p < vend; p++) {
    if (!is_digit(*p)) return false;
    unsigned d = (unsigned)(*p - '0');
    if (x > (lim - d) / 10) return false;
    x = x * 10 + d;
  }
  *out = neg ? (int64_t)(0 - x) : (int64_t)x;
  return true;
}
