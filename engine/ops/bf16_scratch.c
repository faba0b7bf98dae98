/* Per-thread growable host scratch for the cpu kernels' bf16 path (ops_bf16.c), which widens
 * bf16 operands to fp32, runs the fp32 op and rounds the results back. Kernels get no
 * allocator, so each calling thread (a rank's compute thread) owns one block here: it grows
 * to the largest request that thread made (rounded up to 1 MiB), is reused by every later
 * call, and is freed when the thread exits (a pthread key destructor); the main thread's block
 * is kept until the process ends. A block is only valid until the same thread asks again, so
 * a kernel takes all it needs in one request. OpenMP workers inside a kernel never ask.
 * This memory is host scratch of the cpu backend: the device allocator, the memory timeline
 * and --mem-limit do not see it (it is at most a few fp32 copies of one kernel's operands).
 * Does not zero the memory, and never shrinks a block. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "ops_bf16.h"

#define SCRATCH_ALIGN 64
#define SCRATCH_GRAIN ((size_t)1 << 20)

static _Thread_local void *tl_block;
static _Thread_local size_t tl_cap;
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static int scratch_key_ok;

static void scratch_free(void *p) { free(p); }
static void scratch_key_init(void) {
  scratch_key_ok = pthread_key_create(&scratch_key, scratch_free) == 0;
}

void *fb_ops_scratch(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes <= tl_cap) return tl_block;
  if (bytes > SIZE_MAX - SCRATCH_GRAIN) return NULL;
  size_t cap = (bytes + SCRATCH_GRAIN - 1) / SCRATCH_GRAIN * SCRATCH_GRAIN;
  pthread_once(&scratch_once, scratch_key_init);
  void *p = aligned_alloc(SCRATCH_ALIGN, cap);
  if (!p) return NULL;
  /* the key's value is what the destructor frees at thread exit: set it before the old
   * block goes, so it never names freed memory */
  if (scratch_key_ok && pthread_setspecific(scratch_key, p) != 0) {
    free(p);
    return NULL;
  }
  free(tl_block);
  tl_block = p;
  tl_cap = cap;
  return p;
}

