/* How much scratch the attention kernels need. On the cpu each of FB_ATTN_SLOTS slots holds
 * one block of ATT_BQ (64) query rows against all T keys twice (P and dP) plus 64 row terms.
 * The slot count is a constant, not the machine's processor count, so the figure (and every
 * memory figure it enters, the simulator's included) is the same on every host; the attention
 * ops run at most that many threads (one slot each) and each thread loops over its share of
 * the (batch, head) tasks. A task's result does not depend on which slot or thread ran it, so
 * the slot count changes speed only, never a bit of the result.
 * The figure is the cpu kernels' need and is returned for every device (d may be NULL); it is
 * the same for fp32 and bf16 activations (the bf16 ops run the fp32 attention).
 * It sits with the kernel interface (kernels.h), below the ops and every backend: the figure is
 * the interface's promise to the attention kernels, which engine/ops implements within. */
#include "kernels.h"

#define ATT_BQ 64 /* must equal engine/ops/ops_impl.h */
#define FB_ATTN_SLOTS 8

int fb_ops_attn_slots(void) { return FB_ATTN_SLOTS; }

size_t fb_ops_attn_scratch_elems(int T) {
  size_t bq = (size_t)(T < ATT_BQ ? T : ATT_BQ);
  return 2 * bq * (size_t)T + bq;
}

size_t fb_attention_scratch_bytes(const fb_device *d, int B, int T, int H, int KVH, int hd) {
  (void)d, (void)B, (void)H, (void)KVH, (void)hd;
  return (size_t)fb_ops_attn_slots() * fb_ops_attn_scratch_elems(T) * sizeof(float);
}
