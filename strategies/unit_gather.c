/* The unit-gather state machine (unit_gather.h): the states, the in-flight count and the
 * order of the calls around the strategies' hooks. It issues no collective itself. */
#include "unit_gather.h"

#include <assert.h>
#include <stdlib.h>

fb_status fb_gather_init(fb_gather *g, fb_rank *r, const fb_gather_ops *ops) {
  const int n = r->model->nunits;
  *g = (fb_gather){.ops = ops, .nunits = n};
  g->state = calloc((size_t)n, sizeof *g->state);
  g->done = calloc((size_t)n, sizeof *g->done);
  if (!g->state || !g->done) return FB_ERR(FB_ENOMEM, "out of host memory (unit gathers)");
  for (int u = 0; u < n; u++) FB_TRY(r->dev->ops->event_create(r->dev, &g->done[u]));
  return FB_OK;
}

void fb_gather_fini(fb_gather *g, fb_rank *r) {
  for (int u = 0; g->done && u < g->nunits; u++)
    if (g->done[u]) r->dev->ops->event_destroy(r->dev, g->done[u]);
  free(g->done);
  free(g->state);
  *g = (fb_gather){0};
}

fb_status fb_gather_issue(fb_gather *g, fb_rank *r, int u) {
  if (g->state[u] != FB_UNIT_SHARDED) return FB_OK;
  FB_TRY(g->ops->issue(r, u, g->done[u]));
  g->state[u] = FB_UNIT_GATHERING;
  g->inflight++;
  return FB_OK;
}

fb_status fb_gather_prefetch(fb_gather *g, fb_rank *r, int u) {
  if (u < 0 || g->state[u] != FB_UNIT_SHARDED || g->inflight >= r->cfg->max_inflight)
    return FB_OK;
  return fb_gather_issue(g, r, u);
}

fb_status fb_gather_acquire(fb_gather *g, fb_rank *r, int u, bool forward) {
  FB_TRY(fb_gather_issue(g, r, u));
  if (g->state[u] == FB_UNIT_GATHERING) {
    FB_TRY(fb_stream_wait(r->dev, r->compute, g->done[u]));
    g->inflight--;
    if (g->ops->landed) FB_TRY(g->ops->landed(r, u, forward));
    g->state[u] = FB_UNIT_GATHERED;
  }
  r->view[u].params = g->ops->params(r, u);
  return FB_OK;
}

fb_status fb_gather_release(fb_gather *g, fb_rank *r, int u) {
  assert(g->state[u] == FB_UNIT_GATHERED);
  FB_TRY(g->ops->reshard(r, u));
  g->state[u] = FB_UNIT_SHARDED;
  r->view[u].params = NULL;
  return FB_OK;
}

fb_status fb_gather_pre_forward(fb_gather *g, fb_rank *r, int u) {
  FB_TRY(fb_gather_acquire(g, r, u, true));
  if (!r->cfg->prefetch_forward) return FB_OK;
  const int next = fb_next_fwd_unit(r->model, u);
  return fb_gather_prefetch(g, r, next < 0 ? 0 : next);
}

fb_status fb_gather_pre_backward(fb_gather *g, fb_rank *r, int u) {
  FB_TRY(fb_gather_acquire(g, r, u, false));
  if (!r->cfg->prefetch_backward) return FB_OK;
  return fb_gather_prefetch(g, r, fb_next_bwd_unit(r->model, u));
}
