/* Staged collectives (comm_staged.c): how comm.c hands a call to a communicator whose
 * collectives run on the host (local, mpi) when the device's memory is not the host's.
 * Private to engine/comm/. */
#ifndef FB_COMM_STAGED_H
#define FB_COMM_STAGED_H
#include "comm.h"

/* The call through pinned host buffers on the stream: device -> staging copy, the backend's
 * issue on the staging buffers, staging -> device copy. */
fb_status fb_comm_issue_staged(fb_comm *c, fb_stream *s, const fb_coll_call *a);
/* Waits for the streams that used staging buffers and frees them. */
void fb_comm_stage_free(fb_comm *c);

#endif
