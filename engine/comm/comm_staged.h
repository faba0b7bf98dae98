/* One collective call as the recording wrappers pass it around (comm.c) and as the staging
 * path replays it on host buffers (comm_staged.c). Private to engine/comm/. */
#ifndef FB_COMM_CALL_H
#define FB_COMM_CALL_H
#include "comm.h"

typedef struct fb_coll_call {
  fb_coll op;
  const void *send;
  void *recv;
  size_t count;
  fb_dtype t;
  int root;
} fb_coll_call;

/* Hands the call to the backend as is (comm.c). */
fb_status fb_comm_issue_raw(fb_comm *c, fb_stream *s, const fb_coll_call *a);
/* The same call through pinned host buffers on the stream: device -> staging copy, the
 * backend's collective on the staging buffers, staging -> device copy (comm_staged.c). */
fb_status fb_comm_issue_staged(fb_comm *c, fb_stream *s, const fb_coll_call *a);
/* Waits for the streams that used staging buffers and frees them. */
void fb_comm_stage_free(fb_comm *c);

#endif
