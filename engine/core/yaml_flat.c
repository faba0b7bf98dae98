/* Reader for the YAML shapes this project uses: a single flat mapping of scalar keys to
 * scalar values (or, for the keys the shape names, a short list of scalars), where the caller may allow a one-level mapping
 * of scalars as a value (hardware profiles' kernel_gbs). Built on libyaml's event parser (the
 * only libyaml API the project uses), it streams: nothing deeper than that shape is ever
 * built, and a file over FB_YAML_MAX_BYTES is refused unread. Every problem is FB_EUSAGE
 * "path:line:col: ...". It knows nothing about which keys exist: the visitors decide that. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <yaml.h>

#include "files.h"
#include "yaml_flat.h"

/* The largest YAML file read: run configs, models and hardware profiles are a few KB, so a
 * bigger file is a mistake (or hostile) and is refused before libyaml reads any of it. Nesting
 * is bounded by construction: a value is a scalar, one list of scalars or (where the shape
 * allows) one mapping of scalars, and the first event deeper than that is refused. */
#define FB_YAML_MAX_BYTES (1 << 20)

typedef struct seen_key {
  char key[64];
  int line;
} seen_key;

static void norm_key(const char *k, char *out, size_t n) {
  size_t i = 0;
  for (; k[i] && i + 1 < n; i++) out[i] = k[i] == '-' ? '_' : k[i];
  out[i] = 0;
}

static fb_status parse_error(const yaml_parser_t *p, const char *path) {
  const char *problem = p->problem ? p->problem : "malformed YAML";
  if (p->context)
    return FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s (%s)", path, p->problem_mark.line + 1,
                  p->problem_mark.column + 1, problem, p->context);
  return FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s", path, p->problem_mark.line + 1,
                p->problem_mark.column + 1, problem);
}

static fb_status next_event(yaml_parser_t *p, yaml_event_t *ev, const char *path) {
  if (!yaml_parser_parse(p, ev)) return parse_error(p, path);
  return FB_OK;
}

static bool is_null_scalar(const yaml_event_t *ev) {
  if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
  const char *v = (const char *)ev->data.scalar.value;
  return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
         !strcmp(v, "NULL");
}

/* Keys and values are echoed in error lines: a control character (a newline or NUL from a
 * quoted escape or a folded flow scalar) would split the one line or cut the value short, so
 * it is refused without echoing the text (a fuzz_hardware finding). Tabs are allowed. */
static fb_status check_text(const yaml_event_t *ev, const char *path, const char *what) {
  const unsigned char *v = ev->data.scalar.value;
  for (size_t i = 0; i < ev->data.scalar.length; i++)
    if ((v[i] < 0x20 && v[i] != '\t') || v[i] == 0x7f)
      return FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: contains a control character (byte %zu is "
                    "0x%02x; want text on one line)", path, ev->start_mark.line + 1,
                    ev->start_mark.column + 1, what, i, v[i]);
  return FB_OK;
}

/* One scalar event into val (null -> ""), or FB_EUSAGE naming what when it does not fit. */
static fb_status copy_scalar(const yaml_event_t *ev, const char *path, const char *what,
                             char *val, size_t n) {
  FB_TRY(check_text(ev, path, what));
  if (ev->data.scalar.length >= n)
    return FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: value is too long (%zu characters, at most %zu)",
                  path, ev->start_mark.line + 1, ev->start_mark.column + 1, what,
                  ev->data.scalar.length, n - 1);
  snprintf(val, n, "%s", is_null_scalar(ev) ? "" : (const char *)ev->data.scalar.value);
  return FB_OK;
}

/* The entries of a one-level mapping value (after its MAPPING_START): each `name: scalar`
 * goes to shape->entry; a deeper value is refused. */
static fb_status read_entries(yaml_parser_t *p, const char *path, const fb_yaml_shape *shape,
                              void *ctx, const char *key) {
  for (;;) {
    yaml_event_t kev, vev;
    FB_TRY(next_event(p, &kev, path));
    if (kev.type == YAML_MAPPING_END_EVENT) {
      yaml_event_delete(&kev);
      return FB_OK;
    }
    const size_t line = kev.start_mark.line + 1, col = kev.start_mark.column + 1;
    char name[64], val[1024], what[160];
    fb_status st = FB_OK;
    if (kev.type != YAML_SCALAR_EVENT)
      st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: each entry is 'name: value' with a plain name",
                  path, line, col, key);
    else
      st = copy_scalar(&kev, path, key, name, sizeof name);
    yaml_event_delete(&kev);
    if (st) return st;
    snprintf(what, sizeof what, "%s.%s", key, name);
    FB_TRY(next_event(p, &vev, path));
    if (vev.type == YAML_SCALAR_EVENT)
      st = copy_scalar(&vev, path, what, val, sizeof val);
    else
      st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: want a single value (lists, mappings and aliases "
                  "are not allowed here)", path, vev.start_mark.line + 1,
                  vev.start_mark.column + 1, what);
    yaml_event_delete(&vev);
    if (st) return st;
    FB_TRY(shape->entry(ctx, path, (int)line, key, name, val));
  }
}

/* Reads a value after a key: a scalar, a sequence of scalars joined with ',' (where
 * shape->takes_list(key)), or a one-level mapping handed entry by entry to shape->entry (where set). */
static fb_status read_value(yaml_parser_t *p, const char *path, const fb_yaml_shape *shape,
                            void *ctx, const char *key, char *val, size_t n, bool *is_map) {
  yaml_event_t ev;
  fb_status st = next_event(p, &ev, path);
  if (st) return st;
  size_t line = ev.start_mark.line + 1, col = ev.start_mark.column + 1;
  *is_map = false;
  switch (ev.type) {
  case YAML_SCALAR_EVENT: st = copy_scalar(&ev, path, key, val, n); break;
  case YAML_SEQUENCE_START_EVENT: {
    if (!shape->takes_list || !shape->takes_list(key)) {
      st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: a list is not allowed here (want a single value)",
                  path, line, col, key);
      break;
    }
    size_t len = 0;
    val[0] = 0;
    for (;;) {
      yaml_event_t item;
      st = next_event(p, &item, path);
      if (st) break;
      if (item.type == YAML_SEQUENCE_END_EVENT) {
        yaml_event_delete(&item);
        break;
      }
      if (item.type != YAML_SCALAR_EVENT) {
        st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: a list may hold only plain values", path,
                    item.start_mark.line + 1, item.start_mark.column + 1, key);
        yaml_event_delete(&item);
        break;
      }
      st = check_text(&item, path, key);
      int w = st ? 0 : snprintf(val + len, n - len, "%s%s", len ? "," : "",
                                (const char *)item.data.scalar.value);
      yaml_event_delete(&item);
      if (st) break;
      if (w < 0 || (size_t)w >= n - len) {
        st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: list is too long", path, line, col, key);
        break;
      }
      len += (size_t)w;
    }
    break;
  }
  case YAML_MAPPING_START_EVENT:
    if (shape->entry) {
      *is_map = true;
      st = read_entries(p, path, shape, ctx, key);
      break;
    }
    st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: a mapping is not allowed here (want a single value)",
                path, line, col, key);
    break;
  case YAML_ALIAS_EVENT:
    st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: aliases are not allowed (want a single value)", path,
                line, col, key);
    break;
  default:
    st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: %s: expected a value", path, line, col, key);
    break;
  }
  yaml_event_delete(&ev);
  return st;
}

fb_status fb_yaml_read_flat(const char *path, const char *flag, fb_yaml_visit_fn visit,
                            void *ctx) {
  const fb_yaml_shape flat = {.flag = flag, .visit = visit};
  return fb_yaml_read(path, &flat, ctx);
}

fb_status fb_yaml_read(const char *path, const fb_yaml_shape *shape, void *ctx) {
  const char *flag = shape->flag;
  fb_status st = fb_check_input(path, flag, "a YAML file");
  if (st != FB_OK) return st;
  FILE *f = fopen(path, "rb");
  if (!f) return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s", flag, path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
    fclose(f);
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': it is a directory (want a YAML file)", flag,
                  path);
  }
  if (fstat(fileno(f), &sb) == 0 && sb.st_size > FB_YAML_MAX_BYTES) {
    fclose(f);
    return FB_ERR(FB_EUSAGE, "%s: '%s' is %lld bytes (want a YAML file of at most %d bytes: "
                  "configurations, models and hardware profiles are a few KB)", flag, path,
                  (long long)sb.st_size, FB_YAML_MAX_BYTES);
  }
  yaml_parser_t p;
  if (!yaml_parser_initialize(&p)) {
    st = FB_ERR(FB_ENOMEM, "%s: cannot initialise the YAML parser", path);
    goto close_file;
  }
  yaml_parser_set_input_file(&p, f);

  seen_key *seen = NULL;
  int nseen = 0, capseen = 0;
  yaml_event_t ev;
  bool in_mapping = false, done = false, have_doc = false;
  while (!done) {
    FB_CHECK_GOTO(st, next_event(&p, &ev, path), free_parser);
    size_t line = ev.start_mark.line + 1, col = ev.start_mark.column + 1;
    switch (ev.type) {
    case YAML_STREAM_START_EVENT:
    case YAML_DOCUMENT_END_EVENT: break;
    case YAML_STREAM_END_EVENT: done = true; break;
    case YAML_DOCUMENT_START_EVENT:
      if (have_doc) {
        st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: only one YAML document is allowed", path, line, col);
        goto free_event;
      }
      have_doc = true;
      break;
    case YAML_MAPPING_START_EVENT:
      if (in_mapping) goto nested; /* unreachable: values are read by read_value */
      in_mapping = true;
      break;
    case YAML_MAPPING_END_EVENT: in_mapping = false; break;
    case YAML_SCALAR_EVENT: {
      if (!in_mapping) {
        if (is_null_scalar(&ev)) break; /* an empty document */
        st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: expected a mapping of 'key: value' lines", path, line,
                    col);
        goto free_event;
      }
      char key[64], nk[64], val[1024];
      FB_CHECK_GOTO(st, check_text(&ev, path, "a key"), free_event);
      if (ev.data.scalar.length >= sizeof key) {
        st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: key '%.40s...' is too long", path, line, col,
                    (const char *)ev.data.scalar.value);
        goto free_event;
      }
      snprintf(key, sizeof key, "%s", (const char *)ev.data.scalar.value);
      norm_key(key, nk, sizeof nk);
      for (int i = 0; i < nseen; i++) {
        if (strcmp(seen[i].key, nk)) continue;
        st = FB_ERR(FB_EUSAGE, "%s:%zu: duplicate key '%s' (first set at line %d)", path, line, key,
                    seen[i].line);
        goto free_event;
      }
      if (nseen == capseen) {
        capseen = capseen ? 2 * capseen : 32;
        seen_key *grown = realloc(seen, (size_t)capseen * sizeof *seen);
        if (!grown) {
          st = FB_ERR(FB_ENOMEM, "%s: out of memory", path);
          goto free_event;
        }
        seen = grown;
      }
      snprintf(seen[nseen].key, sizeof seen[nseen].key, "%s", nk);
      seen[nseen++].line = (int)line;
      bool is_map;
      FB_CHECK_GOTO(st, read_value(&p, path, shape, ctx, key, val, sizeof val, &is_map),
                    free_event);
      if (!is_map) FB_CHECK_GOTO(st, shape->visit(ctx, path, (int)line, key, val), free_event);
      break;
    }
    case YAML_SEQUENCE_START_EVENT:
      st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: expected a mapping of 'key: value' lines, not a list",
                  path, line, col);
      goto free_event;
    case YAML_ALIAS_EVENT:
    nested:
      st = FB_ERR(FB_EUSAGE, "%s:%zu:%zu: expected a plain key", path, line, col);
      goto free_event;
    default: break;
    }
    yaml_event_delete(&ev);
  }
  goto free_parser;

free_event:
  yaml_event_delete(&ev);
free_parser:
  free(seen);
  yaml_parser_delete(&p);
close_file:
  fclose(f);
  return st;
}
