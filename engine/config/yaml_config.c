/* Run configuration as a YAML file: one flat mapping whose keys are the long flag names
 * ('-' or '_'), plus rank / local_rank as --dry-run prints them (read and ignored). Loading
 * applies each key through the option table (so a file and a flag accept exactly the same
 * values); writing emits every option so the file reads back to the
 * same configuration. Model and hardware files are read elsewhere. */
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* rank / local_rank: the place --dry-run printed for the process that wrote the file. Every
 * process takes its own place from its launcher, so a file's are checked (an integer >= 0) and
 * otherwise ignored: one file serves every rank. */
static fb_status placement_key(const char *path, int line, const char *key, const char *value) {
  char *end = NULL;
  long v = strtol(value, &end, 10);
  if (!*value || *end || v < 0 || v > (1 << 20))
    return FB_ERR(FB_EUSAGE, "%s:%d: %s: '%s' is not allowed (want an integer >= 0; read back "
                  "and ignored: each process takes its place from its launcher)", path, line, key,
                  value);
  return FB_OK;
}

static fb_status apply_key(void *ctx, const char *path, int line, const char *key,
                           const char *value) {
  char origin[600];
  if (!strcmp(key, "rank") || !strcmp(key, "local_rank") || !strcmp(key, "local-rank"))
    return placement_key(path, line, key, value);
  snprintf(origin, sizeof origin, "%s:%d: ", path, line);
  return fb_config_set((fb_run_config *)ctx, key, value, origin);
}

/* Only an option that is itself a list (--trace-steps WAIT,WARMUP,ACTIVE) may be written as a
 * YAML list; any other key given a list or a mapping is refused, naming it. */
static bool takes_list(const char *key) {
  const fb_option *o = fb_config_option(key);
  return o && o->kind == FB_OPT_TRACE_STEPS;
}

fb_status fb_config_load_yaml(fb_run_config *c, const char *path) {
  const fb_yaml_shape shape = {.flag = "--config", .takes_list = takes_list, .visit = apply_key};
  return fb_yaml_read(path, &shape, c);
}

/* Double-quoted YAML string: backslash and quote escaped, control bytes as \xNN. */
static void put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      fprintf(f, "\\%c", ch);
    else if (ch < 0x20)
      fprintf(f, "\\x%02x", ch);
    else
      fputc(ch, f);
  }
  fputc('"', f);
}

void fb_config_write_yaml(FILE *f, const fb_run_config *c) {
  char val[600];
  fprintf(f, "# fsdpbench %s run configuration (fsdpbench --config FILE)\n", FB_VERSION);
  for (int i = 0; i < fb_config_option_count(); i++) {
    const fb_option *o = fb_config_option_at(i);
    if (o->kind == FB_OPT_CONFIG || o->kind == FB_OPT_HELP || o->kind == FB_OPT_VERSION) continue;
    if (o->kind == FB_OPT_F64 && !strcmp(o->name, "min-lr") && c->min_lr < 0) continue; /* unset */
    fb_config_format_option(c, o, val, sizeof val);
    fprintf(f, "%s: ", o->name);
    if (o->kind == FB_OPT_STR || o->kind == FB_OPT_TRACE_STEPS)
      put_quoted(f, val);
    else
      fputs(val, f);
    fputc('\n', f);
  }
}
