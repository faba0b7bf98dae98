/* Memory snapshot writer: the rank's memory timeline (every tagged alloc / free the recorder
 * kept) in the JSON form of PyTorch's torch.cuda.memory._snapshot(), which the viewer at
 * pytorch.org/memory_viz loads (drag the file onto the page; "Active Memory Timeline").
 *
 * File: <dir>/rank<r>_memory_snapshot.json per rank held (dir is created). Content:
 *   {"segments": [...one segment per allocation still live at the end, one active block...],
 *    "device_traces": [[{"action": "segment_alloc" | "alloc" | "free_requested" |
 *                        "free_completed" | "segment_free", "addr", "size", "stream",
 *                        "time_us", "frames": [{"filename", "line", "name"}]} ...]]}
 * Addresses are synthetic (fsdpbench allocations have no meaningful address on sim; a bump
 * counter keeps live blocks disjoint). Frames name who allocated: the buffer's label (e.g.
 * "fsdp.gather") with the category as the file name ("param_full"). The timeline is complete
 * only when the run kept every memory event (--mem-snapshot); otherwise it covers the traced
 * steps. It does not write the Chrome trace (chrome_trace.h). */
#ifndef FB_MEMORY_SNAPSHOT_H
#define FB_MEMORY_SNAPSHOT_H
#include "../engine/exec/runner.h"

fb_status fb_memsnap_write(const char *dir, const fb_run_result *r);

#endif
