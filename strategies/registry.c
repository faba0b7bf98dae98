/* The strategy table: every strategy the executor can run, by name. Adding a strategy is its
 * file in strategies/ plus one line here; everything that enumerates strategies reads this. */
#include "strategy.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const fb_strategy fb_strategy_single, fb_strategy_ddp, fb_strategy_zero3,
    fb_strategy_fsdp, fb_strategy_yafsdp;

static const fb_strategy *const table[] = {
    &fb_strategy_single, &fb_strategy_ddp, &fb_strategy_zero3, &fb_strategy_fsdp,
    &fb_strategy_yafsdp,
};
enum { NSTRATEGIES = sizeof table / sizeof *table };

static char names_buf[512];

/* "single, ddp, ..." from the table, once. */
static void build_names(void) {
  size_t o = 0;
  for (int i = 0; i < NSTRATEGIES && o < sizeof names_buf; i++)
    o += (size_t)snprintf(names_buf + o, sizeof names_buf - o, "%s%s", i ? ", " : "",
                          table[i]->name);
}

const fb_strategy *fb_strategy_lookup(const char *name) {
  for (int i = 0; i < NSTRATEGIES; i++)
    if (!strcmp(table[i]->name, name)) return table[i];
  return NULL;
}

const char *fb_strategy_names(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, build_names);
  return names_buf;
}
int fb_strategy_count(void) { return NSTRATEGIES; }
const fb_strategy *fb_strategy_at(int i) { return (i >= 0 && i < NSTRATEGIES) ? table[i] : NULL; }
