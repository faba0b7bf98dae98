/* Chrome-trace writer: turns the recorder's kept events of every rank held by this process
 * into the Chrome trace event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Files: <dir>/trace.json when every rank of the run lives in this process (local / sim
 * communicators), else <dir>/rank<r>_trace.json for each rank held (mpi / nccl, one process
 * per rank). The directory is created.
 *
 * Layout: one process per rank (pid = rank, named "rank N"), one thread per recorder track
 * (tid = track id + 1, named "compute", "comm", "host" ...); ops are complete events ("X")
 * with ts / dur in microseconds from the run's start (the earliest kept event of the ranks
 * written), category = op kind ("gemm", "attn", "mem", "optim", "span") or the collective's
 * name, args {bytes, flops, unit, step, micro}. Slices on one track nest properly: a start
 * that falls inside an earlier slice which ends first is moved to that slice's end (timer
 * noise). A "steps" thread (sorted first) holds one slice per traced step, from the step's
 * begin to its end (like torch.profiler's ProfilerStep#N). Memory is a counter ("C") per
 * rank named "memory (MiB)" with one series per category, plus "memory total (MiB)".
 * It does not capture anything itself. */
#ifndef FB_CHROME_TRACE_H
#define FB_CHROME_TRACE_H
#include "../engine/exec/runner.h"

fb_status fb_trace_write(const char *dir, const fb_run_result *r);

/* Two runs of the same configuration in one file, side by side: a's ranks as processes
 * "rank N<a_suffix>" (pid N), b's as "rank N<b_suffix>" (pid N + FB_TRACE_PAIR_PID_OFFSET),
 * each on its own time origin, with the same track names (used by `fsdpbench validate` to put
 * a measured and a predicted run next to each other). */
#define FB_TRACE_PAIR_PID_OFFSET 100
fb_status fb_trace_write_pair(const char *dir, const char *name, const fb_run_result *a,
                              const char *a_suffix, const fb_run_result *b,
                              const char *b_suffix);

#endif
