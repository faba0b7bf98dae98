/* Matching an executed run's ops with a simulated run's, op by op: `validate --backend` prints
 * the result, `calibrate --backend cuda` fits its in-step figures on it. Internal to apps/. */
#ifndef FB_OP_MATCH_H
#define FB_OP_MATCH_H
#include <stdint.h>

#include "../engine/exec/runner.h"

/* One op name: how many ops were matched and their summed times (seconds). */
typedef struct fb_op_row {
  const char *name; /* the kernel wrapper's static string */
  int64_t n;
  double meas, pred;
} fb_op_row;

/* Matches the kept ops of measured rank i with predicted rank i, track by track, in issue
 * order, into rows[0..*nrows) (one per op name, at most cap; rows found in *nrows are added
 * to). A track whose sequences part (another name or step) stops there and counts one in
 * *mismatched. FB_EINTERNAL when more than cap names. */
fb_status fb_op_match(const fb_run_result *m, const fb_run_result *p, fb_op_row *rows,
                      int *nrows, int cap, int64_t *mismatched);

#endif
