/* The mesh of a sharded strategy (mesh.h): --mesh or the default, and its groups. */
#include "mesh.h"

#include "../engine/sim/hardware.h"

fb_status fb_mesh_open(fb_rank *r, bool node_default, fb_comm_mesh *m) {
  int R, S;
  FB_TRY(fb_config_mesh(r->cfg, r->world, &R, &S));
  if (R <= 0) {
    const int node = node_default && r->dev->simulated && r->dev->hw
                         ? r->dev->hw->devices_per_node : 0;
    S = node > 1 && r->world > node && r->world % node == 0 ? node : r->world;
    R = r->world / S;
  }
  /* a split is collective over r->comm: nothing of it may be in flight */
  FB_TRY(fb_stream_sync(r->dev, r->commst));
  return fb_comm_mesh_open(r->comm, R, S, m);
}

void fb_mesh_close(fb_comm_mesh *m) { fb_comm_mesh_close(m); }
