/* Launchers as users run them (see launcher.h): one table row per launcher with the variables
 * it sets, read strictly (an integer in range, else one line naming the variable). It does not
 * start processes, initialise MPI or decide the communicator.
 *
 * Precedence, innermost launcher first (the one that started this very process wins):
 *   1. torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (it spawns its workers
 *                 itself, often under srun or mpirun, whose variables then describe the
 *                 torchrun agent, not this worker)
 *   2. Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
 *   3. MPICH      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (Hydra's mpiexec)
 *   4. Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE, else
 *                 SLURM_TASKS_PER_NODE ("2(x3),1", this node's entry by SLURM_NODEID) (an
 *                 allocation, outermost: mpirun inside it sets its own variables)
 * A launcher counts when its world variable is set; its rank variable must then be set too.
 * The local rank and size are optional: unset, the whole world is taken to be on this node
 * (the cautious guess for threads) and the local rank is rank mod local size. */
#define _GNU_SOURCE
#include "launcher.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct launcher_def {
  const char *name;
  const char *rank, *world, *local_rank, *local_size;
  const char *tasks_per_node; /* Slurm's compressed per-node counts, when local_size is unset */
  const char *vars;           /* for messages */
  bool mpi_joins;
} launcher_def;

static const launcher_def launchers[] = {
    {.name = "torchrun", .rank = "RANK", .world = "WORLD_SIZE", .local_rank = "LOCAL_RANK",
     .local_size = "LOCAL_WORLD_SIZE", .vars = "RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE",
     .mpi_joins = false},
    {.name = "openmpi", .rank = "OMPI_COMM_WORLD_RANK", .world = "OMPI_COMM_WORLD_SIZE",
     .local_rank = "OMPI_COMM_WORLD_LOCAL_RANK", .local_size = "OMPI_COMM_WORLD_LOCAL_SIZE",
     .vars = "OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE", .mpi_joins = true},
    {.name = "mpich", .rank = "PMI_RANK", .world = "PMI_SIZE", .local_rank = "MPI_LOCALRANKID",
     .local_size = "MPI_LOCALNRANKS", .vars = "PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS",
     .mpi_joins = true},
    {.name = "slurm", .rank = "SLURM_PROCID", .world = "SLURM_NTASKS", .local_rank = "SLURM_LOCALID",
     .local_size = "SLURM_NTASKS_PER_NODE", .tasks_per_node = "SLURM_TASKS_PER_NODE",
     .vars = "SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE", .mpi_joins = true},
};

#define MAX_WORLD (1 << 20)

/* The variable as an integer in [lo, hi]; *out = -1 when unset or empty. */
static fb_status env_int(const launcher_def *l, const char *name, long lo, long hi, int *out) {
  *out = -1;
  const char *v = getenv(name);
  if (!v || !*v) return FB_OK;
  char *end = NULL;
  errno = 0;
  long x = strtol(v, &end, 10);
  const bool digits = isdigit((unsigned char)v[0]) || (v[0] == '-' && isdigit((unsigned char)v[1]));
  if (!digits || errno || *end || x < lo || x > hi)
    return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want an integer in [%ld, %ld]; %s sets it)",
                  name, v, lo, hi, l->name);
  *out = (int)x;
  return FB_OK;
}

/* One count of Slurm's "N(xR),M" list: N, repeated R times. */
static bool tasks_entry(const char **p, long *count, long *repeat) {
  char *end;
  errno = 0;
  if (!isdigit((unsigned char)**p)) return false;
  *count = strtol(*p, &end, 10);
  if (errno || *count < 1) return false;
  *repeat = 1;
  if (!strncmp(end, "(x", 2)) {
    const char *r = end + 2;
    if (!isdigit((unsigned char)*r)) return false;
    *repeat = strtol(r, &end, 10);
    if (errno || *repeat < 1 || *end != ')') return false;
    end++;
  }
  *p = end;
  return true;
}

/* SLURM_TASKS_PER_NODE: this node's count (node from SLURM_NODEID; unset: the largest). */
static fb_status slurm_tasks_here(const launcher_def *l, int world, int *out) {
  *out = -1;
  const char *v = getenv(l->tasks_per_node);
  if (!v || !*v) return FB_OK;
  int node = -1;
  FB_TRY(env_int(l, "SLURM_NODEID", 0, MAX_WORLD, &node));
  long first = 0, best = 0;
  for (const char *p = v;;) {
    long count, repeat;
    if (!tasks_entry(&p, &count, &repeat) || count > world || (*p && *p != ','))
      return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want counts of at most %d like 2(x3),1; "
                    "%s sets it)", l->tasks_per_node, v, world, l->name);
    if (node >= first && node < first + repeat) best = count;
    if (node < 0 && count > best) best = count;
    first += repeat;
    if (!*p) break;
    p++;
  }
  *out = best > 0 ? (int)best : -1;
  return FB_OK;
}

static fb_status read_launcher(const launcher_def *l, int world, fb_launch *out) {
  int rank = -1, local_rank = -1, local_size = -1;
  FB_TRY(env_int(l, l->rank, 0, world - 1, &rank));
  if (rank < 0)
    return FB_ERR(FB_EUSAGE, "%s: not set although %s is %d (want an integer in [0, %d]; %s "
                  "sets both)", l->rank, l->world, world, world - 1, l->name);
  FB_TRY(env_int(l, l->local_size, 1, world, &local_size));
  if (local_size < 0 && l->tasks_per_node) FB_TRY(slurm_tasks_here(l, world, &local_size));
  if (local_size < 0) local_size = world;
  FB_TRY(env_int(l, l->local_rank, 0, local_size - 1, &local_rank));
  if (local_rank < 0) local_rank = rank % local_size;
  *out = (fb_launch){.name = l->name, .vars = l->vars, .rank = rank, .world = world,
                     .local_rank = local_rank, .local_size = local_size, .launched = world > 1,
                     .mpi_joins = l->mpi_joins};
  return FB_OK;
}

fb_status fb_launch_detect(fb_launch *out) {
  *out = (fb_launch){.name = "none", .vars = "", .rank = 0, .world = 1, .local_rank = 0,
                     .local_size = 1, .launched = false, .mpi_joins = false};
  for (size_t i = 0; i < sizeof launchers / sizeof launchers[0]; i++) {
    const launcher_def *l = &launchers[i];
    int world = -1;
    FB_TRY(env_int(l, l->world, 1, MAX_WORLD, &world));
    if (world > 0) return read_launcher(l, world, out);
  }
  return FB_OK;
}

static int online_cpus(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

int fb_cores_available(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return online_cpus();
}

bool fb_rank_cpus(int index, int nlocal, int threads, void *cpus) {
  cpu_set_t *out = cpus, mask;
  CPU_ZERO(out);
  CPU_ZERO(&mask);
  if (nlocal < 2 || threads < 1 || index < 0 || index >= nlocal) return false;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return false;
  if ((long)nlocal * threads > CPU_COUNT(&mask)) return false;
  const int first = index * threads;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE && seen < first + threads; cpu++) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    if (seen++ >= first) CPU_SET(cpu, out);
  }
  return CPU_COUNT(out) == threads;
}

int fb_threads_per_rank(int requested, int ranks, bool one_per_process, bool *oversubscribed) {
  if (ranks < 1) ranks = 1;
  const int cores = fb_cores_available();
  const int machine = one_per_process ? online_cpus() : cores;
  *oversubscribed = ranks > machine;
  if (requested > 0) return requested;
  int t = machine / ranks;
  if (one_per_process && t > cores) t = cores;
  return t > 0 ? t : 1;
}
