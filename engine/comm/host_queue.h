/* The pending-job queue of the communicators whose collectives run on the host (local, mpi):
 * an issued call is copied into a job, numbered, listed as pending and handed to the device as
 * a host task on the issuing stream; when the stream reaches it the communicator's `run`
 * executes it, and the job unlists and frees itself. A job that a poisoned stream skipped stays
 * listed until fb_host_queue_fini frees it. One queue per communicator; the jobs of one
 * communicator are numbered 1, 2, ... in issue order (what timeouts and mismatches name).
 * It does not move data or know any collective: the communicator's `run` does. */
#ifndef FB_HOST_QUEUE_H
#define FB_HOST_QUEUE_H
#include <pthread.h>
#include <stdint.h>

#include "comm.h"

typedef struct fb_host_job {
  struct fb_host_job *prev, *next;
  struct fb_host_queue *q;
  fb_comm *c;
  fb_coll_call call;
  uint64_t seq; /* 1-based number of this communicator's collective */
} fb_host_job;

/* Runs one job on the stream's thread (the job stays owned by the queue). */
typedef fb_status (*fb_host_job_fn)(fb_comm *c, const fb_host_job *j);

typedef struct fb_host_queue {
  const char *name;   /* "local comm": prefixes its errors */
  fb_host_job_fn run;
  pthread_mutex_t mu; /* guards pending */
  fb_host_job *pending;
  uint64_t seq;       /* last number handed out (jobs and fb_host_queue_next) */
} fb_host_queue;

fb_status fb_host_queue_init(fb_host_queue *q, const char *name, fb_host_job_fn run);
/* Frees the jobs still listed; the streams that ran this queue's jobs must be drained. */
void fb_host_queue_fini(fb_host_queue *q);
/* Queues a copy of `call` as a host task on s (FB_EUNSUPPORTED when c's device runs none). */
fb_status fb_host_queue_issue(fb_host_queue *q, fb_comm *c, fb_stream *s,
                              const fb_coll_call *call);
/* The next number, for an exchange that runs on the calling thread rather than as a job
 * (the local communicator's split). */
static inline uint64_t fb_host_queue_next(fb_host_queue *q) { return ++q->seq; }

#endif
