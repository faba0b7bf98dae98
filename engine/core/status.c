/* Thread-local error message store behind FB_ERR. Does not print or exit. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char err_msg[1024];
static _Thread_local char err_where[128];

fb_status fb_error_set(fb_status st, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err_msg, sizeof err_msg, fmt, ap);
  va_end(ap);
  snprintf(err_where, sizeof err_where, "%s:%d", file, line);
  return st;
}

void fb_error_copy(fb_status st, const char *msg, const char *where) {
  (void)st;
  if (msg != err_msg) snprintf(err_msg, sizeof err_msg, "%s", msg);
  if (where != err_where) snprintf(err_where, sizeof err_where, "%s", where);
}

const char *fb_error_msg(void) { return err_msg; }
const char *fb_error_where(void) { return err_where; }

const char *fb_status_name(fb_status st) {
  switch (st) {
  case FB_OK: return "ok";
  case FB_EUSAGE: return "usage";
  case FB_ENOMEM: return "out of memory";
  case FB_EIO: return "i/o";
  case FB_ECOMM: return "communication";
  case FB_ETIMEOUT: return "timeout";
  case FB_EDEVICE: return "device";
  case FB_EUNSUPPORTED: return "unsupported";
  case FB_EINTERNAL: return "internal";
  case FB_EINTERRUPTED: return "interrupted";
  case FB_ESKIP: return "skipped";
  }
  return "unknown";
}

int fb_exit_code(fb_status st) {
  switch (st) {
  case FB_OK: return 0;
  case FB_EUSAGE: return 2;
  case FB_ENOMEM: return 3;
  case FB_ETIMEOUT:
  case FB_ECOMM: return 4;
  default: return 1;
  }
}
