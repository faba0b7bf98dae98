/* Status codes and error context for the whole engine.
 * Every fallible function returns fb_status; on failure it records a one-line message with
 * the file:line where it was raised (thread-local). Invariants use assert(), which stays on.
 * This file does not print anything: main() decides how to show the message. */
#ifndef FB_STATUS_H
#define FB_STATUS_H
#include <stddef.h>

typedef enum fb_status {
  FB_OK = 0,
  FB_EUSAGE = 2,     /* bad user input: flag, YAML key, value, file contents (exit code 2) */
  FB_ENOMEM = 3,     /* out of host/device memory, or the run would not fit (--mem-limit) */
  FB_EIO = 4,        /* file could not be read or written */
  FB_ECOMM = 5,      /* a collective failed or a peer died */
  FB_ETIMEOUT = 6,   /* a collective or event wait exceeded its timeout */
  FB_EDEVICE = 7,    /* CUDA / cuBLAS / NCCL / CUPTI error */
  FB_EUNSUPPORTED = 8, /* valid request this build or backend cannot do */
  FB_EINTERNAL = 9,  /* broken invariant detected at run time */
  FB_EINTERRUPTED = 10, /* SIGINT / SIGTERM: stopped cleanly after a step (exit code 1) */
  FB_ESKIP = 77      /* test / selftest could not run here (e.g. no GPU) */
} fb_status;

/* Records the message and location, returns st. Use through FB_ERR. */
fb_status fb_error_set(fb_status st, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define FB_ERR(st, ...) fb_error_set((st), __FILE__, __LINE__, __VA_ARGS__)

/* The last message recorded on this thread ("" if none) and where it was raised. */
const char *fb_error_msg(void);
const char *fb_error_where(void);
/* Copies another thread's error into this one (used when a worker thread fails). */
void fb_error_copy(fb_status st, const char *msg, const char *where);
const char *fb_status_name(fb_status st);
/* The process exit code the command line documents for a status: 0 ok, 1 runtime failure,
 * 2 bad usage/config/input, 3 does not fit in memory, 4 timeout or a peer failed. */
int fb_exit_code(fb_status st);

/* Propagate a failure upwards unchanged. */
#define FB_TRY(expr)                                                                           \
  do {                                                                                         \
    fb_status fb_try_st_ = (expr);                                                             \
    if (fb_try_st_ != FB_OK) return fb_try_st_;                                                \
  } while (0)
/* Jump to a cleanup label on failure, keeping the status in `st`. */
#define FB_CHECK_GOTO(st, expr, label)                                                         \
  do {                                                                                         \
    (st) = (expr);                                                                             \
    if ((st) != FB_OK) goto label;                                                             \
  } while (0)

#endif
