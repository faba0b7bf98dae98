/* --dry-run (see dry_run.h): prints where this process was placed (rank, local_rank) and the
 * resolved configuration as YAML that --config reads back, then, as YAML comments, where it
 * would run and the predicted memory of the worst rank per category, and the fit verdict.
 * Opens no device. */
#include "dry_run.h"
#include "../backends/registry.h"

#include <stdio.h>
#include <string.h>

static double mib(int64_t b) { return (double)b / 1048576.0; }

void fb_dry_run_place(const fb_launch *l, bool multi_process) {
  printf("# fsdpbench --dry-run: the resolved configuration (feed it back with --config)\n");
  if (!strcmp(l->name, "none"))
    printf("# placement: no launcher (%s)\n", multi_process ? "one process" : "ranks are threads "
           "of this process");
  else
    printf("# placement: launcher %s (%s): rank %d of %d, local rank %d of %d on this node%s\n",
           l->name, l->vars, l->rank, l->world, l->local_rank, l->local_size,
           multi_process ? "" : " (not used: this communicator's ranks are threads)");
  printf("# rank and local_rank are this process's place: --config reads them back and ignores "
         "them (each process takes its own from its launcher)\n");
  printf("rank: %d\nlocal_rank: %d\n", l->rank, l->local_rank);
}

void fb_dry_run_refused(const fb_run_config *c) {
  printf("# refused before the whole configuration was resolved; so far:\n");
  printf("world: %d\nthreads: %d\n", c->world, c->threads);
  fflush(stdout);
}

fb_status fb_dry_run(const fb_run_config *c, const fb_device_entry *dev, const fb_hardware *hw,
                     const char *absent, bool multi_process, fb_precheck_fn precheck) {
  fb_run_config shown = *c;
  shown.dry_run = false; /* the YAML describes the run itself */
  fb_config_write_yaml(stdout, &shown);
  printf("# backend %s: %s; communicator %s%s; %d rank(s)%s; params %s, reduce %s\n",
         dev->name, absent && absent[0] ? absent : "available here", c->comm,
         dev->caps->host_access || !fb_word_in(c->comm, "local mpi")
             ? ""
             : " (staged through pinned host buffers)",
         c->world, multi_process ? ", one process per rank from the launcher" : "",
         fb_dtype_name(c->param_dtype), fb_dtype_name(c->reduce_dtype));
  fb_fit fit = {0};
  /* the ranks share this machine's memory only on a CPU device that runs them as threads; sim's
   * ranks are simulated devices of their own, as a GPU's are */
  const bool shared = dev->caps->executes && !dev->caps->gpu && !multi_process;
  fb_status st = precheck(c, dev, hw->mem_capacity, shared, &fit);
  if (st != FB_OK && st != FB_ENOMEM) return st;
  printf("# predicted memory per rank (exact ledger of the same allocation calls), worst rank "
         "%d, at its peak:\n", fit.worst_rank);
  for (int k = 0; k < FB_MEM_NCAT; k++)
    printf("#   %-15s %12.1f MiB\n", fb_mem_cat_name((fb_mem_cat)k), mib(fit.peak.at_peak[k]));
  printf("#   %-15s %12.1f MiB allocated\n", "total", mib(fit.peak.peak_total));
  if (fit.reserved_peak > 0)
    printf("#   %-15s %12.1f MiB (PyTorch caching allocator, modelled)\n", "reserved", mib(fit.reserved_peak));
  if (fit.limit > 0)
    printf("# fit: needs %.1f MiB of %.1f MiB available: %s\n", mib(fit.need), mib(fit.limit),
           st == FB_OK ? "fits" : "does NOT fit");
  else
    printf("# fit: capacity unknown here (no device and no --hardware profile): not checked\n");
  return st;
}
