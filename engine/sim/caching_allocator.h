/* A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, default
 * configuration: no max_split_size, no garbage-collection threshold, no expandable segments),
 * replayed on the allocation calls a run makes. It holds no memory and no time of its own: the
 * caller (the sim device) passes the host time of each malloc and the time at which a
 * record_stream'd block's other stream finishes with it, and charges the time of the device
 * calls this reports (cudaMalloc, and on a retry a device-wide sync plus cudaFree).
 *
 * Rules, as in the source (see docs/simulator.md, "Caching allocator and host work"):
 *  - a request is rounded up to a multiple of 512 B (its block size); blocks of <= 1 MiB come
 *    from the small pool, larger ones from the large pool;
 *  - a new segment (cudaMalloc) is 2 MiB for a small block, 20 MiB for a block under 10 MiB,
 *    otherwise the block size rounded up to 2 MiB;
 *  - pools are per stream: a cached block serves only allocations on the stream it was
 *    allocated on; the smallest cached block that fits (lowest address among equals) is taken;
 *  - a block larger than the request is split when the remainder is >= 512 B (small pool) or
 *    > 1 MiB (large pool); free neighbours in a segment merge;
 *  - a block freed while another stream still uses it (record_stream) is held until that
 *    stream's work up to the free point is done AND a later malloc runs process_events;
 *  - when a cudaMalloc would exceed the capacity: every held block is released (after an
 *    event sync), every cached unsplit segment is cudaFree'd, and the cudaMalloc is retried
 *    (num_alloc_retries); if it still does not fit, a real run raises OutOfMemoryError (counted
 *    in num_ooms; the model goes on over capacity so the run can finish, and after that first
 *    OOM it only counts the mallocs that would not fit: a real run has stopped there).
 * It does not model expandable segments, max_split_size_mb, the garbage collector, CUDA graph
 * pools or memory used outside PyTorch (CUDA context, NCCL buffers). */
#ifndef FB_CACHING_ALLOCATOR_H
#define FB_CACHING_ALLOCATOR_H
#include <stdbool.h>
#include <stdint.h>

#include "../core/status.h"

#define FB_CCA_MIN_BLOCK ((int64_t)512)            /* kMinBlockSize */
#define FB_CCA_SMALL_SIZE ((int64_t)1 << 20)       /* kSmallSize: largest small request */
#define FB_CCA_SMALL_BUFFER ((int64_t)2 << 20)     /* kSmallBuffer: small-pool segment */
#define FB_CCA_MIN_LARGE_ALLOC ((int64_t)10 << 20) /* kMinLargeAlloc */
#define FB_CCA_LARGE_BUFFER ((int64_t)20 << 20)    /* kLargeBuffer: segment for 1-10 MiB */
#define FB_CCA_ROUND_LARGE ((int64_t)2 << 20)      /* kRoundLarge */

/* The block size of a request (round_size) and the segment a new block of that size gets
 * (get_allocation_size). */
int64_t fb_cca_block_size(int64_t bytes);
int64_t fb_cca_segment_size(int64_t block_size);

typedef struct fb_cca fb_cca;

/* Counters, as torch.cuda.memory_stats names them. Bytes unless said otherwise. */
typedef struct fb_cca_stats {
  int64_t allocated, allocated_peak;   /* block sizes of live allocations ("allocated_bytes") */
  int64_t requested;                   /* request sizes of live allocations */
  int64_t active, active_peak;         /* allocated + freed blocks held by record_stream */
  int64_t reserved, reserved_peak;     /* cudaMalloc'd segments ("reserved_bytes") */
  int64_t reserved_at_allocated_peak;  /* reserved when allocated last reached its peak */
  int64_t allocated_at_reserved_peak;  /* allocated and active when reserved peaked */
  int64_t active_at_reserved_peak;
  int64_t side_at_reserved_peak;       /* segments of streams other than stream 0 then */
  int64_t segments, segments_peak;
  int64_t num_device_alloc;            /* cudaMalloc calls that succeeded */
  int64_t num_device_free;             /* cudaFree calls */
  int64_t num_alloc_retries;           /* cudaMalloc retried after releasing the cache */
  int64_t num_sync_all_streams;        /* device-wide syncs (each retry) */
  int64_t num_ooms;                    /* retries that still did not fit */
  int64_t held;                        /* blocks currently held by record_stream */
} fb_cca_stats;

/* What one malloc did, for the caller to charge its time. */
typedef struct fb_cca_malloc_info {
  int64_t block;      /* bytes of the block handed out */
  int64_t segment;    /* > 0: a segment of this size was cudaMalloc'd for it */
  bool retried;       /* the first cudaMalloc failed: held blocks were synced and released,
                         cached segments freed, the cudaMalloc retried */
  int released;       /* segments cudaFree'd by that release */
  bool oom;           /* the retry failed too (a real run stops here) */
} fb_cca_malloc_info;

/* capacity: bytes cudaMalloc may hold in all (> 0). */
fb_status fb_cca_create(int64_t capacity, fb_cca **out);
void fb_cca_destroy(fb_cca *a);

/* Allocates `bytes` (> 0) on stream `stream` (>= 0, a small index chosen by the caller) under
 * `key` (non-zero, unique among live allocations). `now` is the host time of the call: held
 * blocks whose ready time is <= now are released first (process_events). */
fb_status fb_cca_malloc(fb_cca *a, uint64_t key, int64_t bytes, int stream, double now,
                        fb_cca_malloc_info *info);
/* Frees `key`. When `use_stream` is >= 0 and differs from the stream the block was allocated
 * on, the block is held (record_stream) until a malloc at a time >= ready_at; otherwise it
 * returns to its pool at once (stream order makes that safe). Unknown keys are ignored. */
void fb_cca_free(fb_cca *a, uint64_t key, int use_stream, double ready_at);
/* Bytes the block of a live allocation occupies (0 when unknown). */
int64_t fb_cca_block_of(const fb_cca *a, uint64_t key);
/* Address of a live allocation's block (-1 when unknown). Addresses are synthetic: segments
 * are laid out one after another from 4 GiB, so a new segment's first block starts at the
 * segment's address. */
int64_t fb_cca_addr_of(const fb_cca *a, uint64_t key);
void fb_cca_get_stats(const fb_cca *a, fb_cca_stats *out);

/* One block of the model's present state (torch.cuda.memory._snapshot()'s segments/blocks). */
typedef struct fb_cca_block {
  int64_t segment, segment_size; /* the segment it lies in: address and size */
  int64_t addr, size;
  int64_t requested;  /* bytes asked for: allocated or held blocks, 0 for cached free ones */
  int stream;
  bool small;         /* small pool (2 MiB segments) */
  bool allocated;     /* a live allocation ("active_allocated") */
  bool held;          /* freed, waiting on another stream ("active_pending_free") */
  uint64_t key;       /* allocated or held: its key; 0 otherwise */
} fb_cca_block;
typedef fb_status (*fb_cca_visit)(void *ctx, const fb_cca_block *b);
/* Calls fn on every block in address order (segment after segment, blocks in the order they
 * lie in their segment). FB_ENOMEM when the host cannot hold the block list; a non-OK status
 * from fn stops the walk and is returned. It changes nothing. */
fb_status fb_cca_walk(const fb_cca *a, fb_cca_visit fn, void *ctx);

#endif
