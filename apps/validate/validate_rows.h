/* What the readers of `validate --dataset` share (apps/validate_dataset.c drives them): one
 * row's result, the file being read, and the small helpers every reader uses (column lookup,
 * numbers, the GPU name -> profile table). Training rows: validate_train.c; GEMM, attention and
 * collective rows: validate_ops.c. Internal to apps/; not a public interface. */
#ifndef FB_VALIDATE_ROWS_H
#define FB_VALIDATE_ROWS_H
#include <stdbool.h>
#include <stddef.h>

#include "../engine/core/status.h"
#include "../engine/sim/hardware.h"
#include "csv_table.h"

typedef struct ds_result {
  int row;               /* 1-based data row of the file */
  char what[200];        /* configuration, one line */
  char gpu[16];          /* profile the row used */
  double published, predicted;
  char skip[200];        /* non-empty: not expressible, with this reason */
  char assumed[200];     /* what the row leaves unstated and the run assumed or searched */
  long long ooms;        /* training rows: out-of-memory errors the allocator model predicts
                            (the published run had none) */
  double step_s, compute_s, comm_s; /* training rows: the predicted step, its compute and its
                            collectives (unions over the last step, rank 0); 0 elsewhere */
  const char *floor_why; /* non-NULL: left out of the worst-row floor, for this reason */
} ds_result;

typedef struct ds_ctx {
  const fb_csv *t;
  ds_result *res;
  int n;
  const char *unit;      /* "tok/s/GPU", "TFLOP/s", "GB/s busbw" */
  const char *closing;   /* "dev-set" or "op-set" */
  char tmpdir[64];       /* scratch for the model and profile files a row writes */
  const char *hardware;  /* --hardware PROFILE: every row on it (NULL: by the row's GPU) */
} ds_ctx;

typedef fb_status (*ds_row_fn)(ds_ctx *x, int r, ds_result *o);

/* The row readers: each fills `o` with (published, predicted) or a reason in o->skip. */
fb_status ds_train_row(ds_ctx *x, int r, ds_result *o);
fb_status ds_gemm_row(ds_ctx *x, int r, ds_result *o);
fb_status ds_attention_row(ds_ctx *x, int r, ds_result *o);
fb_status ds_collective_row(ds_ctx *x, int r, ds_result *o);

/* Whether `s` contains `sub`, ignoring case. */
bool ds_has(const char *s, const char *sub);
/* A number, or NaN for an empty or non-numeric field. */
double ds_num(const char *s);
/* Field `name` of data row r ("" when absent). */
const char *ds_col(const ds_ctx *x, int r, const char *name);
/* Marks the row not expressible: printf-style reason with one string argument. */
void ds_skip(ds_result *o, const char *fmt, const char *arg);
/* The row's profile: --hardware when given, else the one for its GPU name and memory; NULL
 * with *why when there is none. */
const char *ds_row_profile(const ds_ctx *x, const char *gpu, int mem_gb, char *why, size_t n);
/* Writes `extends: BASE` plus `lines` (key: value lines) as DIR/NAME.yaml into `path`. */
fb_status ds_write_profile(const ds_ctx *x, const char *name, const char *base,
                           const char *lines, char *path, size_t npath);

#endif
