/* The pending-job queue of the host communicators (host_queue.h): a job list under a mutex,
 * a host task per job, and the cleanup of the jobs a poisoned stream never ran. */
#include "host_queue.h"

#include <stdlib.h>

fb_status fb_host_queue_init(fb_host_queue *q, const char *name, fb_host_job_fn run) {
  *q = (fb_host_queue){.name = name, .run = run};
  if (pthread_mutex_init(&q->mu, NULL) != 0)
    return FB_ERR(FB_EINTERNAL, "%s: pthread_mutex_init failed", name);
  return FB_OK;
}

void fb_host_queue_fini(fb_host_queue *q) {
  for (fb_host_job *j = q->pending, *nx; j; j = nx) { /* skipped by a poisoned stream */
    nx = j->next;
    free(j);
  }
  q->pending = NULL;
  pthread_mutex_destroy(&q->mu);
}

static fb_status run_job(void *arg) {
  fb_host_job *j = arg;
  fb_host_queue *q = j->q;
  fb_status st = q->run(j->c, j);
  pthread_mutex_lock(&q->mu);
  if (j->prev) j->prev->next = j->next;
  else q->pending = j->next;
  if (j->next) j->next->prev = j->prev;
  pthread_mutex_unlock(&q->mu);
  free(j);
  return st;
}

fb_status fb_host_queue_issue(fb_host_queue *q, fb_comm *c, fb_stream *s,
                              const fb_coll_call *call) {
  fb_device *d = c->dev;
  if (!d->ops->host_task)
    return FB_ERR(FB_EUNSUPPORTED, "%s: device '%s' cannot run host tasks", q->name,
                  d->ops->name);
  fb_host_job *j = calloc(1, sizeof *j);
  if (!j) return FB_ERR(FB_ENOMEM, "%s: out of host memory", q->name);
  *j = (fb_host_job){.q = q, .c = c, .call = *call, .seq = fb_host_queue_next(q)};
  pthread_mutex_lock(&q->mu);
  j->next = q->pending;
  if (q->pending) q->pending->prev = j;
  q->pending = j;
  pthread_mutex_unlock(&q->mu);
  return d->ops->host_task(d, s, run_job, j);
}
