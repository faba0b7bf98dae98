/* The strategy table: every strategy the executor can run, by name. */
#include "strategy.h"

#include <string.h>

extern const fb_strategy fb_strategy_single, fb_strategy_ddp, fb_strategy_zero3,
    fb_strategy_fsdp, fb_strategy_yafsdp;

static const fb_strategy *const table[] = {
    &fb_strategy_single, &fb_strategy_ddp, &fb_strategy_zero3, &fb_strategy_fsdp,
    &fb_strategy_yafsdp,
};
enum { NSTRATEGIES = sizeof table / sizeof *table };

const fb_strategy *fb_strategy_lookup(const char *name) {
  for (int i = 0; i < NSTRATEGIES; i++)
    if (!strcmp(table[i]->name, name)) return table[i];
  return NULL;
}

const char *fb_strategy_names(void) { return "single, ddp, zero3, fsdp, yafsdp"; }
int fb_strategy_count(void) { return NSTRATEGIES; }
const fb_strategy *fb_strategy_at(int i) { return (i >= 0 && i < NSTRATEGIES) ? table[i] : NULL; }
