/* `fsdpbench plan`: runs every strategy and the options that matter in simulation on one
 * hardware profile and world size, drops what does not fit in memory and ranks the rest by
 * predicted step time. It runs the ordinary runner (backend sim); it does not model anything
 * itself. */
#ifndef FB_PLAN_H
#define FB_PLAN_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../engine/config/config.h"
#include "../engine/core/status.h"
#include "../engine/device/recorder.h"

/* argv[0] is the subcommand name ("plan"); the run flags follow (--model, --hardware, --world,
 * --batch, --seq, --micro-batch, --param-dtype, ...). Prints the ranked table. Returns the
 * process exit code (0, or the fb_status). */
int fb_plan_main(int argc, char **argv);

/* One candidate's prediction. */
typedef struct fb_plan_row {
  char strategy[32];
  char options[96];      /* "prefetch on, reshard_after_forward off, accum reduce" */
  fb_status st;          /* FB_OK, or why it could not run (message in error) */
  char error[256];
  double step_s;         /* slowest simulated rank, last step */
  double tokens_per_s_per_rank;
  double mfu;            /* model FLOPs / (step time * world * peak) */
  double exposed_comm_s;
  double no_overlap_s; /* the step if no collective overlapped compute: step_s plus rank 0's comm
                          compute hid (the top of the prediction's range, README) */
  int64_t peak_bytes;    /* per rank, largest over simulated ranks */
  int64_t ooms;          /* out-of-memory errors the allocator model predicts (all ranks) */
  bool fits;             /* peak_bytes <= capacity and no predicted out-of-memory error */
  /* why: rank 0's last step (compute by op kind, exposed time per collective type, host and
   * allocator-model time) and the allocator model's reserved peak (0 without the model) */
  fb_step_stats why;
  int64_t reserved_peak;
} fb_plan_row;

/* Whether a row fits `capacity` per device: its allocated peak does and the allocator model
 * predicts no out-of-memory error (what `fits` holds for the capacity it was set with). */
bool fb_plan_row_fits(const fb_plan_row *r, int64_t capacity);

/* Runs every candidate for `base` (its backend is forced to sim). rows is allocated (free()).
 * capacity receives the hardware's memory per device. */
fb_status fb_plan_run(const fb_run_config *base, fb_plan_row **rows, int *nrows,
                      int64_t *capacity);
/* Prints the ranked table, the "does not fit" (peak > capacity, or the allocator model's
 * reserved memory over it: an out-of-memory error) and the "could not run" sections. */
void fb_plan_print(FILE *f, const fb_run_config *base, const fb_plan_row *rows, int nrows,
                   int64_t capacity);

#endif
