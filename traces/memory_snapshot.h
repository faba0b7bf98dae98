/* Memory snapshot writer: each rank's memory timeline in the pickle format of PyTorch's
 * torch.cuda.memory._snapshot(), so PyTorch's own tools open it:
 *   python -m torch.cuda._memory_viz trace_plot rank0_memory_snapshot.pickle -o t.html
 * (also stats, trace, segment_plot, segments), or drag it onto pytorch.org/memory_viz.
 *
 * File: <dir>/rank<r>_memory_snapshot.pickle per rank held (dir is created). Content:
 *   {"device_traces": [[{"action": "segment_alloc" | "alloc" | "free_requested" |
 *                        "free_completed", "addr", "size", "stream", "time_us", "category",
 *                        "frames": [{"name", "filename", "line"}, ...]}, ...]],
 *    "segments": [{"device", "address", "total_size", "allocated_size", "active_size",
 *                  "requested_size", "stream", "segment_type", "segment_pool_id",
 *                  "is_expandable", "frames", "blocks": [{"address", "size",
 *                  "requested_size", "state", "frames"}, ...]}, ...]}
 * What is recorded vs modelled: the allocations, their sizes, categories, owners and host
 * times are the run's own (the recorder's memory events, kept whole under --mem-snapshot).
 * Addresses, segments and blocks are not: the alloc/free sequence is replayed on the project's
 * model of PyTorch's caching allocator (engine/sim/caching_allocator.h: 512 B blocks, 2 MiB /
 * 20 MiB segments, best fit, splitting), on one stream, without record_stream and without a
 * capacity (no retries, so no segment is ever freed). The snapshot stops at the end of the
 * run's last step (the buffers the run frees while tearing down are left out): "segments"
 * are the model's state there, so blocks and trace agree (every block lies in its segment,
 * block sizes sum to the segment's, each free follows its alloc).
 * Frame 0 of an entry names the strategy, the op and the unit it belongs to (for an alloc
 * the next op the rank issued, for a free the last one) and the category, e.g.
 * "fsdp all_gather layers.3 [param_full]", with the buffer's label as its file name; frame 1
 * names the rank and the step. It does not write the Chrome trace (chrome_trace.h). */
#ifndef FB_MEMORY_SNAPSHOT_H
#define FB_MEMORY_SNAPSHOT_H
#include "../engine/exec/runner.h"

fb_status fb_memsnap_write(const char *dir, const fb_run_result *r);

#endif
