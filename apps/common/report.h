/* The run report: fixed-column tables on a FILE (like nccl-tests: a header row and a units
 * row) and the same records as CSV and JSON files for plots. It reads an fb_run_result and
 * computes nothing that the recorder did not measure. It does not write traces
 * (traces/chrome_trace.h) or memory snapshots (traces/memory_snapshot.h).
 *
 * Conventions used everywhere below:
 *  - "measured steps": every step except the first when there are more than 2 steps (warm-up).
 *  - step time = mean over the measured steps of the rank's wall time per step; compute,
 *    comm and exposed comm are means over the same steps (so exposed <= comm holds for the
 *    means too and overlap stays within [0, 1]), and idle = step - compute - exposed is the
 *    idle share of those steps' total time, the figure HTA's temporal breakdown computes from
 *    the run's trace (traces/kineto_trace.h). (A median step time beside mean compute times
 *    made that idle share off by the steps' spread; tokens / s over the measured steps is
 *    tokens / mean step time.)
 *  - tokens/s = global tokens per step / step time; tokens/s per rank = that / world.
 *  - TFLOP/s per rank = model FLOPs per step (3 x forward matmul FLOPs) / world / step time;
 *    % peak = that / the device's peak (measured GEMM ceiling on cpu, profile peak on sim).
 *  - overlap = 1 - exposed comm / comm (empty when a rank does no communication).
 *  - with the sim backend (predicted runs) every time, rate and FLOP/s figure is a prediction;
 *    the tables say "(pred)" and loss / grad norm / param sum are empty (NaN).
 *
 * Files written by fb_report_write(dir) (header line first, comma-separated, numbers in C
 * locale, empty field when a value does not exist):
 *
 * summary.csv: one row per rank held by this process, then a row with rank "mean".
 *   rank           rank index, or "mean" (mean of the rank rows; tokens_per_s from its step_ms)
 *   step_ms        mean step time (ms)
 *   tokens_per_s   global tokens per second
 *   tokens_per_s_rank  tokens per second per rank (global / world)
 *   tflops         achieved TFLOP/s per rank (model FLOPs)
 *   peak_pct       tflops as % of the per-rank peak (empty if the peak is unknown)
 *   compute_ms     mean compute-stream busy time per step (union of op intervals)
 *   comm_ms        mean comm-stream busy time per step
 *   exposed_ms     mean comm time per step not hidden behind compute
 *   overlap        1 - exposed_ms / comm_ms (empty when comm_ms is 0)
 *   peak_bytes     peak device memory of the rank (all categories together)
 *   persistent_bytes  params + grads + optimizer state owned after setup
 *   coll_bytes     logical collective bytes per step (mean over all steps, all types)
 *   wire_bytes     bytes one rank sends per step (ring algorithms)
 *   predicted      1 when the figures are predictions (sim), else 0
 *
 * steps.csv: one row per (rank, step).
 *   rank           the rank
 *   step           the step number as the step log line prints it (1-based, fb_step_number;
 *                  a resumed run goes on counting)
 *   wall_ms        step duration
 *   compute_ms, comm_ms, exposed_ms   as in summary.csv, for this step
 *   tflops         model FLOPs per step / world / wall, in TFLOP/s
 *   loss           global mean token loss (empty when predicted)
 *   grad_norm      global gradient norm before clipping (empty when predicted)
 *   lr             learning rate used by the step
 *   all_gather_bytes, reduce_scatter_bytes, all_reduce_bytes, broadcast_bytes, reduce_bytes,
 *   barrier_bytes  logical bytes of the rank's collectives of that type in this step
 *                  (fb_coll_bytes: AG/RS full buffer, all-reduce 2x the buffer)
 *
 * memory.csv: one row per (rank, category), categories in engine order (param_shard,
 *   param_full, grad_shard, grad_full, optim, act, comm, temp) then "total", then (sim on a
 *   GPU profile only) "reserved_predicted": the caching-allocator model's reserved bytes
 *   (segments), a prediction; the rows above are the exact ledger ("allocated").
 *   rank, category
 *   peak_bytes     the category's own peak over the run ("total": the peak of the sum;
 *                  "reserved_predicted": the peak of the segments)
 *   at_peak_bytes  the category's bytes at the moment the total peaked ("reserved_predicted":
 *                  reserved when the model's allocated bytes peaked)
 *   final_bytes    bytes still allocated at the end of the run (reserved: still cached)
 *
 * ledger.csv: one row per (rank, collective type) that moved bytes or took time.
 *   rank, coll     collective name
 *   bytes_per_step logical bytes per step (mean over all steps)
 *   wire_bytes_per_step  bytes sent by the rank per step
 *   time_ms_per_step     summed duration of those collectives per step
 *   psi_ratio      bytes_per_step / (parameter count x param dtype size): DDP ~2, FSDP ~3
 *   intra_node_wire_bytes_per_step, inter_node_wire_bytes_per_step   wire_bytes_per_step
 *                  split by where the bytes go (fb_coll_wire_split: a node holds the
 *                  profile's devices_per_node consecutive ranks, else the launch's ranks on
 *                  one machine; the two add up to wire_bytes_per_step)
 *
 * report.json: {"config": {...run config echo...}, "predicted", "world", "nsteps", "wall_s",
 *   "startup_ms" (exec to the first step's start, measured, fb_startup_ms),
 *   "first_step_unix_s" (that moment on the wall clock, s since the epoch, for a caller that
 *   timed the exec itself), "param_sum", "loss": [...], "grad_norm": [...], "lr": [...],
 *   "mean": {summary fields},
 *   "ranks": [{summary fields, "memory": {category: {peak, at_peak, final}},
 *   "allocator": {...}, "host": {...} (sim on a GPU profile only, see below),
 *   "ledger": {coll: {bytes_per_step, wire_bytes_per_step, intra_node_wire_bytes_per_step,
 *   inter_node_wire_bytes_per_step, time_ms_per_step}}; the summary fields add
 *   wire_bytes_intra_node and wire_bytes_inter_node (per step, all types),
 *   "steps": [{step, wall_ms, compute_ms, comm_ms, exposed_ms, flops, coll_bytes: {...},
 *   and with the models host_busy_ms, host_hooks_ms, host_stalls_ms, host_drains_ms,
 *   cuda_malloc_ms, alloc_retries, retry_ms}]}]}. Non-finite numbers are null.
 *   "allocator" (label "predicted (allocator model)"): allocated_peak (the ledger),
 *   reserved_peak, reserved_final, reserved_at_allocated_peak,
 *   held_by_record_stream_at_reserved_peak, segments_peak, num_device_alloc, num_device_free,
 *   num_alloc_retries, num_ooms (run totals), retry_ms_per_step, cuda_malloc_ms_per_step.
 *   "host" (label "predicted (host model)"): busy_ms_per_step (op dispatch + hooks),
 *   hooks_ms_per_step, stalls_ms_per_step (event syncs, e.g. FSDP's rate limiter),
 *   drains_ms_per_step (stream syncs, device-to-host copies). Per step = mean over the
 *   measured steps.
 *
 * The printed report adds, with the models, a "Caching allocator" table (allocated and reserved
 * peaks, what the difference was made of, cudaMallocs and retries per step, OOMs) with one line
 * saying why, and a "Host" table. */
#ifndef FB_REPORT_H
#define FB_REPORT_H
#include <stdio.h>

#include "../engine/exec/runner.h"

/* Figures of one rank over the measured steps (seconds, bytes). */
typedef struct fb_rank_summary {
  double step_s;           /* mean wall */
  double compute_s, comm_s, exposed_s;  /* means */
  double overlap;          /* NaN when comm_s == 0 */
  double tokens_per_s, tokens_per_s_rank, tflops, peak_pct; /* peak_pct NaN when unknown */
  double coll_bytes[FB_NCOLL], wire_bytes[FB_NCOLL], coll_time_s[FB_NCOLL]; /* per step */
  double wire_intra[FB_NCOLL], wire_inter[FB_NCOLL]; /* wire bytes within / across nodes */
} fb_rank_summary;

/* Summary of rank index i of r->ranks (i < r->nranks); i == -1 gives the mean row. */
void fb_report_summary(const fb_run_result *r, int i, fb_rank_summary *out);
/* Collectives weigh in a step when their time is at least this share of compute: there a
 * prediction reads as a range (the report's 'no overlap' line, validate's 'overlap:' line). */
#define FB_COMM_HEAVY 0.25
/* The comm time compute hid: comm - exposed, never below 0. */
double fb_report_hidden(double comm_s, double exposed_s);
/* The step if no collective overlapped compute: step_s plus the comm compute hid. Where
 * collectives weigh, the top of a prediction's range (README). */
double fb_report_no_overlap(const fb_rank_summary *s);
/* "Where the predicted step goes", shared by plan and compare: a header, then one row per
 * run: the compute stream's time by op kind, the exposed (not overlapped) time of each
 * collective type, the host model's stalls and the allocator model's cudaMalloc and retry
 * time, the idle rest (step - compute - exposed comm), the allocated peak and the allocator
 * model's reserved peak (reserved <= 0 prints "-"). Times of one step, in ms. */
void fb_report_why_head(FILE *f, const char *label);
void fb_report_why_row(FILE *f, const char *label, const fb_step_stats *w, int64_t allocated,
                       int64_t reserved);
/* Out-of-memory errors the caching-allocator model predicts, summed over the ranks (0 without
 * the model: a CPU run, a GPU profile's ledger alone); *reserved (may be NULL) gets the largest
 * reserved peak. A run with any would stop with OutOfMemoryError: it does not fit, whatever its
 * allocated peak. */
int64_t fb_report_ooms(const fb_run_result *r, int64_t *reserved);
/* The tables, then the loss / grad norm / final parameter sum lines. */
void fb_report_print(FILE *f, const fb_run_result *r);
/* summary.csv, steps.csv, memory.csv, ledger.csv, report.json under dir (created). */
fb_status fb_report_write(const char *dir, const fb_run_result *r);
/* Before a run: every file a run writes under dir (these, the trace, the memory snapshot, with
 * or without a rank<r>_ prefix) that already exists must be a regular file (files.h). */
fb_status fb_report_check_out(const char *dir);

#endif
