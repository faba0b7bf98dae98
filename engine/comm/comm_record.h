/* comm.c's checking and recording path, shared with comm_mesh.c (the folder's own header:
 * nothing outside engine/comm calls these). It declares; comm.c defines. */
#ifndef FB_COMM_RECORD_H
#define FB_COMM_RECORD_H
#include "comm.h"

/* The argument checks every wrapper makes (buffers, dtype, count, root), against c's group. */
fb_status fb_comm_check_call(const fb_comm *c, const fb_stream *s, const fb_coll_call *a);
/* Issues `a` on `on` (staged where the device needs it; NULL: nothing moves) between two
 * marks of s, and accounts (sim), records and counts it as a collective of `as`'s group: its
 * members, placement and nodes. The recording wrappers call it with on == as. */
fb_status fb_comm_record(fb_comm *on, fb_comm *as, fb_stream *s, int unit,
                         const fb_coll_call *a);

#endif
