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
  char source[48];       /* the row's source_id ("" where the file has no such column) */
  double published, predicted;
  char skip[200];        /* non-empty: not expressible, with this reason */
  char assumed[2000];    /* what the row leaves unstated and the run assumed or searched */
  char figures[400];     /* training rows: every figure the source printed, as tok/s/GPU */
  long long ooms;        /* training rows: out-of-memory errors the allocator model predicts
                            (the published run had none) */
  double step_s, compute_s, comm_s; /* training rows: the predicted step, its compute and its
                            collectives (unions over the last step, rank 0); 0 elsewhere */
  double hidden_s;       /* training rows: the collectives' time under compute in that step */
  /* training rows, peak memory (validate_memory.c): the published figure in bytes (0: none
   * compared), what it is (or why it is not compared; "" when the row prints none), and rank
   * 0's predicted peaks: allocated, allocated before the first step, reserved; and, for a row
   * keeping its state in bf16, the bytes of the engine's weights, gradients and AdamW moments
   * beyond 8 a parameter (the fp32 state that row does not hold; 0 for other rows) */
  double mem_pub;
  char mem_how[240];
  bool mem_reserved_metric;
  double mem_alloc, mem_state, mem_reserved, mem_fp32_state;
  const char *floor_why; /* non-NULL: left out of the worst-row floor, for this reason */
  /* training rows, for the pairs (validate_pairs.c): rows of one source with the same `key`
   * differ only in strategy (`strat`) or only in GPU count (`world`) */
  char key[300];
  char strat[24];
  int world;
  bool own_network;      /* training rows: several nodes, on a network the row states */
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

/* What a training row's published figures need to become tokens/s per GPU. */
typedef struct ds_fig_in {
  double world, seq, gb;         /* GPUs, tokens per sequence, sequences per step */
  double L, d, h, kv, f, v;      /* model dimensions (v as the run has it, maybe assumed) */
  bool recompute;                /* the run reruns each block's forward (full checkpointing) */
} ds_fig_in;

/* The row's published throughput in tokens/s per GPU: tokens_per_s_per_gpu (a range "A-B":
 * its midpoint), else the first of tokens_per_s_total, samples_per_s, iter_time_s,
 * tflops_per_gpu, mfu, hfu it has, converted by its source's FLOP convention
 * (validate_figures.c). `note` gets every figure the row prints with its conversion. NaN when
 * none can be read. */
double ds_published_tps(const ds_ctx *x, int r, const ds_fig_in *m, char *note, size_t n);

/* The network a training run prices: adapters per node and Gb/s per adapter (the profile keys
 * nics_per_node, nic_gbps). */
typedef struct ds_network {
  int nics;
  double gbps;
} ds_network;

/* The network a row's interconnect text states (validate_network.c): "4 x 100 Gb RoCE per
 * node" -> 4 x 100; a total without a count ("800 Gb/s RDMA per node", "3.2 Tbps") ->
 * adapters of the profile's speed making that total; nothing -> a source's stated machines,
 * else the profile's adapters per GPU on the row's `gpn` GPUs per node. What it assumed (for
 * a multi-node `world`) is appended to `why` ("; "-separated). True when the text states a
 * bandwidth (the network is the row's own, not assumed). */
bool ds_row_network(const char *text, const char *src, const fb_hardware *hw, int gpn,
                    int world, ds_network *net, char *why, size_t n);

/* The pairs of rows of one source that differ only in strategy or only in GPU count: the
 * published and predicted ratio of each, then the closing line
 * `pairs: N, within 5 points: K, worst P points`. */
void ds_print_pairs(const ds_ctx *x);

/* The row's published peak memory (column peak_mem_gb) by its source's unit and metric
 * (validate_memory.c): fills o->mem_pub and o->mem_how; false when there is none to compare
 * (o->mem_how then says why, or is empty when the row prints none). Needs o->source. */
bool ds_published_mem(const ds_ctx *x, int r, ds_result *o);
/* A compared row's peak memory: published and predicted GiB (of the source's metric) and the
 * error in %; false when the row has none to compare. */
bool ds_mem_figures(const ds_result *o, double *pub, double *pred, double *err);
/* The line under a training row with its published and predicted peak memory. */
void ds_print_mem_row(const ds_result *o);
/* `memory: N rows, median |err| M%, worst W% ...` over the rows compared (nothing when none). */
void ds_print_mem_summary(const ds_ctx *x);

/* Whether `s` contains `sub`, ignoring case. */
bool ds_has(const char *s, const char *sub);
/* A number, or NaN for an empty or non-numeric field. */
double ds_num(const char *s);
/* Field `name` of data row r ("" when absent). */
const char *ds_col(const ds_ctx *x, int r, const char *name);
/* Marks the row not expressible: printf-style reason with one string argument. */
void ds_skip(ds_result *o, const char *fmt, const char *arg);
/* Appends "; what" to the list in buf (n bytes; no separator when empty). A list that would
 * not fit ends in "..." instead of being cut silently (a row's numbers make its length). */
void ds_append(char *buf, size_t n, const char *what);
/* The distinct non-empty groups (by `of`, e.g. ds_source_of) of the expressed rows, in row
 * order, at most cap (validate_dataset.c). */
int ds_groups(const ds_ctx *x, const char *(*of)(const ds_result *), const char **g, int cap);
const char *ds_source_of(const ds_result *o);
/* Exposed communication (validate_overlap.c): a training row's published step (its predicted
 * step x predicted / published; 0 without one), the share of its predicted collectives a step
 * leaves exposed past the predicted compute (NAN: no collectives, or shorter than the
 * compute), and the closing 'overlap:' line over the file. */
double ds_published_step(const ds_result *o);
double ds_exposed_share(const ds_result *o, double step);
/* The predicted step with no collective hidden under compute (the top of the prediction's
 * range where collectives weigh): step_s + hidden_s. */
double ds_no_overlap_step(const ds_result *o);
void ds_print_overlap_summary(const ds_ctx *x);

/* The row's profile: --hardware when given, else the one for its GPU name and memory; NULL
 * with *why when there is none. */
const char *ds_row_profile(const ds_ctx *x, const char *gpu, int mem_gb, char *why, size_t n);
/* Writes `extends: BASE` plus `lines` (key: value lines) as DIR/NAME.yaml into `path`. */
fb_status ds_write_profile(const ds_ctx *x, const char *name, const char *base,
                           const char *lines, char *path, size_t npath);

#endif
