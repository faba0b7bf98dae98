/* The sim communicator: no data moves. Each collective's arguments are checked by the fb_*
 * wrappers in comm.c exactly as for a real backend (stream, buffers, dtype, root), and its
 * duration is accounted there through the sim device's account() and the cost model
 * (engine/sim/cost_model.c). Every rank is independent: nothing is shared between ranks, so a
 * run can simulate any subset of them. A split (fb_comm_split_strided) is therefore local too:
 * the sub-communicator of the given size on the same device, this rank's place in it, and its
 * stride (set by comm.c) telling the cost model whether the group spans nodes. */
#include <stdlib.h>

#include "comm.h"

/* Nothing moves and nothing waits: the wrapper (comm.c) checked the call and accounts its
 * duration on the stream. */
static fb_status sim_issue(fb_comm *c, fb_stream *s, const fb_coll_call *call) {
  (void)c, (void)s, (void)call;
  return FB_OK;
}

static void sim_destroy(fb_comm *c) { free(c); }

static fb_status sim_split(fb_comm *c, int color, int key, int size, fb_comm **out) {
  (void)color;
  if (size < 1)
    return FB_ERR(FB_EUNSUPPORTED, "sim communicator on rank %d: a split needs the group's size "
                  "(fb_comm_split_strided): simulated ranks cannot compare colors", c->rank);
  return fb_comm_sim_create(c->dev, key, size, out);
}

const fb_comm_ops fb_sim_comm_ops = {
    .name = "sim",
    .issue = sim_issue,
    .split = sim_split,
    .destroy = sim_destroy,
};

fb_status fb_comm_sim_create(fb_device *dev, int rank, int world, fb_comm **out) {
  if (world < 1 || rank < 0 || rank >= world)
    return FB_ERR(FB_EUSAGE, "sim communicator: rank %d of world %d is invalid (0 <= rank < "
                  "world, world >= 1)", rank, world);
  if (!dev || !dev->simulated)
    return FB_ERR(FB_EUSAGE, "the sim communicator needs the sim device (--backend sim)");
  fb_comm *c = calloc(1, sizeof *c);
  if (!c) return FB_ERR(FB_ENOMEM, "sim communicator: out of host memory");
  c->ops = &fb_sim_comm_ops;
  c->rank = rank;
  c->world = world;
  c->dev = dev;
  c->timeout_s = 0;
  *out = c;
  return FB_OK;
}
