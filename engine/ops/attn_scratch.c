/* How much scratch the attention kernels need. On the cpu each OpenMP slot holds one block of
 * ATT_BQ (64) query rows against all T keys twice (P and dP) plus 64 row terms; the number of
 * slots is the number of online processors of the machine, and the attention ops never use
 * more threads than that, so the size does not depend on a thread setting that may change
 * between sizing and use, nor on the CPUs a launcher binds the process to (omp_get_num_procs
 * follows the binding: under mpirun a rank saw 1 slot where the simulator counted 2).
 * The figure is the cpu kernels' need and is returned for every device (d may be NULL). */
#include <unistd.h>

#include "ops.h"

#define ATT_BQ 64 /* must equal ops_impl.h */

int fb_ops_attn_slots(void) {
  long p = sysconf(_SC_NPROCESSORS_ONLN);
  return p < 1 ? 1 : (p > 512 ? 512 : (int)p);
}

size_t fb_ops_attn_scratch_elems(int T) {
  size_t bq = (size_t)(T < ATT_BQ ? T : ATT_BQ);
  return 2 * bq * (size_t)T + bq;
}

size_t fb_attention_scratch_bytes(const fb_device *d, int B, int T, int H, int KVH, int hd) {
  (void)d, (void)B, (void)H, (void)KVH, (void)hd;
  return (size_t)fb_ops_attn_slots() * fb_ops_attn_scratch_elems(T) * sizeof(float);
}
