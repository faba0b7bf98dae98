/* Staged collectives: how a communicator whose collectives run on the host (local, mpi) moves
 * the buffers of a device the host may not touch (a GPU, the opaque device). Each call becomes
 * three steps in the order of its stream: an asynchronous device -> pinned host copy of the
 * send buffer, the backend's own collective on the host buffers (a host task, as before), and
 * an asynchronous pinned host -> device copy into the receive buffer. Nothing waits on the
 * host. The pinned buffers are kept per stream and reused: the next call on the same stream
 * runs after this one's copy-back in stream order; growing them first waits for the stream,
 * and grows to a power of two, so calls of alternating sizes (zeropp's int8 gathers and int4
 * all-to-alls) reuse what the device's host_alloc keeps instead of asking for new blocks.
 * It does not record or check arguments (comm.c does), and calls nothing of comm.c: the
 * backend's own issue runs the call. */
#include <stdlib.h>

#include "comm_staged.h"

#define NSTAGE 4 /* streams one communicator stages for */

typedef struct stage_buf {
  fb_stream *s;
  void *send, *recv;
  size_t send_cap, recv_cap;
} stage_buf;

struct fb_comm_stage {
  stage_buf b[NSTAGE];
};

/* The least power of two >= n (n > 0). */
static size_t pow2_at_least(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

/* The staging buffers of stream s, grown to the sizes asked (to powers of two). */
static fb_status stage_of(fb_comm *c, fb_stream *s, size_t sb, size_t rb, stage_buf **out) {
  fb_device *d = c->dev;
  if (!c->stage && !(c->stage = calloc(1, sizeof *c->stage)))
    return FB_ERR(FB_ENOMEM, "rank %d: out of host memory (staging)", c->rank);
  stage_buf *b = NULL;
  for (int i = 0; i < NSTAGE && !b; i++)
    if (c->stage->b[i].s == s || !c->stage->b[i].s) b = &c->stage->b[i];
  if (!b)
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: staged collectives on more than %d streams",
                  c->rank, NSTAGE);
  b->s = s;
  if (sb > b->send_cap || rb > b->recv_cap) {
    FB_TRY(d->ops->stream_sync(d, s)); /* the old buffers may still be in flight */
    if (sb > b->send_cap) {
      d->ops->host_free(d, b->send);
      b->send = NULL, b->send_cap = 0;
      const size_t cap = pow2_at_least(sb);
      FB_TRY(d->ops->host_alloc(d, cap, &b->send));
      b->send_cap = cap;
    }
    if (rb > b->recv_cap) {
      d->ops->host_free(d, b->recv);
      b->recv = NULL, b->recv_cap = 0;
      const size_t cap = pow2_at_least(rb);
      FB_TRY(d->ops->host_alloc(d, cap, &b->recv));
      b->recv_cap = cap;
    }
  }
  *out = b;
  return FB_OK;
}

/* Bytes of the send and receive buffers of a call (receive 0 where this rank gets none). */
static void sizes(const fb_comm *c, const fb_coll_call *a, size_t *sb, size_t *rb) {
  const size_t e = a->count * fb_dtype_size(a->t);
  const int group = a->mesh > 0 ? a->mesh : c->world;  /* a mesh's: its shard group's */
  const int me = a->mesh > 0 ? c->rank % a->mesh : c->rank;
  switch (a->op) {
  case FB_COLL_ALL_GATHER: *sb = e, *rb = e * (size_t)c->world; break;
  case FB_COLL_REDUCE_SCATTER: *sb = e * (size_t)group, *rb = e; break;
  case FB_COLL_ALL_TO_ALL: *sb = *rb = e * (size_t)c->world; break;
  case FB_COLL_ALL_REDUCE: *sb = e, *rb = e; break;
  case FB_COLL_BROADCAST: *sb = e, *rb = 0; break; /* in place in the send staging buffer */
  case FB_COLL_REDUCE: *sb = e, *rb = me == a->root && a->recv ? e : 0; break;
  default: *sb = *rb = 0; break;
  }
}

fb_status fb_comm_issue_staged(fb_comm *c, fb_stream *s, const fb_coll_call *a) {
  size_t sb, rb;
  sizes(c, a, &sb, &rb);
  if (a->op == FB_COLL_BARRIER || (sb == 0 && rb == 0)) return c->ops->issue(c, s, a);
  fb_device *d = c->dev;
  stage_buf *b = NULL;
  FB_TRY(stage_of(c, s, sb, rb, &b));
  FB_TRY(d->ops->copy_async(d, s, b->send, a->send, sb, true));
  fb_coll_call h = *a;
  h.send = b->send;
  h.recv = a->op == FB_COLL_BROADCAST ? b->send : rb ? b->recv : NULL;
  FB_TRY(c->ops->issue(c, s, &h));
  if (a->op == FB_COLL_BROADCAST) return d->ops->copy_async(d, s, a->recv, b->send, sb, false);
  return rb ? d->ops->copy_async(d, s, a->recv, b->recv, rb, false) : FB_OK;
}

void fb_comm_stage_free(fb_comm *c) {
  if (!c->stage) return;
  fb_device *d = c->dev;
  for (int i = 0; i < NSTAGE; i++) {
    stage_buf *b = &c->stage->b[i];
    if (!b->s) continue;
    (void)d->ops->stream_sync(d, b->s); /* a failed stream still drains its queue */
    d->ops->host_free(d, b->send);
    d->ops->host_free(d, b->recv);
  }
  free(c->stage);
  c->stage = NULL;
}
