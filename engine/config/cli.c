/* Command-line flags: `--flag value`, `--flag=value`, booleans as `--x`, `--no-x`,
 * `--x=true|false` (or `--x true|false`); --recompute's value is optional (bare: full,
 * --no-recompute: off). Every --config FILE is applied first, in order, so
 * flags override the file wherever they appear. Values go through the option table
 * (options.c); this file only splits argv. --help / -h / --version anywhere win. It prints
 * nothing. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

static bool is_bool_word(const char *s) {
  static const char *w[] = {"true", "false", "yes", "no", "on", "off"};
  for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
    if (!strcasecmp(s, w[i])) return true;
  return false;
}

/* Edit distance with adjacent transpositions, capped small strings only. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 99;
  int d[41][41];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      int cost = a[i - 1] != b[j - 1];
      int v = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
      if (d[i - 1][j - 1] + cost < v) v = d[i - 1][j - 1] + cost;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
        v = d[i - 2][j - 2] + 1;
      d[i][j] = v;
    }
  return d[la][lb];
}

static fb_status unknown_flag(const char *arg) {
  const char *best = NULL;
  int bestd = 3;
  for (int i = 0; i < fb_config_option_count(); i++) {
    int d = distance(arg + 2, fb_config_option_at(i)->name);
    if (d < bestd) {
      bestd = d;
      best = fb_config_option_at(i)->name;
    }
  }
  if (best) return FB_ERR(FB_EUSAGE, "unknown flag '%s' (did you mean --%s? see --help)", arg, best);
  return FB_ERR(FB_EUSAGE, "unknown flag '%s' (see --help)", arg);
}

/* One flag at argv[*i]: finds its option and value, advancing *i past a separate value. */
typedef struct flag_ref {
  const fb_option *opt;
  const char *value; /* NULL: none given */
  bool negated;      /* --no-x */
} flag_ref;

static fb_status split_flag(int argc, char **argv, int *i, flag_ref *r) {
  const char *arg = argv[*i];
  memset(r, 0, sizeof *r);
  /* Errors echo the argument: a newline in it would split the one error line. */
  for (const char *p = arg; *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      return FB_ERR(FB_EUSAGE, "argument %d contains a control character (0x%02x; want --name, "
                    "--name=value or a value on one line)", *i, (unsigned char)*p);
  if (strncmp(arg, "--", 2) || !arg[2])
    return FB_ERR(FB_EUSAGE, "unexpected argument '%s' (flags start with --; see --help)", arg);
  char name[64];
  const char *eq = strchr(arg, '=');
  size_t len = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
  if (len >= sizeof name) return unknown_flag(arg);
  memcpy(name, arg + 2, len);
  name[len] = 0;
  r->opt = fb_config_option(name);
  if (!r->opt && !strncmp(name, "no-", 3)) {
    const fb_option *o = fb_config_option(name + 3);
    if (o && (o->kind == FB_OPT_BOOL || o->kind == FB_OPT_RECOMPUTE)) {
      if (eq) return FB_ERR(FB_EUSAGE, "--%s takes no value (got '%s')", name, eq + 1);
      r->opt = o;
      r->negated = true;
      return FB_OK;
    }
  }
  if (!r->opt) {
    if (eq) {
      char bare[80];
      snprintf(bare, sizeof bare, "--%s", name);
      return unknown_flag(bare);
    }
    return unknown_flag(arg);
  }
  fb_opt_kind k = r->opt->kind;
  if (k == FB_OPT_HELP || k == FB_OPT_VERSION) {
    if (eq) return FB_ERR(FB_EUSAGE, "--%s takes no value (got '%s')", r->opt->name, eq + 1);
    return FB_OK;
  }
  if (eq) {
    r->value = eq + 1;
    return FB_OK;
  }
  if (k == FB_OPT_BOOL) {
    if (*i + 1 < argc && is_bool_word(argv[*i + 1])) r->value = argv[++*i];
    return FB_OK;
  }
  if (k == FB_OPT_RECOMPUTE) { /* the value is optional: a bare --recompute is full */
    if (*i + 1 < argc && strncmp(argv[*i + 1], "--", 2)) r->value = argv[++*i];
    return FB_OK;
  }
  if (*i + 1 >= argc || !strncmp(argv[*i + 1], "--", 2))
    return FB_ERR(FB_EUSAGE, "--%s: missing value (usage: --%s %s)", r->opt->name, r->opt->name,
                  r->opt->metavar ? r->opt->metavar : "VALUE");
  r->value = argv[++*i];
  return FB_OK;
}

fb_status fb_config_parse_cli(fb_run_config *c, int argc, char **argv, int first,
                              fb_cli_action *action) {
  *action = FB_CLI_RUN;
  /* --help and --version win over anything else on the line, even a bad flag. */
  for (int i = first; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      *action = FB_CLI_HELP;
      return FB_OK;
    }
    if (!strcmp(argv[i], "--version")) *action = FB_CLI_VERSION;
  }
  if (*action == FB_CLI_VERSION) return FB_OK;
  flag_ref r;
  /* Pass 1: syntax of every flag, and the --config files, in order. */
  for (int i = first; i < argc; i++) {
    FB_TRY(split_flag(argc, argv, &i, &r));
    if (r.opt->kind == FB_OPT_CONFIG) FB_TRY(fb_config_load_yaml(c, r.value));
  }
  /* Pass 2: everything else overrides the files. */
  for (int i = first; i < argc; i++) {
    FB_TRY(split_flag(argc, argv, &i, &r));
    switch (r.opt->kind) {
    case FB_OPT_CONFIG: break;
    case FB_OPT_HELP:
    case FB_OPT_VERSION: break; /* handled above */
    case FB_OPT_BOOL:
      FB_TRY(fb_config_set(c, r.opt->name, r.negated ? "false" : (r.value ? r.value : "true"),
                           NULL));
      break;
    case FB_OPT_RECOMPUTE:
      FB_TRY(fb_config_set(c, r.opt->name, r.negated ? "off" : (r.value ? r.value : "full"),
                           NULL));
      break;
    default: FB_TRY(fb_config_set(c, r.opt->name, r.value, NULL)); break;
    }
  }
  return FB_OK;
}

fb_status fb_config_parse_args(fb_run_config *c, int argc, char **argv, int first, bool *help) {
  fb_cli_action a;
  fb_status st = fb_config_parse_cli(c, argc, argv, first, &a);
  *help = (a != FB_CLI_RUN);
  return st;
}
