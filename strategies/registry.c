/* The strategy table: every strategy the executor can run, by name. Adding a strategy is its
 * file in strategies/ plus one line here; everything that enumerates strategies reads this. */
#include "strategy.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

extern const fb_strategy fb_strategy_single, fb_strategy_ddp, fb_strategy_zero3,
    fb_strategy_fsdp, fb_strategy_yafsdp, fb_strategy_fsdp2;
extern const fb_strategy fb_strategy_zero1, fb_strategy_zero2;
extern const fb_strategy fb_strategy_hsdp;
extern const fb_strategy fb_strategy_zeropp;

static const fb_strategy *const table[] = {
    &fb_strategy_single, &fb_strategy_ddp, &fb_strategy_zero3, &fb_strategy_fsdp,
    &fb_strategy_yafsdp, &fb_strategy_fsdp2,
    &fb_strategy_zero1, &fb_strategy_zero2,
    &fb_strategy_hsdp,
    &fb_strategy_zeropp,
};
enum { NSTRATEGIES = sizeof table / sizeof *table };

/* Strategies a test program adds before it runs anything (fb_strategy_register): the way a
 * test proves that every suite picks a new strategy up. Not thread-safe: call it first. */
enum { MAX_EXTRA = 8 };
static const fb_strategy *extra[MAX_EXTRA];
static int nextra;
static char names_buf[1024];

int fb_strategy_count(void) { return NSTRATEGIES + nextra; }

const fb_strategy *fb_strategy_at(int i) {
  if (i >= 0 && i < NSTRATEGIES) return table[i];
  return i >= NSTRATEGIES && i < NSTRATEGIES + nextra ? extra[i - NSTRATEGIES] : NULL;
}

const fb_strategy *fb_strategy_lookup(const char *name) {
  for (int i = 0; name && fb_strategy_at(i); i++)
    if (!strcmp(fb_strategy_at(i)->name, name)) return fb_strategy_at(i);
  return NULL;
}

const char *fb_strategy_names(void) {
  size_t o = 0;
  names_buf[0] = 0;
  for (int i = 0; fb_strategy_at(i) && o < sizeof names_buf; i++)
    o += (size_t)snprintf(names_buf + o, sizeof names_buf - o, "%s%s", i ? ", " : "",
                          fb_strategy_at(i)->name);
  return names_buf;
}

bool fb_strategy_register(const fb_strategy *s) {
  if (!s || !s->name || fb_strategy_lookup(s->name) || nextra >= MAX_EXTRA) return false;
  extra[nextra++] = s;
  return true;
}

/* "a, b, c": the strategies whose bool field at `field` (offsetof) is set, in table order. */
static void names_with(size_t field, char *out, size_t cap) {
  size_t o = 0;
  out[0] = 0;
  for (int i = 0; fb_strategy_at(i) && o < cap; i++)
    if (*(const bool *)((const char *)fb_strategy_at(i) + field))
      o += (size_t)snprintf(out + o, cap - o, "%s%s", o ? ", " : "", fb_strategy_at(i)->name);
}

fb_status fb_run_config_finalize(fb_run_config *c) {
  FB_TRY(fb_config_finalize(c));
  const fb_strategy *s = fb_strategy_lookup(c->strategy);
  if (!s)
    return FB_ERR(FB_EUSAGE, "--strategy: unknown strategy '%s' (allowed: %s)", c->strategy,
                  fb_strategy_names());
  const bool zpp = c->zeropp_quant_weights || c->zeropp_hpz || c->zeropp_quant_grads;
  if (zpp && !s->takes_zeropp)
    return FB_ERR(FB_EUSAGE, "--zeropp-%s: not allowed with --strategy %s (only zeropp takes "
                  "the --zeropp-* switches)", c->zeropp_quant_weights ? "quant-weights"
                  : c->zeropp_hpz ? "hpz" : "quant-grads", c->strategy);
  if (c->zeropp_hpz == 1 || (c->zeropp_hpz > 1 && c->world > 0 && c->world % c->zeropp_hpz))
    return FB_ERR(FB_EUSAGE, "--zeropp-hpz: %d is not allowed with --world %d (want 0 = off, or "
                  "a divisor of the world from 2)", c->zeropp_hpz, c->world);
  if (c->overlap_grad_reduce && !s->tunes_grad_overlap) {
    char with[256] = "";
    names_with(offsetof(fb_strategy, tunes_grad_overlap), with, sizeof with);
    return FB_ERR(FB_EUSAGE, "--overlap-grad-reduce: not allowed with --strategy %s (its "
                  "reduction schedule is fixed; it is taken by: %s)", c->strategy, with);
  }
  if (!strcmp(c->param_sync, "broadcast") && !s->param_sync) {
    char with[256] = "";
    names_with(offsetof(fb_strategy, param_sync), with, sizeof with);
    return FB_ERR(FB_EUSAGE, "--param-sync: 'broadcast' is not allowed with --strategy %s (want "
                  "all-gather, or one of: %s)", c->strategy, with);
  }
  if (!strcmp(c->grad_reduce, "all-reduce") && !s->grad_all_reduce) {
    char with[256] = "";
    names_with(offsetof(fb_strategy, grad_all_reduce), with, sizeof with);
    return FB_ERR(FB_EUSAGE, "--grad-reduce: 'all-reduce' is not allowed with --strategy %s "
                  "(want reduce-scatter, or one of: %s)", c->strategy, with);
  }
  if (c->mesh[0] && !s->mesh) {
    char with[256] = "";
    names_with(offsetof(fb_strategy, mesh), with, sizeof with);
    return FB_ERR(FB_EUSAGE, "--mesh: '%s' is not allowed with --strategy %s (want no --mesh, or "
                  "one of: %s%s)", c->mesh, c->strategy, with,
                  !strcmp(c->strategy, "fsdp") ? "; fsdp on a mesh is --strategy hsdp" : "");
  }
  if (s->one_rank && c->world > 1)
    return FB_ERR(FB_EUSAGE,
                  "--world: %d is not allowed with --strategy %s (want 1, or 0 = auto)",
                  c->world, c->strategy);
  return FB_OK;
}
