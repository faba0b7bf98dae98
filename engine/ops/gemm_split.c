/* The processor count the CPU matrix product sizes its panels for (ops_impl.h, fb_gemm): the
 * machine's online processors (sysconf), read once. Neither taskset, a cpuset, mpirun's core
 * binding nor a thread setting changes it, so the panel split, and with it every bit of a
 * product, depends only on the shape and the machine. It is not the number of threads that
 * run: that is the caller's OpenMP setting. */
#include <unistd.h>

#include "ops.h"

int fb_ops_gemm_split_procs(void) {
  static int procs; /* benign race: every thread computes the same value */
  if (procs < 1) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    procs = n < 1 ? 1 : n > 4096 ? 4096 : (int)n;
  }
  return procs;
}
