/* The communicator interface: collectives enqueued on a stream, NCCL-style.
 * Backends: local (ranks are threads of one process, shared memory, sums in rank order
 * 0..W-1 so results are deterministic), mpi (ranks are processes), nccl (GPUs), sim (no data;
 * duration from the collective cost model).
 *
 * Semantics (identical on every backend):
 *  - all_gather: recv[r*count .. (r+1)*count) = send of rank r. `count` is per rank.
 *  - reduce_scatter: recv (count elements) = sum over ranks of send[rank*count ..). `count` is
 *    per rank; send holds world*count elements.
 *  - all_reduce: recv[i] = sum over ranks of send[i]; any count (no divisibility needed).
 *  - broadcast: buf of every rank = buf of root. reduce: recv of root = sum of send.
 *  - all_to_all: recv[j*count .. (j+1)*count) = send[rank*count ..) of rank j: block j of
 *    every rank's send goes to rank j. `count` is per peer; send and recv hold world*count
 *    elements each and must not alias. A pure move (zeropp's quantised gradients, FB_I8).
 *  - In-place use is allowed (send == recv for all_reduce/reduce; for all_gather, send may be
 *    recv + rank*count; for reduce_scatter, recv may be send + rank*count).
 *  - count 0 and world 1 work. Sums are in rank order on local (bitwise reproducible).
 *  - Every rank must issue the same collectives in the same order (as with NCCL).
 *  - Groups: fb_comm_split makes sub-communicators (MPI_Comm_split / ncclCommSplit): the
 *    ranks of one color form a group ordered by key, then parent rank. Collectives on a
 *    sub-communicator follow the same rules among its members (local: sums in sub-rank order).
 *  - A collective waiting longer than the communicator's timeout fails the stream with
 *    FB_ETIMEOUT naming the collective and the ranks that did not reach it (local knows them;
 *    mpi asks its peers first, comm_mpi.c); a rank stopped because another failed gets FB_ECOMM.
 * Supported dtypes: FB_F32, FB_F64, FB_U64 (sums of u64 are exact), FB_BF16 (nccl, sim);
 * FB_I8 for all_gather, broadcast and all_to_all only (moved, never summed).
 * Calls return once the work is enqueued; completion is observed through events/syncs on the
 * stream. This header does not record timings: the fb_comm_* wrappers do. */
#ifndef FB_COMM_H
#define FB_COMM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../device/device.h"

typedef struct fb_comm fb_comm;

/* One collective as it travels from the recording wrappers (fb_all_gather ...) to a backend,
 * built once by the wrapper and never reshaped on the way: the staging path (comm_staged.c)
 * swaps in host buffers, the host communicators queue a copy of it (host_queue.h). `send` and
 * `recv` as the fb_* wrapper was given them (broadcast: both are its buffer); `root` matters
 * for broadcast and reduce only. */
typedef struct fb_coll_call {
  fb_coll op;
  const void *send;
  void *recv;
  size_t count;
  fb_dtype t;
  int root;
  int mesh; /* 0, or SHARD: a mesh reduction over the whole world (fb_reduce_scatter_mesh,
               fb_reduce_mesh; only to a backend with exact_mesh): the ranks form REPLICA x
               SHARD, `count` and `root` are the shard group's */
} fb_coll_call;

typedef struct fb_comm_ops {
  const char *name; /* "local", "mpi", "nccl", "sim" */
  /* Enqueues one collective on stream s. The arguments are checked (buffers, dtype, root) by
   * the wrapper in comm.c before this is called; a backend checks only what is its own. */
  fb_status (*issue)(fb_comm *c, fb_stream *s, const fb_coll_call *call);
  /* Collectives issued between group_start and group_end form one launch (ncclGroupStart/
   * End): zero3's per-tensor broadcasts and reduces. NULL = each call launches on its own. */
  fb_status (*group_start)(fb_comm *c);
  fb_status (*group_end)(fb_comm *c);
  /* Collective over c (see fb_comm_split): this rank's group of `color`, ranked by `key`.
   * `size` is the group's size when the caller knows it (fb_comm_split_strided), else 0; a
   * backend that cannot compare colors across ranks (sim) needs it. */
  fb_status (*split)(fb_comm *c, int color, int key, int size, fb_comm **out);
  void (*destroy)(fb_comm *c);
  /* Its host tasks dereference the buffers (local, mpi): on a device whose memory the host
   * may not touch (caps.host_access false) every call is staged through pinned host buffers
   * on the stream (comm_staged.c). */
  bool host_memory;
  /* It sums a mesh's two reduction stages in one call over the whole world, in world rank
   * order (call.mesh: local), so a mesh run stays bitwise equal to a flat one; the replica
   * stage then moves nothing (fb_all_reduce_replicas). false: the stages run as they are. */
  bool exact_mesh;
} fb_comm_ops;

struct fb_comm {
  const fb_comm_ops *ops;
  void *impl;
  int rank, world;
  int stride;        /* placement, for the cost model: launch-world ranks between consecutive
                        members (a mesh's replica group: SHARD); 0 or 1 = consecutive ranks */
  int first;         /* placement: launch-world rank of member 0 (fb_comm_place, splits) */
  int node_ranks;    /* placement: launch-world ranks per node; 0 = not placed (one node) */
  int nodes;         /* the nodes the members sit on (fb_comm_place), what the ledger splits
                        intra- from inter-node bytes by (fb_coll_wire_split); 0 = one */
  fb_device *dev;    /* this rank's device (streams belong to it) */
  double timeout_s;  /* collective wait limit */
  bool staged;       /* host_memory comm on a device the host may not touch: stage */
  struct fb_comm_stage *stage; /* staging buffers (comm_staged.c), NULL until needed */
};

/* Registry by name: "local", "mpi", "nccl", "sim"; NULL when unknown or not built. nccl lives
 * in the CUDA module (engine/backends/cuda_module.h): looking it up loads the module (NULL when
 * it cannot be loaded), and the runner creates it through the module's table. */
const fb_comm_ops *fb_comm_lookup(const char *name);

/* local: one group shared by the W rank threads of this process, then one fb_comm per rank. */
typedef struct fb_local_group fb_local_group;
fb_status fb_local_group_create(int world, double timeout_s, fb_local_group **out);
void fb_local_group_destroy(fb_local_group *g);
fb_status fb_comm_local_create(fb_local_group *g, int rank, fb_device *dev, fb_comm **out);
/* Fails every pending and future collective of the group (FB_ECOMM): a rank that hit an error
 * calls it so the others stop instead of waiting for the timeout. */
void fb_local_group_abort(fb_local_group *g);

/* mpi: rank and world come from MPI_COMM_WORLD (fb_mpi_init must have run). */
fb_status fb_mpi_init(int *argc, char ***argv, int *rank, int *world);
void fb_mpi_finalize(void);
/* The way out of a failure after MPI_Init (fb_mpi_init): with several processes it ends every
 * one of them with exit status `code` through MPI_Abort and does not return (MPI_Finalize
 * would wait for peers stuck in a collective); a process alone finalizes and returns code. */
int fb_mpi_fail(int code);
fb_status fb_comm_mpi_create(fb_device *dev, double timeout_s, fb_comm **out);

/* sim: no data moves; durations come from dev->hw (see engine/sim/). */
fb_status fb_comm_sim_create(fb_device *dev, int rank, int world, fb_comm **out);

/* nccl: in the CUDA module (engine/backends/cuda/comm_nccl.h); callers reach it through
 * fb_cuda_module_load()->nccl_create. */

/* Communicator groups. Collective over c: every rank of c calls it, with no collective of c
 * in flight (sync the streams that use c first), like ncclCommSplit. The ranks passing the same
 * color (>= 0) form one sub-communicator, ranked by key then by rank in c; *out uses c's device
 * and streams and is destroyed with fb_comm_destroy (before c). local, mpi and nccl support
 * any colors; sim (whose ranks are simulated independently) only fb_comm_split_strided. */
fb_status fb_comm_split(fb_comm *c, int color, int key, fb_comm **out);
/* The regular split of a device mesh axis: this rank's group is the `size` ranks `stride`
 * apart that contain it, {base + i*stride : i < size} with base = rank % stride +
 * rank / (size*stride) * size*stride, ranked by i (c->world must be a multiple of
 * size*stride). Shard groups of a REPLICA x SHARD mesh: (SHARD, 1); replica groups:
 * (REPLICA, SHARD). The sub-communicator's stride (placement) is c->stride * stride. */
fb_status fb_comm_split_strided(fb_comm *c, int size, int stride, fb_comm **out);

void fb_comm_destroy(fb_comm *c);

/* Placement of a communicator's members on nodes, for the ledger's intra-/inter-node split:
 * its members are the launch-world ranks first + i * stride (i < world), and a node holds
 * `node_ranks` consecutive launch-world ranks (<= 0: all of them: one node). Sets c->first,
 * c->node_ranks and c->nodes. The runner places the run's communicator (first 0; node_ranks
 * the profile's devices_per_node, else the ranks the launch put on one machine); splits
 * inherit it: a strided split knows its members, a split by color (whose members are not known
 * here) keeps its parent's node count. */
void fb_comm_place(fb_comm *c, int first, int node_ranks);

/* A REPLICA x SHARD device mesh over a communicator (comm_mesh.c): rank = replica * SHARD +
 * shard, so a shard group is SHARD consecutive ranks (inside a node when SHARD divides it) and
 * a replica group the REPLICA ranks SHARD apart (across nodes). Gradients are reduced in two
 * stages: inside the shard group (fb_reduce_scatter_mesh, fb_reduce_mesh), then the result
 * all-reduced across the replica group (fb_all_reduce_replicas): on nccl, mpi and sim two
 * collectives as written, each recorded, costed and counted with its own group (intra-node,
 * then inter-node). A backend with exact_mesh (local) sums both stages at the first, over the
 * whole world in world rank order - ((x0 + x1) + x2) + x3 on 2x2, what a flat reduction and
 * `single` give, where the two stages would give (x0 + x1) + (x2 + x3) - and its replica stage
 * is recorded (bytes, a zero-length span) but moves nothing. */
typedef struct fb_comm_mesh {
  fb_comm *world;   /* every rank (not owned) */
  fb_comm *shard;   /* this rank's shard group; == world when REPLICA = 1 */
  fb_comm *replica; /* this rank's replica group; NULL when REPLICA = 1 */
  int replicas, shards;
} fb_comm_mesh;
/* Collective over `world` (no collective of it in flight): the groups of a replicas x shards
 * mesh (replicas * shards = world->world, else FB_EINTERNAL). Close with fb_comm_mesh_close. */
fb_status fb_comm_mesh_open(fb_comm *world, int replicas, int shards, fb_comm_mesh *m);
void fb_comm_mesh_close(fb_comm_mesh *m);
/* Stage 1. reduce_scatter: recv (count) = sum over the shard group of send[shard_rank * count
 * ..) (exact_mesh: over the world). reduce: recv of the shard group's `root` (a shard rank)
 * = the sum of send over the group (exact_mesh: over the world; every replica's root gets
 * it). Without a replica group: fb_reduce_scatter / fb_reduce on the shard group. */
fb_status fb_reduce_scatter_mesh(const fb_comm_mesh *m, fb_stream *s, int unit, const void *send,
                                 void *recv, size_t count, fb_dtype t);
fb_status fb_reduce_mesh(const fb_comm_mesh *m, fb_stream *s, int unit, const void *send,
                         void *recv, size_t count, fb_dtype t, int root);
/* Stage 2: buf (count, in place) all-reduced over the replica group (nothing without one;
 * exact_mesh: recorded, nothing moves). */
fb_status fb_all_reduce_replicas(const fb_comm_mesh *m, fb_stream *s, int unit, void *buf,
                                 size_t count, fb_dtype t);

/* Recording wrappers: stamp marks on the stream around the collective, account its cost on
 * sim, add the bytes to the rank's ledger. `unit` is the unit it serves (-1 for none). */
fb_status fb_all_gather(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t);
fb_status fb_reduce_scatter(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                            size_t count, fb_dtype t);
fb_status fb_all_to_all(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t);
fb_status fb_all_reduce(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                        size_t count, fb_dtype t);
fb_status fb_broadcast(fb_comm *c, fb_stream *s, int unit, void *buf, size_t count, fb_dtype t,
                       int root);
fb_status fb_reduce(fb_comm *c, fb_stream *s, int unit, const void *send, void *recv,
                    size_t count, fb_dtype t, int root);
fb_status fb_barrier(fb_comm *c, fb_stream *s);
/* A collective outside the algorithm (the loss metric, the final parameter readback): staged
 * like any other where the device needs it, but not recorded, costed or counted. */
fb_status fb_comm_unrecorded(fb_comm *c, fb_stream *s, fb_coll op, const void *send, void *recv,
                             size_t count, fb_dtype t, int root);
/* Whether communicator `name` runs one process per rank started by a launcher (mpi, nccl). */
bool fb_comm_launched(const char *name);
/* Whether communicator `name` needs a device of its own for every rank (nccl: NCCL cannot put
 * two ranks on one GPU). */
bool fb_comm_own_device(const char *name);
/* Brackets a batch of collectives that launch together (no-ops where unsupported). */
fb_status fb_comm_group_start(fb_comm *c);
fb_status fb_comm_group_end(fb_comm *c);

#endif
