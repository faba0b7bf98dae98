/* Chrome-trace writer: turns the recorder's kept events of every rank held by this process
 * into the Chrome trace event JSON that Perfetto (ui.perfetto.dev) and chrome://tracing open.
 *
 * Files: <dir>/trace.json when every rank of the run lives in this process (local / sim
 * communicators), else <dir>/rank<r>_trace.json for each rank held (mpi / nccl, one process
 * per rank; `fsdpbench trace-merge` joins them). The directory is created. A run whose
 * schedule traced no step writes no file: one warning line on stderr (from the process that
 * holds rank 0).
 *
 * Layout: one process per rank (pid = rank, "process_name" "rank N", sort index N), one thread
 * per recorder track (tid = track id + 1, "thread_name" "compute", "comm", "host" ...).
 * Slices ("X", ts / dur in microseconds from the trace origin, the earliest kept event of the
 * ranks written) are named as a PyTorch user reads them (fb_model_op_name): a kernel by the
 * module of the parameter it applies ("layers.3.attention.wq", "h.3.mlp.c_fc"), other block
 * kernels "<unit>.<op>", a collective "<op> <unit>" ("all_gather layers.3"); args {op, bytes,
 * flops, unit, step, micro}. On the compute track, each run of kernels of one (unit, phase,
 * step, micro) sits inside a span "forward layers.3" / "backward ..." / "optimizer ..." (cat
 * "span"). Slices on one track nest properly: a start inside an earlier slice that ends first
 * is moved to that slice's end (timer noise). A "steps" thread (sorted first) holds one
 * "ProfilerStep#N" slice per traced step (cat "step"). Flow arrows ("s" at the collective,
 * "f" with bp "e" at the compute kernel, each at its slice's midpoint; id unique in the file)
 * go from a collective to the first compute kernel issued after the compute stream waited
 * for it. Memory is a counter ("C") per rank "memory (MiB)" with one series per category, plus
 * "memory total (MiB)". Step numbers (N, args.step) are fb_step_number: the log's.
 * otherData carries the run's configuration, "ranks" (the ranks in the file) and
 * "trace_origin_unix_ns" (CLOCK_REALTIME of ts 0: what trace-merge aligns files with).
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
