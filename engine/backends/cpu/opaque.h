/* The opaque device's guard: what makes the cpu kernels behave like a GPU that the host cannot
 * touch (--backend cpu-opaque, device_cpu.c with a guard attached).
 *  - Memory: every allocation is its own anonymous mapping, PROT_NONE between device
 *    operations. An op opens (read/write) the allocations its operands lie in for as long as
 *    it runs (a count per allocation, so overlapping ops on two streams stay open); a host
 *    read or write of device memory anywhere else faults, as it would on a GPU. A released
 *    block's mapping is kept for the next allocation of its page-rounded size, as a GPU's
 *    caching allocator keeps its memory: its pages stay faulted in and it holds the old
 *    block's bytes, not zeros (a fresh mapping per allocation made the op that first wrote it
 *    pay ~1.7 us a page: fsdp's gathers into new unit buffers ran 2.3x the reduce-scatters of
 *    their size). Kept mappings never exceed the peak of the mapped bytes in use.
 *  - Order: a vector clock per stream and one for the host. An op on stream s is ordered
 *    after an earlier op on stream t only through an event (record on t, wait on s) or a host
 *    sync (stream or event sync, a device-to-host copy) followed by issue; host program order
 *    alone orders nothing. Every op declares its operands (pointer, bytes, read/write); an
 *    access that conflicts with an unordered earlier access of overlapping bytes (either
 *    writes) is a missing wait, and a free not ordered after every use of the block is a
 *    stream-unsafe free. Both fail the run with the two ops named; the check is exact and does
 *    not depend on timing.
 * What it does not do: run kernels (the cpu kernels do, on the thread that issues them, after
 * the stream's earlier work), nor count memory (device.c does). Thread-safe. */
#ifndef FB_OPAQUE_H
#define FB_OPAQUE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../core/status.h"
#include "../../device/device.h"

#define FB_OPQ_STREAMS 8             /* streams one device may create */
#define FB_OPQ_HOST FB_OPQ_STREAMS   /* the host's slot in a clock */

typedef struct fb_opq_clock {
  uint64_t t[FB_OPQ_STREAMS + 1];
} fb_opq_clock;

typedef struct fb_opq fb_opq;

fb_status fb_opq_create(int rank, fb_opq **out);
/* Unmaps whatever is still mapped (blocks whose stream-ordered free never ran). */
void fb_opq_destroy(fb_opq *g);

/* A new protected block of `bytes` (page-rounded mapping). */
fb_status fb_opq_alloc(fb_opq *g, size_t bytes, fb_mem_cat cat, void **out);
/* Checks that every use of the block at p is ordered before a free issued on stream `s`
 * (-1 = by the host, immediately); a violation becomes the guard's sticky error and returns
 * false: the caller then keeps the block mapped (quarantined until the guard is destroyed) so
 * that the op still using it finishes and the run fails cleanly at its next sync. */
bool fb_opq_free_check(fb_opq *g, const void *p, int s);
/* Unmaps the block (after its stream reached the free). */
void fb_opq_release(fb_opq *g, void *p);

/* A new stream slot (0..FB_OPQ_STREAMS-1); FB_EUNSUPPORTED past the limit. */
fb_status fb_opq_stream_add(fb_opq *g, const char *name, int *idx);

/* An op named `name` issued on stream s uses these operands: checks them against earlier
 * unordered accesses and records them. FB_EINTERNAL naming both ops on a conflict, or when
 * an operand is not device memory. Advances s's clock. */
fb_status fb_opq_access(fb_opq *g, int s, const char *name, const fb_operand *v, int n);
/* Makes the operands' blocks accessible until the matching close. */
fb_status fb_opq_open(fb_opq *g, const fb_operand *v, int n);
void fb_opq_close(fb_opq *g, const fb_operand *v, int n);

/* Order: an event recorded on s captures s's clock; a stream wait merges it into s; the host
 * syncing on an event or a stream merges into the host's clock; ops issued afterwards
 * inherit the host's clock (fb_opq_access does that). */
void fb_opq_record(fb_opq *g, int s, fb_opq_clock *ev);
void fb_opq_wait(fb_opq *g, int s, const fb_opq_clock *ev);
void fb_opq_host_event(fb_opq *g, const fb_opq_clock *ev);
void fb_opq_host_stream(fb_opq *g, int s);

/* The first violation found by a free check (FB_OK while none): raised by the device at its
 * next sync, with the message. */
fb_status fb_opq_error(fb_opq *g);

#endif
