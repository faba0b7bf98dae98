/* The unit-gather state machine every sharded strategy runs its parameters through (fsdp and
 * hsdp, fsdp2, zero3), after FSDP2's single FSDPParamGroup lifecycle:
 *
 *   SHARDED --issue--> GATHERING --acquire--> GATHERED --release--> SHARDED
 *
 * issue: the strategy's gather is put on the comm stream and an event recorded after it;
 * prefetch issues a unit ahead of its use while fewer than --max-inflight gathers are in
 * flight (issued and not yet acquired); acquire issues the unit if it is still sharded, makes
 * the compute stream wait for its gather and hands its full parameters to the kernels
 * (r->view[u].params); release drops them. What differs between the strategies is a table of
 * four hooks: how a gather is issued (flat all-gather of slices, copy-in + all-gather of
 * per-parameter shards, owner broadcasts), what happens once it landed (fsdp2's copy-out),
 * where the full parameters are, and how they are dropped. The gradient side (reductions,
 * folds) and the optimizer stay the strategies' own. */
#ifndef FB_STRATEGY_UNIT_GATHER_H
#define FB_STRATEGY_UNIT_GATHER_H
#include "strategy.h"

typedef enum fb_gather_state {
  FB_UNIT_SHARDED = 0, /* only this rank's shard is held */
  FB_UNIT_GATHERING,   /* the gather is issued on the comm stream, not yet waited for */
  FB_UNIT_GATHERED     /* the full parameters are usable on the compute stream */
} fb_gather_state;

typedef struct fb_gather_ops {
  /* Issues unit u's gather on r->commst and records `done` on that stream right after its
   * collectives (what acquire makes the compute stream wait for). */
  fb_status (*issue)(fb_rank *r, int u, fb_event *done);
  /* After the compute stream waited for the gather (NULL: nothing to do); `forward` tells the
   * pass (fsdp2 keeps its all-gather output through forward). */
  fb_status (*landed)(fb_rank *r, int u, bool forward);
  /* The unit's full parameters (compute dtype, flat unit layout) while it is gathered. */
  void *(*params)(fb_rank *r, int u);
  /* Drops the gathered parameters once the compute stream is done with them. */
  fb_status (*reshard)(fb_rank *r, int u);
} fb_gather_ops;

typedef struct fb_gather {
  const fb_gather_ops *ops;
  fb_gather_state *state; /* [nunits] */
  fb_event **done;        /* [nunits] recorded on the comm stream after each gather */
  int nunits;
  int inflight;           /* gathers issued and not yet acquired */
} fb_gather;

fb_status fb_gather_init(fb_gather *g, fb_rank *r, const fb_gather_ops *ops);
void fb_gather_fini(fb_gather *g, fb_rank *r);
/* Issues unit u's gather; a no-op unless it is sharded. */
fb_status fb_gather_issue(fb_gather *g, fb_rank *r, int u);
/* The same ahead of use: a no-op for u < 0 or with --max-inflight gathers in flight. */
fb_status fb_gather_prefetch(fb_gather *g, fb_rank *r, int u);
/* Makes unit u's full parameters usable by the compute stream (r->view[u].params). */
fb_status fb_gather_acquire(fb_gather *g, fb_rank *r, int u, bool forward);
/* Drops a gathered unit's full parameters (r->view[u].params = NULL). */
fb_status fb_gather_release(fb_gather *g, fb_rank *r, int u);
/* Acquire for a unit's forward, then prefetch the next forward unit when
 * --prefetch-forward (after the last block: the root, which the head runs next). */
fb_status fb_gather_pre_forward(fb_gather *g, fb_rank *r, int u);
/* Acquire for a unit's backward, then prefetch the next backward unit when
 * --prefetch-backward. */
fb_status fb_gather_pre_backward(fb_gather *g, fb_rank *r, int u);

#endif
