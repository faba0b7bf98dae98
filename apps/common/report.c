/* The run report (report.h): per-rank summaries over the measured steps, the fixed-column
 * tables, and the CSV / JSON records. Column meanings are documented in report.h.
 * It does not measure anything: every figure comes from the fb_run_result. */
#include "report.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/core/files.h"
#include "../engine/core/json_out.h"

#define MIB (1024.0 * 1024.0)

/* ---- figures ------------------------------------------------------------------------------ */

static int first_measured(int nsteps) { return nsteps > 2 ? 1 : 0; }

static double mean_wall(const fb_step_stats *s, int nsteps) {
  int first = first_measured(nsteps), n = nsteps - first;
  if (n <= 0) return NAN;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += s[first + i].wall;
  return sum / n;
}

static void derive_rates(const fb_run_result *r, fb_rank_summary *o) {
  double t = o->step_s;
  int world = r->world > 0 ? r->world : 1;
  bool ok = t > 0 && isfinite(t);
  o->tokens_per_s = ok ? (double)r->tokens_per_step / t : NAN;
  o->tokens_per_s_rank = ok ? o->tokens_per_s / world : NAN;
  o->tflops = ok ? r->model_flops_per_step / world / t / 1e12 : NAN;
  o->peak_pct = (ok && r->peak_flops > 0) ? 100.0 * o->tflops * 1e12 / r->peak_flops : NAN;
  o->overlap = o->comm_s > 0 ? 1.0 - o->exposed_s / o->comm_s : NAN;
  if (o->overlap < 0) o->overlap = 0;
  if (o->overlap > 1) o->overlap = 1;
}

static void rank_summary(const fb_run_result *r, const fb_rank_result *rk, fb_rank_summary *o) {
  memset(o, 0, sizeof *o);
  int first = first_measured(r->nsteps), n = r->nsteps - first;
  o->step_s = mean_wall(rk->steps, r->nsteps);
  for (int i = first; i < r->nsteps; i++) {
    o->compute_s += rk->steps[i].compute;
    o->comm_s += rk->steps[i].comm;
    o->exposed_s += rk->steps[i].exposed_comm;
  }
  if (n > 0) {
    o->compute_s /= n;
    o->comm_s /= n;
    o->exposed_s /= n;
  }
  for (int i = 0; i < r->nsteps; i++)
    for (int c = 0; c < FB_NCOLL; c++) {
      o->coll_bytes[c] += rk->steps[i].coll_bytes[c];
      o->wire_bytes[c] += rk->steps[i].wire_bytes[c];
      o->wire_intra[c] += rk->steps[i].wire_intra[c];
      o->wire_inter[c] += rk->steps[i].wire_inter[c];
      o->coll_time_s[c] += rk->steps[i].coll_time[c];
    }
  if (r->nsteps > 0)
    for (int c = 0; c < FB_NCOLL; c++) {
      o->coll_bytes[c] /= r->nsteps;
      o->wire_bytes[c] /= r->nsteps;
      o->wire_intra[c] /= r->nsteps;
      o->wire_inter[c] /= r->nsteps;
      o->coll_time_s[c] /= r->nsteps;
    }
  derive_rates(r, o);
}

void fb_report_summary(const fb_run_result *r, int i, fb_rank_summary *out) {
  assert(i >= -1 && i < r->nranks);
  if (i >= 0) {
    rank_summary(r, &r->ranks[i], out);
    return;
  }
  memset(out, 0, sizeof *out);
  for (int k = 0; k < r->nranks; k++) {
    fb_rank_summary s;
    rank_summary(r, &r->ranks[k], &s);
    out->step_s += s.step_s;
    out->compute_s += s.compute_s;
    out->comm_s += s.comm_s;
    out->exposed_s += s.exposed_s;
    for (int c = 0; c < FB_NCOLL; c++) {
      out->coll_bytes[c] += s.coll_bytes[c];
      out->wire_bytes[c] += s.wire_bytes[c];
      out->wire_intra[c] += s.wire_intra[c];
      out->wire_inter[c] += s.wire_inter[c];
      out->coll_time_s[c] += s.coll_time_s[c];
    }
  }
  if (r->nranks > 0) {
    double n = r->nranks;
    out->step_s /= n;
    out->compute_s /= n;
    out->comm_s /= n;
    out->exposed_s /= n;
    for (int c = 0; c < FB_NCOLL; c++) {
      out->coll_bytes[c] /= n;
      out->wire_bytes[c] /= n;
      out->wire_intra[c] /= n;
      out->wire_inter[c] /= n;
      out->coll_time_s[c] /= n;
    }
  } else {
    out->step_s = NAN;
  }
  derive_rates(r, out);
}

double fb_report_hidden(double comm_s, double exposed_s) { return fmax(0, comm_s - exposed_s); }

double fb_report_no_overlap(const fb_rank_summary *s) {
  return s->step_s + fb_report_hidden(s->comm_s, s->exposed_s);
}

static double sum_colls(const double *v) {
  double s = 0;
  for (int c = 0; c < FB_NCOLL; c++) s += v[c];
  return s;
}

static double psi_bytes(const fb_run_result *r) {
  return (double)r->model.numel * (double)fb_dtype_size(r->cfg.param_dtype);
}

/* ---- the tables --------------------------------------------------------------------------- */

/* A fixed-width cell: the number, or "-" when it does not exist. */
static void cell(FILE *f, int w, int prec, double x) {
  if (isfinite(x)) fprintf(f, " %*.*f", w, prec, x);
  else fprintf(f, " %*s", w, "-");
}

static void print_time_row(FILE *f, const char *label, const fb_rank_summary *s) {
  fprintf(f, "  %6s", label);
  cell(f, 10, 3, s->step_s * 1e3);
  cell(f, 12, 1, s->tokens_per_s);
  cell(f, 12, 1, s->tokens_per_s_rank);
  cell(f, 9, 4, s->tflops);
  cell(f, 7, 2, s->peak_pct);
  cell(f, 10, 3, s->compute_s * 1e3);
  cell(f, 10, 3, s->comm_s * 1e3);
  cell(f, 10, 3, s->exposed_s * 1e3);
  cell(f, 8, 1, s->overlap * 100);
  fputc('\n', f);
}

/* A predicted step where collectives weigh is a range: from the prediction to the step if no
 * collective overlapped compute (fb_report_no_overlap). validate --dataset counts the published
 * steps of communication-heavy rows that fall in it on its 'overlap:' line (docs/simulator.md,
 * "Exposed communication against the sources"). */
static void print_range(FILE *f, const fb_rank_summary *m) {
  const double bound = fb_report_no_overlap(m);
  if (!(m->comm_s > 0) || !(m->step_s > 0) || !isfinite(bound)) return;
  fprintf(f, "# no overlap (pred): step + the comm compute hid = %.3f ms a step, %.1f tokens/s "
             "(global), %.2fx the predicted step: the step if no collective overlapped compute%s\n",
          bound * 1e3,
          m->tokens_per_s * m->step_s / bound, bound / m->step_s,
          m->comm_s >= FB_COMM_HEAVY * m->compute_s
              ? "; comm is at least a quarter of compute: read the prediction as the low end "
                "of a range up to this (README, 'How far to trust the simulator', says how often "
                "published steps fell in it)"
              : "");
}

static void print_time_table(FILE *f, const fb_run_result *r, const char *pred) {
  fprintf(f, "#\n# Time per step%s: step, compute, comm and exposed are means over "
             "steps %d..%d\n", pred, fb_step_number(r->first_step + first_measured(r->nsteps)),
          fb_step_number(r->first_step + r->nsteps - 1));
  fprintf(f, "# %6s %10s %12s %12s %9s %7s %10s %10s %10s %8s\n", "rank", "step", "tokens/s",
          "tokens/s", "TFLOP/s", "peak", "compute", "comm", "exposed", "overlap");
  fprintf(f, "# %6s %10s %12s %12s %9s %7s %10s %10s %10s %8s\n", "", "(ms)", "(global)",
          "(per rank)", "(rank)", "(%)", "(ms)", "(ms)", "(ms)", "(%)");
  char lab[16];
  for (int i = 0; i < r->nranks; i++) {
    fb_rank_summary s;
    fb_report_summary(r, i, &s);
    snprintf(lab, sizeof lab, "%d", r->ranks[i].rank);
    print_time_row(f, lab, &s);
  }
  fb_rank_summary m;
  fb_report_summary(r, -1, &m);
  print_time_row(f, "mean", &m);
  if (r->predicted) print_range(f, &m);
}

static void print_mem_table(FILE *f, const fb_run_result *r, const char *pred) {
  fprintf(f, "#\n# Memory per rank%s: 'at-peak' = each category at the moment of the total "
             "peak, 'own-peak' = each category's own peak\n", pred);
  fprintf(f, "# %6s %8s", "rank", "row");
  for (int c = 0; c < FB_MEM_NCAT; c++) fprintf(f, " %11s", fb_mem_cat_name((fb_mem_cat)c));
  fprintf(f, " %11s %11s\n", "total", "persistent");
  fprintf(f, "# %6s %8s", "", "");
  for (int c = 0; c < FB_MEM_NCAT + 2; c++) fprintf(f, " %11s", "(MiB)");
  fputc('\n', f);
  for (int i = 0; i < r->nranks; i++) {
    const fb_rank_result *rk = &r->ranks[i];
    fprintf(f, "  %6d %8s", rk->rank, "at-peak");
    for (int c = 0; c < FB_MEM_NCAT; c++) cell(f, 11, 3, rk->mem.at_peak[c] / MIB);
    cell(f, 11, 3, rk->mem.peak_total / MIB);
    cell(f, 11, 3, rk->persistent_bytes / MIB);
    fputc('\n', f);
    fprintf(f, "  %6d %8s", rk->rank, "own-peak");
    for (int c = 0; c < FB_MEM_NCAT; c++) cell(f, 11, 3, rk->mem.peak[c] / MIB);
    fputc('\n', f);
  }
}

/* ---- host and caching-allocator models ----------------------------------------------------- */

/* The model counters of rank i, when its device had a model (sim on a GPU profile). */
static bool rank_model(const fb_run_result *r, int i, fb_dev_model *m) {
  return r->ranks[i].rec && fb_recorder_model(r->ranks[i].rec, m);
}

int64_t fb_report_ooms(const fb_run_result *r, int64_t *reserved) {
  int64_t ooms = 0, res = 0;
  for (int i = 0; i < r->nranks; i++) {
    fb_dev_model m;
    if (!rank_model(r, i, &m) || !m.alloc_model) continue;
    ooms += m.ooms;
    if (m.reserved_peak > res) res = m.reserved_peak;
  }
  if (reserved) *reserved = res;
  return ooms;
}

/* Means over the measured steps of the per-step model figures. */
typedef struct model_means {
  double host_busy, host_work, host_wait, host_drain, alloc_time, retry_time, retries;
  double device_allocs;
} model_means;

static model_means model_per_step(const fb_run_result *r, const fb_rank_result *rk) {
  model_means o = {0};
  int first = first_measured(r->nsteps), n = r->nsteps - first;
  for (int k = first; k < r->nsteps; k++) {
    const fb_step_stats *s = &rk->steps[k];
    o.host_busy += s->host_busy;
    o.host_work += s->host_work;
    o.host_wait += s->host_wait;
    o.host_drain += s->host_drain;
    o.alloc_time += s->alloc_time;
    o.retry_time += s->retry_time;
    o.retries += (double)s->alloc_retries;
    o.device_allocs += (double)s->device_allocs;
  }
  if (n > 0) {
    o.host_busy /= n, o.host_work /= n, o.host_wait /= n, o.host_drain /= n, o.alloc_time /= n;
    o.retry_time /= n, o.retries /= n, o.device_allocs /= n;
  }
  return o;
}

static void print_alloc_table(FILE *f, const fb_run_result *r) {
  fprintf(f, "#\n# Caching allocator, predicted (allocator model): 'allocated' is the exact ledger "
             "above, 'reserved' the segments PyTorch's CUDA caching allocator would hold for the "
             "same calls; per step = mean over the measured steps\n");
  fprintf(f, "# %6s %11s %11s %11s %11s %11s %10s %9s %9s %6s\n", "rank", "allocated",
          "reserved", "reserved -", "held by", "cached", "cudaMalloc", "retries", "retries",
          "OOMs");
  fprintf(f, "# %6s %11s %11s %11s %11s %11s %10s %9s %9s %6s\n", "", "peak", "peak",
          "allocated", "rec_stream", "free", "", "", "time", "");
  fprintf(f, "# %6s %11s %11s %11s %11s %11s %10s %9s %9s %6s\n", "", "(MiB)", "(MiB)", "(MiB)",
          "(MiB)", "(MiB)", "(/step)", "(/step)", "(ms/step)", "(run)");
  int64_t gap = -1, gap_alloc = 0, at_res = 0, at_alloc = 0, at_held = 0, at_side = 0;
  int64_t retries = 0, ooms = 0;
  double retry_ms = 0;
  for (int i = 0; i < r->nranks; i++) {
    fb_dev_model m;
    if (!rank_model(r, i, &m) || !m.alloc_model) continue;
    const fb_rank_result *rk = &r->ranks[i];
    const model_means mm = model_per_step(r, rk);
    const int64_t alloc = rk->mem.peak_total;
    const int64_t cached = m.reserved_peak - m.alloc_at_reserved_peak - m.held_at_reserved_peak;
    fprintf(f, "  %6d", rk->rank);
    cell(f, 11, 3, alloc / MIB);
    cell(f, 11, 3, m.reserved_peak / MIB);
    cell(f, 11, 3, (m.reserved_peak - alloc) / MIB);
    cell(f, 11, 3, m.held_at_reserved_peak / MIB);
    cell(f, 11, 3, cached / MIB);
    cell(f, 10, 1, mm.device_allocs);
    cell(f, 9, 2, mm.retries);
    cell(f, 9, 3, mm.retry_time * 1e3);
    fprintf(f, " %6lld\n", (long long)m.ooms);
    if (m.reserved_peak - alloc > gap) {
      gap = m.reserved_peak - alloc, gap_alloc = alloc;
      at_res = m.reserved_peak, at_alloc = m.alloc_at_reserved_peak;
      at_held = m.held_at_reserved_peak, at_side = m.side_at_reserved_peak;
    }
    retries += m.alloc_retries;
    ooms += m.ooms;
    if (mm.retry_time * 1e3 > retry_ms) retry_ms = mm.retry_time * 1e3;
  }
  /* why, in one line each */
  const double pct = gap_alloc > 0 ? 100.0 * (double)gap / (double)gap_alloc : 0;
  if (gap_alloc > 0 && pct > 5)
    fprintf(f, "# why reserved > allocated (+%.0f MiB, %.1f %%): at the reserved peak (%.0f MiB) "
               "%.0f MiB were allocated, %.0f MiB were freed blocks that record_stream holds "
               "until another stream is done with them and %.0f MiB sat cached free (a block "
               "cached for one stream serves no other, segments never merge); side "
               "(communication) streams held %.0f MiB of the segments: inter-stream "
               "fragmentation\n",
            gap / MIB, pct, at_res / MIB, at_alloc / MIB, at_held / MIB,
            (at_res - at_alloc - at_held) / MIB, at_side / MIB);
  else if (gap_alloc > 0)
    fprintf(f, "# reserved ~ allocated (+%.1f %%): no buffer moves between streams; the rest is "
               "block rounding, segment sizes and blocks cached between steps\n",
            pct);
  if (retries > 0)
    fprintf(f, "# %lld cudaMalloc retries: a new segment would have exceeded the capacity, so the "
               "allocator synchronized every stream (the host loses its run-ahead), cudaFree'd "
               "every cached segment and allocated again: up to %.3f ms of host time per step, "
               "plus the GPU idling behind the drained host\n",
            (long long)retries, retry_ms);
  if (ooms > 0)
    fprintf(f, "# %lld predicted out-of-memory errors: with the cache freed, the live segments "
               "would still exceed the capacity (a real run stops with OutOfMemoryError)\n",
            (long long)ooms);
}

static void print_host_table(FILE *f, const fb_run_result *r) {
  fprintf(f, "#\n# Host, predicted (host model): 'busy' = issuing ops (host_op_us each) + the "
             "strategy's framework hooks; 'stalls' = blocked in event syncs (FSDP's rate "
             "limiter); 'drains' = waiting for the device (stream syncs, device-to-host copies); "
             "mean over the measured steps\n");
  fprintf(f, "# %6s %10s %10s %10s %10s %10s\n", "rank", "busy", "hooks", "stalls", "drains",
          "cudaMalloc");
  fprintf(f, "# %6s %10s %10s %10s %10s %10s\n", "", "(ms/step)", "(ms/step)", "(ms/step)",
          "(ms/step)", "(ms/step)");
  for (int i = 0; i < r->nranks; i++) {
    fb_dev_model m;
    if (!rank_model(r, i, &m) || !m.host_model) continue;
    const model_means mm = model_per_step(r, &r->ranks[i]);
    fprintf(f, "  %6d", r->ranks[i].rank);
    cell(f, 10, 3, mm.host_busy * 1e3);
    cell(f, 10, 3, mm.host_work * 1e3);
    cell(f, 10, 3, mm.host_wait * 1e3);
    cell(f, 10, 3, mm.host_drain * 1e3);
    cell(f, 10, 3, mm.alloc_time * 1e3);
    fputc('\n', f);
  }
}

static void print_model_tables(FILE *f, const fb_run_result *r) {
  bool any_alloc = false, any_host = false;
  for (int i = 0; i < r->nranks; i++) {
    fb_dev_model m;
    if (!rank_model(r, i, &m)) continue;
    any_alloc |= m.alloc_model;
    any_host |= m.host_model;
  }
  if (any_alloc) print_alloc_table(f, r);
  if (any_host) print_host_table(f, r);
}

static void print_ledger(FILE *f, const fb_run_result *r, const char *pred) {
  double psi = psi_bytes(r);
  fprintf(f, "#\n# Collective ledger per rank and step%s (mean over all steps; psi = %.0f "
             "params x %zu B = %.0f B)\n", pred, (double)r->model.numel,
          fb_dtype_size(r->cfg.param_dtype), psi);
  fprintf(f, "# %6s %-15s %16s %16s %16s %16s %10s %8s\n", "rank", "collective", "bytes", "wire",
          "intra-node", "inter-node", "time", "ratio");
  fprintf(f, "# %6s %-15s %16s %16s %16s %16s %10s %8s\n", "", "", "(B/step)", "(B/step)",
          "(wire B/step)", "(wire B/step)", "(ms)", "(x psi)");
  for (int i = 0; i < r->nranks; i++) {
    fb_rank_summary s;
    fb_report_summary(r, i, &s);
    int rows = 0;
    for (int c = 0; c < FB_NCOLL; c++) {
      if (s.coll_bytes[c] == 0 && s.coll_time_s[c] == 0) continue;
      fprintf(f, "  %6d %-15s %16.0f %16.0f %16.0f %16.0f", r->ranks[i].rank, fb_coll_name(c),
              s.coll_bytes[c], s.wire_bytes[c], s.wire_intra[c], s.wire_inter[c]);
      cell(f, 10, 3, s.coll_time_s[c] * 1e3);
      cell(f, 8, 4, psi > 0 ? s.coll_bytes[c] / psi : NAN);
      fputc('\n', f);
      rows++;
    }
    double tb = sum_colls(s.coll_bytes);
    fprintf(f, "  %6d %-15s %16.0f %16.0f %16.0f %16.0f", r->ranks[i].rank,
            rows ? "total" : "total (none)", tb, sum_colls(s.wire_bytes), sum_colls(s.wire_intra),
            sum_colls(s.wire_inter));
    cell(f, 10, 3, sum_colls(s.coll_time_s) * 1e3);
    cell(f, 8, 4, psi > 0 ? tb / psi : NAN);
    fputc('\n', f);
  }
}

static void print_scalar(FILE *f, double x, bool predicted) {
  if (isfinite(x)) fprintf(f, "%.6g", x);
  else fputs(predicted ? "n/a (predicted run)" : "n/a", f);
}

void fb_report_print(FILE *f, const fb_run_result *r) {
  const char *pred = r->predicted ? " (pred)" : "";
  const fb_run_config *c = &r->cfg;
  fprintf(f, "# fsdpbench report: model %s, strategy %s, backend %s, comm %s, world %d\n",
          c->model, c->strategy, r->backend, r->comm, r->world);
  fprintf(f, "# batch %d x seq %d (%lld tokens/step), micro-batch %d, %d steps, params %s, "
             "reduce %s, hardware %s, peak %.3f TFLOP/s per rank (%s)\n",
          c->batch, c->seq, (long long)r->tokens_per_step, c->micro_batch, r->nsteps,
          fb_dtype_name(c->param_dtype), fb_dtype_name(c->reduce_dtype),
          r->hardware[0] ? r->hardware : "-", r->peak_flops / 1e12, fb_dtype_name(c->param_dtype));
  if (r->peak_src[0]) /* the denominator of every "% of peak": a profile's figure, not measured */
    fprintf(f, "# peak: %s\n", r->peak_src);
  if (r->predicted)
    fprintf(f, "# PREDICTED: simulated backend; every time, rate and FLOP/s figure below is a "
               "prediction of the cost model (memory is exact by construction)\n");
  print_time_table(f, r, pred);
  print_mem_table(f, r, pred);
  print_model_tables(f, r);
  print_ledger(f, r, pred);
  fprintf(f, "#\n");
  if (r->nsteps > 0) {
    int last = r->nsteps - 1;
    fprintf(f, "loss: first ");
    print_scalar(f, r->loss ? r->loss[0] : NAN, r->predicted);
    fprintf(f, " (step %d), last ", fb_step_number(r->first_step));
    print_scalar(f, r->loss ? r->loss[last] : NAN, r->predicted);
    fprintf(f, " (step %d)\ngrad norm: first ", fb_step_number(r->first_step + last));
    print_scalar(f, r->grad_norm ? r->grad_norm[0] : NAN, r->predicted);
    fprintf(f, ", last ");
    print_scalar(f, r->grad_norm ? r->grad_norm[last] : NAN, r->predicted);
    fputc('\n', f);
  }
  if (isfinite(r->param_sum)) fprintf(f, "final param sum: %.17g\n", r->param_sum);
  else fprintf(f, "final param sum: n/a (predicted run)\n");
}

/* ---- files -------------------------------------------------------------------------------- */

/* CSV number: empty when not finite. */
static void csv_num(FILE *f, double x) {
  if (isfinite(x)) fprintf(f, ",%.9g", x);
  else fputs(",", f);
}

static void csv_summary_row(FILE *f, const fb_run_result *r, const fb_rank_summary *s,
                            double peak, double persistent) {
  csv_num(f, s->step_s * 1e3);
  csv_num(f, s->tokens_per_s);
  csv_num(f, s->tokens_per_s_rank);
  csv_num(f, s->tflops);
  csv_num(f, s->peak_pct);
  csv_num(f, s->compute_s * 1e3);
  csv_num(f, s->comm_s * 1e3);
  csv_num(f, s->exposed_s * 1e3);
  csv_num(f, s->overlap);
  fprintf(f, ",%.0f,%.0f,%.0f,%.0f,%d\n", peak, persistent, sum_colls(s->coll_bytes),
          sum_colls(s->wire_bytes), r->predicted ? 1 : 0);
}

/* Opens DIR/NAME for this process's records. A process that does not hold rank 0 (rank r of
 * an MPI or NCCL run: each process holds its own rank) writes DIR/rank<r>_NAME, as its trace
 * does, so processes sharing DIR do not overwrite each other; rank 0 keeps the plain names. */
static fb_status open_out(const char *dir, const fb_run_result *r, const char *name, FILE **f) {
  char path_name[256];
  if (r->nranks > 0 && r->ranks[0].rank != 0)
    snprintf(path_name, sizeof path_name, "rank%d_%s", r->ranks[0].rank, name);
  else
    snprintf(path_name, sizeof path_name, "%s", name);
  return fb_json_open(dir, path_name, f);
}

static fb_status write_summary_csv(const char *dir, const fb_run_result *r) {
  FILE *f;
  FB_TRY(open_out(dir, r, "summary.csv", &f));
  fputs("rank,step_ms,tokens_per_s,tokens_per_s_rank,tflops,peak_pct,compute_ms,comm_ms,"
        "exposed_ms,overlap,peak_bytes,persistent_bytes,coll_bytes,wire_bytes,predicted\n", f);
  double peak = 0, pers = 0;
  for (int i = 0; i < r->nranks; i++) {
    fb_rank_summary s;
    fb_report_summary(r, i, &s);
    fprintf(f, "%d", r->ranks[i].rank);
    csv_summary_row(f, r, &s, (double)r->ranks[i].mem.peak_total,
                    (double)r->ranks[i].persistent_bytes);
    peak += (double)r->ranks[i].mem.peak_total;
    pers += (double)r->ranks[i].persistent_bytes;
  }
  fb_rank_summary m;
  fb_report_summary(r, -1, &m);
  fputs("mean", f);
  csv_summary_row(f, r, &m, r->nranks ? peak / r->nranks : 0, r->nranks ? pers / r->nranks : 0);
  return fb_json_close(f, "summary.csv");
}

static double step_tflops(const fb_run_result *r, double wall) {
  int world = r->world > 0 ? r->world : 1;
  return wall > 0 ? r->model_flops_per_step / world / wall / 1e12 : NAN;
}

static fb_status write_steps_csv(const char *dir, const fb_run_result *r) {
  FILE *f;
  FB_TRY(open_out(dir, r, "steps.csv", &f));
  fputs("rank,step,wall_ms,compute_ms,comm_ms,exposed_ms,tflops,loss,grad_norm,lr", f);
  for (int c = 0; c < FB_NCOLL; c++) fprintf(f, ",%s_bytes", fb_coll_name(c));
  fputc('\n', f);
  for (int i = 0; i < r->nranks; i++)
    for (int k = 0; k < r->nsteps; k++) {
      const fb_step_stats *s = &r->ranks[i].steps[k];
      fprintf(f, "%d,%d", r->ranks[i].rank, fb_step_number(r->first_step + k));
      csv_num(f, s->wall * 1e3);
      csv_num(f, s->compute * 1e3);
      csv_num(f, s->comm * 1e3);
      csv_num(f, s->exposed_comm * 1e3);
      csv_num(f, step_tflops(r, s->wall));
      csv_num(f, r->loss ? r->loss[k] : NAN);
      csv_num(f, r->grad_norm ? r->grad_norm[k] : NAN);
      csv_num(f, r->lr ? r->lr[k] : NAN);
      for (int c = 0; c < FB_NCOLL; c++) fprintf(f, ",%.0f", s->coll_bytes[c]);
      fputc('\n', f);
    }
  return fb_json_close(f, "steps.csv");
}

static fb_status write_memory_csv(const char *dir, const fb_run_result *r) {
  FILE *f;
  FB_TRY(open_out(dir, r, "memory.csv", &f));
  fputs("rank,category,peak_bytes,at_peak_bytes,final_bytes\n", f);
  for (int i = 0; i < r->nranks; i++) {
    const fb_mem_stats *m = &r->ranks[i].mem;
    for (int c = 0; c < FB_MEM_NCAT; c++)
      fprintf(f, "%d,%s,%lld,%lld,%lld\n", r->ranks[i].rank, fb_mem_cat_name((fb_mem_cat)c),
              (long long)m->peak[c], (long long)m->at_peak[c], (long long)m->cur[c]);
    fprintf(f, "%d,total,%lld,%lld,%lld\n", r->ranks[i].rank, (long long)m->peak_total,
            (long long)m->peak_total, (long long)m->cur_total);
    fb_dev_model dm;
    if (rank_model(r, i, &dm) && dm.alloc_model)
      fprintf(f, "%d,reserved_predicted,%lld,%lld,%lld\n", r->ranks[i].rank,
              (long long)dm.reserved_peak, (long long)dm.reserved_at_alloc_peak,
              (long long)dm.reserved);
  }
  return fb_json_close(f, "memory.csv");
}

static fb_status write_ledger_csv(const char *dir, const fb_run_result *r) {
  FILE *f;
  FB_TRY(open_out(dir, r, "ledger.csv", &f));
  fputs("rank,coll,bytes_per_step,wire_bytes_per_step,time_ms_per_step,psi_ratio,"
        "intra_node_wire_bytes_per_step,inter_node_wire_bytes_per_step\n", f);
  double psi = psi_bytes(r);
  for (int i = 0; i < r->nranks; i++) {
    fb_rank_summary s;
    fb_report_summary(r, i, &s);
    for (int c = 0; c < FB_NCOLL; c++) {
      if (s.coll_bytes[c] == 0 && s.coll_time_s[c] == 0) continue;
      fprintf(f, "%d,%s,%.0f,%.0f", r->ranks[i].rank, fb_coll_name(c), s.coll_bytes[c],
              s.wire_bytes[c]);
      csv_num(f, s.coll_time_s[c] * 1e3);
      csv_num(f, psi > 0 ? s.coll_bytes[c] / psi : NAN);
      fprintf(f, ",%.0f,%.0f\n", s.wire_intra[c], s.wire_inter[c]);
    }
  }
  return fb_json_close(f, "ledger.csv");
}

/* JSON "key": value helpers (a leading comma unless first). */
static void jkey(FILE *f, bool *first, const char *k) {
  if (!*first) fputc(',', f);
  *first = false;
  fb_json_str(f, k);
  fputc(':', f);
}
static void jnum(FILE *f, bool *first, const char *k, double x) {
  jkey(f, first, k);
  fb_json_num(f, x);
}
static void jstr(FILE *f, bool *first, const char *k, const char *v) {
  jkey(f, first, k);
  fb_json_str(f, v);
}

static void json_summary_fields(FILE *f, bool *first, const fb_rank_summary *s) {
  jnum(f, first, "step_ms", s->step_s * 1e3);
  jnum(f, first, "tokens_per_s", s->tokens_per_s);
  jnum(f, first, "tokens_per_s_rank", s->tokens_per_s_rank);
  jnum(f, first, "tflops", s->tflops);
  jnum(f, first, "peak_pct", s->peak_pct);
  jnum(f, first, "compute_ms", s->compute_s * 1e3);
  jnum(f, first, "comm_ms", s->comm_s * 1e3);
  jnum(f, first, "exposed_ms", s->exposed_s * 1e3);
  jnum(f, first, "overlap", s->overlap);
  jnum(f, first, "coll_bytes", sum_colls(s->coll_bytes));
  jnum(f, first, "wire_bytes", sum_colls(s->wire_bytes));
  jnum(f, first, "wire_bytes_intra_node", sum_colls(s->wire_intra));
  jnum(f, first, "wire_bytes_inter_node", sum_colls(s->wire_inter));
}

static void json_array(FILE *f, bool *first, const char *k, const double *v, int n) {
  jkey(f, first, k);
  fputc('[', f);
  for (int i = 0; i < n; i++) {
    if (i) fputc(',', f);
    fb_json_num(f, v ? v[i] : NAN);
  }
  fputc(']', f);
}

static void json_config(FILE *f, const fb_run_result *r) {
  const fb_run_config *c = &r->cfg;
  bool first = true;
  fputc('{', f);
  jstr(f, &first, "model", c->model);
  jstr(f, &first, "strategy", c->strategy);
  jstr(f, &first, "backend", r->backend);
  jstr(f, &first, "comm", r->comm);
  jstr(f, &first, "hardware", r->hardware);
  jnum(f, &first, "world", r->world);
  jnum(f, &first, "batch", c->batch);
  jnum(f, &first, "micro_batch", c->micro_batch);
  jnum(f, &first, "seq", c->seq);
  jnum(f, &first, "steps", r->nsteps);
  jstr(f, &first, "param_dtype", fb_dtype_name(c->param_dtype));
  jstr(f, &first, "reduce_dtype", fb_dtype_name(c->reduce_dtype));
  jstr(f, &first, "mesh", c->mesh); /* --mesh RxS as given; "" = the strategy's own layout */
  jstr(f, &first, "optimizer", c->optimizer);
  jnum(f, &first, "lr", c->lr);
  jnum(f, &first, "seed", (double)c->seed);
  jnum(f, &first, "threads", c->threads);
  jstr(f, &first, "blas", r->blas);
  jnum(f, &first, "params", (double)r->model.numel);
  jnum(f, &first, "peak_flops", r->peak_flops);
  jnum(f, &first, "tokens_per_step", (double)r->tokens_per_step);
  jnum(f, &first, "model_flops_per_step", r->model_flops_per_step);
  jkey(f, &first, "predicted");
  fputs(r->predicted ? "true" : "false", f);
  fputc('}', f);
}

static void json_rank(FILE *f, const fb_run_result *r, int i) {
  const fb_rank_result *rk = &r->ranks[i];
  fb_rank_summary s;
  fb_report_summary(r, i, &s);
  bool first = true;
  fputc('{', f);
  jnum(f, &first, "rank", rk->rank);
  json_summary_fields(f, &first, &s);
  jnum(f, &first, "peak_bytes", (double)rk->mem.peak_total);
  jnum(f, &first, "persistent_bytes", (double)rk->persistent_bytes);
  jnum(f, &first, "zero3_imbalance", rk->zero3_imbalance);
  jkey(f, &first, "memory");
  fputc('{', f);
  bool f2 = true;
  for (int c = 0; c < FB_MEM_NCAT; c++) {
    jkey(f, &f2, fb_mem_cat_name((fb_mem_cat)c));
    fprintf(f, "{\"peak\":%lld,\"at_peak\":%lld,\"final\":%lld}", (long long)rk->mem.peak[c],
            (long long)rk->mem.at_peak[c], (long long)rk->mem.cur[c]);
  }
  jkey(f, &f2, "total");
  fprintf(f, "{\"peak\":%lld,\"at_peak\":%lld,\"final\":%lld}", (long long)rk->mem.peak_total,
          (long long)rk->mem.peak_total, (long long)rk->mem.cur_total);
  fputc('}', f);
  fb_dev_model dm;
  const bool model = rank_model(r, i, &dm);
  if (model) {
    const model_means mm = model_per_step(r, rk);
    bool f3 = true;
    if (dm.alloc_model) {
      jkey(f, &first, "allocator");
      fputc('{', f);
      jstr(f, &f3, "label", "predicted (allocator model)");
      jnum(f, &f3, "allocated_peak", (double)rk->mem.peak_total);
      jnum(f, &f3, "reserved_peak", (double)dm.reserved_peak);
      jnum(f, &f3, "reserved_final", (double)dm.reserved);
      jnum(f, &f3, "reserved_at_allocated_peak", (double)dm.reserved_at_alloc_peak);
      jnum(f, &f3, "held_by_record_stream_at_reserved_peak", (double)dm.held_at_reserved_peak);
      jnum(f, &f3, "segments_peak", (double)dm.segments_peak);
      jnum(f, &f3, "num_device_alloc", (double)dm.device_allocs);
      jnum(f, &f3, "num_device_free", (double)dm.device_frees);
      jnum(f, &f3, "num_alloc_retries", (double)dm.alloc_retries);
      jnum(f, &f3, "num_ooms", (double)dm.ooms);
      jnum(f, &f3, "retry_ms_per_step", mm.retry_time * 1e3);
      jnum(f, &f3, "cuda_malloc_ms_per_step", mm.alloc_time * 1e3);
      fputc('}', f);
    }
    if (dm.host_model) {
      f3 = true;
      jkey(f, &first, "host");
      fputc('{', f);
      jstr(f, &f3, "label", "predicted (host model)");
      jnum(f, &f3, "busy_ms_per_step", mm.host_busy * 1e3);
      jnum(f, &f3, "hooks_ms_per_step", mm.host_work * 1e3);
      jnum(f, &f3, "stalls_ms_per_step", mm.host_wait * 1e3);
      jnum(f, &f3, "drains_ms_per_step", mm.host_drain * 1e3);
      fputc('}', f);
    }
  }
  jkey(f, &first, "ledger");
  fputc('{', f);
  f2 = true;
  for (int c = 0; c < FB_NCOLL; c++) {
    jkey(f, &f2, fb_coll_name(c));
    bool f3 = true;
    fputc('{', f);
    jnum(f, &f3, "bytes_per_step", s.coll_bytes[c]);
    jnum(f, &f3, "wire_bytes_per_step", s.wire_bytes[c]);
    jnum(f, &f3, "intra_node_wire_bytes_per_step", s.wire_intra[c]);
    jnum(f, &f3, "inter_node_wire_bytes_per_step", s.wire_inter[c]);
    jnum(f, &f3, "time_ms_per_step", s.coll_time_s[c] * 1e3);
    fputc('}', f);
  }
  fputc('}', f);
  jkey(f, &first, "steps");
  fputc('[', f);
  for (int k = 0; k < r->nsteps; k++) {
    const fb_step_stats *st = &rk->steps[k];
    bool f3 = true;
    fputs(k ? ",{" : "{", f);
    jnum(f, &f3, "step", fb_step_number(r->first_step + k));
    jnum(f, &f3, "wall_ms", st->wall * 1e3);
    jnum(f, &f3, "compute_ms", st->compute * 1e3);
    jnum(f, &f3, "comm_ms", st->comm * 1e3);
    jnum(f, &f3, "exposed_ms", st->exposed_comm * 1e3);
    jnum(f, &f3, "flops", st->flops);
    jnum(f, &f3, "n_ops", st->n_ops);
    if (model) {
      jnum(f, &f3, "host_busy_ms", st->host_busy * 1e3);
      jnum(f, &f3, "host_hooks_ms", st->host_work * 1e3);
      jnum(f, &f3, "host_stalls_ms", st->host_wait * 1e3);
      jnum(f, &f3, "host_drains_ms", st->host_drain * 1e3);
      jnum(f, &f3, "cuda_malloc_ms", st->alloc_time * 1e3);
      jnum(f, &f3, "alloc_retries", (double)st->alloc_retries);
      jnum(f, &f3, "retry_ms", st->retry_time * 1e3);
    }
    jkey(f, &f3, "coll_bytes");
    fputc('{', f);
    bool f4 = true;
    for (int c = 0; c < FB_NCOLL; c++) jnum(f, &f4, fb_coll_name(c), st->coll_bytes[c]);
    fputc('}', f);
    fputc('}', f);
  }
  fputs("]}", f);
}

static fb_status write_report_json(const char *dir, const fb_run_result *r) {
  FILE *f;
  FB_TRY(open_out(dir, r, "report.json", &f));
  bool first = true;
  fputc('{', f);
  jkey(f, &first, "config");
  json_config(f, r);
  jkey(f, &first, "predicted");
  fputs(r->predicted ? "true" : "false", f);
  jnum(f, &first, "world", r->world);
  jnum(f, &first, "nsteps", r->nsteps);
  jnum(f, &first, "wall_s", r->wall_s);
  jnum(f, &first, "startup_ms", r->startup_ms);
  jnum(f, &first, "first_step_unix_s", r->first_step_unix_s);
  jnum(f, &first, "param_sum", r->param_sum);
  json_array(f, &first, "loss", r->loss, r->nsteps);
  json_array(f, &first, "grad_norm", r->grad_norm, r->nsteps);
  json_array(f, &first, "lr", r->lr, r->nsteps);
  fb_rank_summary m;
  fb_report_summary(r, -1, &m);
  jkey(f, &first, "mean");
  fputc('{', f);
  bool f2 = true;
  json_summary_fields(f, &f2, &m);
  fputc('}', f);
  jkey(f, &first, "ranks");
  fputc('[', f);
  for (int i = 0; i < r->nranks; i++) {
    if (i) fputc(',', f);
    json_rank(f, r, i);
  }
  fputs("]}\n", f);
  return fb_json_close(f, "report.json");
}

fb_status fb_report_write(const char *dir, const fb_run_result *r) {
  FB_TRY(fb_mkdir_p(dir));
  FB_TRY(write_summary_csv(dir, r));
  FB_TRY(write_steps_csv(dir, r));
  FB_TRY(write_memory_csv(dir, r));
  FB_TRY(write_ledger_csv(dir, r));
  FB_TRY(write_report_json(dir, r));
  return FB_OK;
}

fb_status fb_report_check_out(const char *dir) {
  static const char *const names[] = {"summary.csv", "steps.csv", "memory.csv", "ledger.csv",
                                      "report.json", "trace.json", "memory_snapshot.pickle",
                                      NULL};
  return fb_check_output_dir(dir, names, "--out");
}

void fb_report_why_head(FILE *f, const char *label) {
  fprintf(f, "%-34s %9s %8s %8s %8s %8s | %8s %8s %8s %8s | %8s %8s %8s | %8s | %9s %9s\n",
          label, "step", "gemm", "attn", "elemwise", "optim", "exp AG", "exp RS", "exp AR",
          "exp bc+r", "host stl", "malloc", "retries", "idle", "alloc GiB", "resv GiB");
}

void fb_report_why_row(FILE *f, const char *label, const fb_step_stats *w, int64_t allocated,
                       int64_t reserved) {
  double idle = w->wall - w->compute - w->exposed_comm;
  char resv[32];
  if (reserved > 0) snprintf(resv, sizeof resv, "%9.2f", (double)reserved / 1073741824.0);
  else snprintf(resv, sizeof resv, "%9s", "-");
  fprintf(f, "%-34s %9.2f %8.2f %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f %8.2f | %8.2f %8.2f %8.2f "
             "| %8.2f | %9.2f %s\n",
          label, w->wall * 1e3, w->kind_time[FB_OP_GEMM] * 1e3, w->kind_time[FB_OP_ATTN] * 1e3,
          w->kind_time[FB_OP_MEM] * 1e3, w->kind_time[FB_OP_OPTIM] * 1e3,
          w->exposed_coll[FB_COLL_ALL_GATHER] * 1e3, w->exposed_coll[FB_COLL_REDUCE_SCATTER] * 1e3,
          w->exposed_coll[FB_COLL_ALL_REDUCE] * 1e3,
          (w->exposed_coll[FB_COLL_BROADCAST] + w->exposed_coll[FB_COLL_REDUCE]) * 1e3,
          w->host_wait * 1e3, w->alloc_time * 1e3, w->retry_time * 1e3,
          (idle > 0 ? idle : 0) * 1e3, (double)allocated / 1073741824.0, resv);
}
