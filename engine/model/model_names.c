/* Trace names from the model's parameter names (model.h: fb_model_unit_name,
 * fb_model_op_name): a unit's module path is its first parameter's name cut after the layer
 * index ("layers.3.attention_norm.weight" -> "layers.3"); a parameter's module is its name
 * without ".weight" / ".bias". It does not decide which op applies which parameter (the
 * transformer stages set fb_kctx.param) and keeps no state. */
#include "model.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* Length of the prefix of name up to the end of its first all-digit component; 0 if none. */
static size_t layer_prefix(const char *name) {
  const char *c = name;
  while (*c) {
    const char *e = strchr(c, '.');
    size_t len = e ? (size_t)(e - c) : strlen(c);
    bool digits = len > 0;
    for (size_t i = 0; i < len; i++) digits = digits && isdigit((unsigned char)c[i]);
    if (digits) return (size_t)(c - name) + len;
    if (!e) break;
    c = e + 1;
  }
  return 0;
}

const char *fb_model_unit_name(const fb_model *m, int unit, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  buf[0] = '\0';
  if (!m || unit < 0 || unit >= m->nunits) return buf;
  if (unit == 0) {
    snprintf(buf, n, "root");
    return buf;
  }
  const fb_unit *u = &m->units[unit];
  const char *name = u->count > 0 ? m->params[u->first].name : "";
  size_t len = layer_prefix(name);
  if (len > 0) snprintf(buf, n, "%.*s", (int)len, name);
  else snprintf(buf, n, "unit%d", unit);
  return buf;
}

/* The module of parameter id: its name without a trailing ".weight" / ".bias". */
static void param_module(const fb_model *m, int id, char *buf, size_t n) {
  const char *name = m->params[id].name;
  size_t len = strlen(name);
  static const char *const suffix[] = {".weight", ".bias"};
  for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
    size_t sl = strlen(suffix[i]);
    if (len > sl && !strcmp(name + len - sl, suffix[i])) {
      len -= sl;
      break;
    }
  }
  snprintf(buf, n, "%.*s", (int)len, name);
}

const char *fb_model_op_name(const fb_model *m, int unit, int param, const char *op,
                             bool per_unit, char *buf, size_t n) {
  if (!buf || n == 0) return buf;
  if (!op) op = "op";
  char un[64];
  fb_model_unit_name(m, unit, un, sizeof un);
  if (per_unit) {
    if (un[0]) snprintf(buf, n, "%s %s", op, un);
    else snprintf(buf, n, "%s", op);
  } else if (m && param > 0 && param <= m->nparams) {
    param_module(m, param - 1, buf, n);
  } else if (un[0] && unit > 0) {
    snprintf(buf, n, "%s.%s", un, op);
  } else {
    snprintf(buf, n, "%s", op);
  }
  return buf;
}
