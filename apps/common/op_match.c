/* Executed against simulated ops, track by track (see op_match.h). It prints nothing. */
#include "op_match.h"

#include <string.h>

static fb_op_row *row_of(fb_op_row *rows, int *nrows, int cap, const char *name) {
  for (int i = 0; i < *nrows; i++)
    if (!strcmp(rows[i].name, name)) return &rows[i];
  if (*nrows == cap) return NULL;
  rows[*nrows] = (fb_op_row){.name = name};
  return &rows[(*nrows)++];
}

fb_status fb_op_match(const fb_run_result *m, const fb_run_result *p, fb_op_row *rows,
                      int *nrows, int cap, int64_t *mismatched) {
  for (int i = 0; i < m->nranks && i < p->nranks; i++) {
    int64_t nm, np;
    const fb_rec_op *om = fb_recorder_ops(m->ranks[i].rec, &nm);
    const fb_rec_op *op = fb_recorder_ops(p->ranks[i].rec, &np);
    for (int tr = 0; tr < fb_recorder_nstreams(m->ranks[i].rec); tr++) {
      int64_t a = 0, b = 0;
      for (;;) {
        while (a < nm && om[a].stream != tr) a++;
        while (b < np && op[b].stream != tr) b++;
        if (a >= nm || b >= np) break;
        if (strcmp(om[a].name, op[b].name) || om[a].step != op[b].step) {
          (*mismatched)++;
          break; /* the sequences diverged on this track: stop matching it */
        }
        fb_op_row *row = row_of(rows, nrows, cap, om[a].name);
        if (!row) return FB_ERR(FB_EINTERNAL, "op match: more than %d op names", cap);
        row->n++;
        row->meas += om[a].t1 - om[a].t0;
        row->pred += op[b].t1 - op[b].t0;
        a++, b++;
      }
    }
  }
  return FB_OK;
}
