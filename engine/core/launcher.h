/* Where a launcher placed this process: its rank, the world, its rank and the rank count on
 * this node, read from the environment of torchrun, Open MPI's mpirun, MPICH / Hydra's
 * mpiexec or Slurm's srun (launcher.c holds the table and the precedence). Also the threads
 * rule: how many CPU threads each rank gets by default. It starts, joins and prints nothing;
 * it lives in core/ so the device layer (the GPU a local rank picks) can read it too. */
#ifndef FB_LAUNCHER_H
#define FB_LAUNCHER_H
#include <stdbool.h>

#include "status.h"

typedef struct fb_launch {
  const char *name;   /* "torchrun", "openmpi", "mpich", "slurm", or "none" */
  const char *vars;   /* the variables read, for messages ("" without a launcher) */
  int rank, world;    /* 0 of 1 without a launcher */
  int local_rank;     /* on this node (unset by the launcher: rank mod local_size) */
  int local_size;     /* ranks on this node (unset: the whole world, the cautious guess) */
  bool launched;      /* a launcher started this process as one of world > 1 */
  bool mpi_joins;     /* MPI_Init in this process joins the launcher's world (not torchrun) */
} fb_launch;

/* Reads the first launcher whose world variable is set (precedence in launcher.c). FB_EUSAGE,
 * one line naming the variable, its value and the allowed range, when a value is not an
 * integer in range or the rank is missing. Without any launcher: "none", 0 of 1, launched
 * false. */
fb_status fb_launch_detect(fb_launch *out);

/* The threads rule (CPU threads per rank; `requested` > 0 wins):
 *   one process holding `ranks` ranks as threads (local communicator): cores / ranks;
 *   one rank per process under a launcher (ranks = local_size on this node):
 *   min(cores, online / ranks), so a launcher's binding (a mask narrower than the machine)
 *   is respected;
 * where cores = CPUs in this process's affinity mask and online = CPUs of the machine; at
 * least 1. *oversubscribed says the ranks on this node exceed those CPUs. */
int fb_threads_per_rank(int requested, int ranks, bool one_per_process, bool *oversubscribed);
/* CPUs this process may run on (its affinity mask; the online count when unknown). */
int fb_cores_available(void);
/* The CPUs of this process's affinity mask (in CPU order) that local rank `index` of `nlocal`
 * ranks of `threads` threads each gets: the index-th block of `threads`. False (and *cpus left
 * empty) when the mask cannot give every rank whole CPUs of its own (nlocal * threads > the
 * mask's CPUs) or nlocal < 2. `cpus` is a cpu_set_t (sched.h). */
bool fb_rank_cpus(int index, int nlocal, int threads, void *cpus);

#endif
