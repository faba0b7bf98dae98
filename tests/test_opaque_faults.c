/* The opaque device fails where a GPU would: faults injected here, and only here, must fail.
 *  - the host reading device memory dies (a child process, killed by the fault), a fresh block
 *    or one on the mapping of a freed block of its size;
 *  - a kernel reading a buffer another stream wrote, without an event wait, is refused with
 *    both ops named; with the wait it runs (the control);
 *  - a free not ordered after a use on another stream fails the next sync; with the wait it
 *    does not;
 *  - a host pointer handed to a kernel is refused;
 *  - a staged collective (local communicator) moves device buffers without the host touching
 *    them, and gives the cpu device's exact result.
 * It does not run strategies (test_opaque_suite.sh does). */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "engine/comm/comm.h"
#include "engine/device/device.h"
#include "engine/backends/cpu/device_cpu.h"
#include "engine/device/kernels.h"

typedef struct rig {
  fb_device *d;
  fb_stream *compute, *comm;
  fb_event *ev;
} rig;

static bool rig_open_rank(rig *g, int rank, int world) {
  memset(g, 0, sizeof *g);
  fb_status st = fb_device_open(&fb_cpu_opaque_device_ops, rank, world, 1, 0, NULL, &g->d);
  CHECK_OK(st);
  if (st != FB_OK) return false;
  CHECK_OK(g->d->ops->stream_create(g->d, FB_STREAM_COMPUTE, &g->compute));
  CHECK_OK(g->d->ops->stream_create(g->d, FB_STREAM_COMM, &g->comm));
  CHECK_OK(g->d->ops->event_create(g->d, &g->ev));
  return g->compute && g->comm && g->ev;
}

static bool rig_open(rig *g) { return rig_open_rank(g, 0, 1); }

static void rig_close(rig *g) {
  if (!g->d) return;
  if (g->ev) g->d->ops->event_destroy(g->d, g->ev);
  if (g->comm) g->d->ops->stream_destroy(g->d, g->comm);
  if (g->compute) g->d->ops->stream_destroy(g->d, g->compute);
  fb_device_close(g->d);
}

/* The host dereferences device memory: the child must not survive the read. `recycled`: the
 * block is the mapping of a freed one of its size, which a kernel wrote (the guard keeps freed
 * mappings, as a caching allocator keeps memory; exit 4 if it handed out another). */
static void test_host_read_faults(bool recycled) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    rig g;
    if (!rig_open(&g)) _exit(3);
    fb_buf a, b;
    if (recycled) {
      if (fb_alloc(g.d, 3 * 4096 + 8, FB_MEM_ACT, "old", &a) != FB_OK) _exit(3);
      void *old = a.ptr;
      if (fb_memset0(g.d, g.compute, a.ptr, a.bytes) != FB_OK) _exit(3);
      fb_free(g.d, &a, g.compute);
      if (fb_stream_sync(g.d, g.compute) != FB_OK) _exit(3);
      if (fb_alloc(g.d, 3 * 4096 + 100, FB_MEM_ACT, "t", &b) != FB_OK) _exit(3);
      if (b.ptr != old) _exit(4);
    } else if (fb_alloc(g.d, 4096, FB_MEM_ACT, "t", &b) != FB_OK) {
      _exit(3);
    }
    volatile float *p = b.ptr;
    float x = p[0]; /* the injected fault */
    (void)x;
    _exit(0); /* reached only if the host could read device memory */
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork/wait");
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0),
        "a host read of opaque device memory must fault (child exited 0)");
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 3), "child could not set up");
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 4),
        "a freed block's mapping must serve the next allocation of its size");
  printf("host read of %s device memory: child %s %d (as on a GPU)\n",
         recycled ? "recycled" : "fresh", WIFSIGNALED(status) ? "killed by signal" : "exited",
         WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

/* comm stream writes buf; compute reads it with (wait) or without an event in between. */
static fb_status write_then_read(rig *g, bool wait, fb_buf *src, fb_buf *dst) {
  const int n = 1 << 14;
  FB_TRY(fb_alloc(g->d, n * 4, FB_MEM_ACT, "src", src));
  FB_TRY(fb_alloc(g->d, n * 4, FB_MEM_ACT, "dst", dst));
  FB_TRY(fb_memset0(g->d, g->comm, src->ptr, n * 4));
  if (wait) {
    FB_TRY(fb_event_record(g->d, g->ev, g->comm));
    FB_TRY(fb_stream_wait(g->d, g->compute, g->ev));
  }
  fb_kctx k = {.dev = g->d, .s = g->compute, .act = FB_F32, .unit = -1};
  return fb_k_acc_f32(&k, dst->ptr, src->ptr, n);
}

static void test_missing_wait(void) {
  for (int wait = 0; wait < 2; wait++) {
    rig g;
    if (!rig_open(&g)) return;
    fb_buf a = {0}, b = {0};
    fb_status st = write_then_read(&g, wait, &a, &b);
    if (wait) {
      CHECK_OK(st);
    } else {
      CHECK(st == FB_EINTERNAL && strstr(fb_error_msg(), "missing wait") &&
                strstr(fb_error_msg(), "memset") && strstr(fb_error_msg(), "grad_accumulate"),
            "a read without the event wait must be refused naming both ops (got %s: %s)",
            fb_status_name(st), fb_error_msg());
      printf("missing wait caught: %s\n", fb_error_msg());
    }
    CHECK_OK(fb_stream_sync(g.d, g.comm));
    CHECK_OK(fb_stream_sync(g.d, g.compute));
    fb_free(g.d, &b, NULL);
    fb_free(g.d, &a, g.comm);
    CHECK_OK(fb_stream_sync(g.d, g.comm));
    rig_close(&g);
  }
}

static void test_unsafe_free(void) {
  for (int wait = 0; wait < 2; wait++) {
    rig g;
    if (!rig_open(&g)) return;
    fb_buf a;
    CHECK_OK(fb_alloc(g.d, 1 << 16, FB_MEM_GRAD_FULL, "g", &a));
    CHECK_OK(fb_memset0(g.d, g.comm, a.ptr, 1 << 16)); /* in flight on the comm stream */
    if (wait) {
      CHECK_OK(fb_event_record(g.d, g.ev, g.comm));
      CHECK_OK(fb_stream_wait(g.d, g.compute, g.ev));
    }
    fb_free(g.d, &a, NULL); /* ordered on the compute stream only */
    fb_status st = fb_stream_sync(g.d, g.compute);
    if (wait) {
      CHECK_OK(st);
    } else {
      CHECK(st == FB_EINTERNAL && strstr(fb_error_msg(), "stream-unsafe free"),
            "a free racing the comm stream must fail the next sync (got %s: %s)",
            fb_status_name(st), fb_error_msg());
      printf("stream-unsafe free caught: %s\n", fb_error_msg());
    }
    (void)fb_stream_sync(g.d, g.comm);
    rig_close(&g);
  }
}

static void test_host_pointer_to_kernel(void) {
  rig g;
  if (!rig_open(&g)) return;
  float host[64] = {0};
  fb_buf a;
  CHECK_OK(fb_alloc(g.d, sizeof host, FB_MEM_ACT, "a", &a));
  fb_kctx k = {.dev = g.d, .s = g.compute, .act = FB_F32, .unit = -1};
  fb_status st = fb_k_acc_f32(&k, a.ptr, host, 64);
  CHECK(st == FB_EINTERNAL && strstr(fb_error_msg(), "not device memory"),
        "a host pointer given to a kernel must be refused (got %s: %s)", fb_status_name(st),
        fb_error_msg());
  fb_free(&*g.d, &a, NULL);
  rig_close(&g);
}

/* Two ranks all-reduce device buffers through the local communicator, staged. */
typedef struct staged_arg {
  fb_local_group *grp;
  int rank;
  double got[4];
  fb_status st;
} staged_arg;

static void *staged_rank(void *p) {
  staged_arg *a = p;
  rig g;
  fb_comm *c = NULL;
  fb_buf b = {0};
  a->st = FB_EINTERNAL;
  if (!rig_open_rank(&g, a->rank, 2)) return NULL;
  double x[4] = {1.5 + a->rank, 2.25, -3.0 * a->rank, 1e-3};
  fb_status st = fb_comm_local_create(a->grp, a->rank, g.d, &c);
  if (st == FB_OK) st = fb_alloc(g.d, sizeof x, FB_MEM_COMM, "x", &b);
  if (st == FB_OK) st = fb_copy_h2d(g.d, g.comm, b.ptr, x, sizeof x);
  if (st == FB_OK) st = fb_all_reduce(c, g.comm, -1, b.ptr, b.ptr, 4, FB_F64);
  if (st == FB_OK) st = fb_copy_d2h(g.d, g.comm, a->got, b.ptr, sizeof x);
  fb_free(g.d, &b, g.comm);
  if (c) fb_comm_destroy(c);
  if (st == FB_OK) st = fb_stream_sync(g.d, g.comm);
  a->st = st;
  if (st != FB_OK) fprintf(stderr, "rank %d: %s\n", a->rank, fb_error_msg());
  rig_close(&g);
  return NULL;
}

static void test_staged_collective(void) {
  fb_local_group *grp = NULL;
  CHECK_OK(fb_local_group_create(2, 30, &grp));
  if (!grp) return;
  staged_arg a[2] = {{.grp = grp, .rank = 0}, {.grp = grp, .rank = 1}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, staged_rank, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  fb_local_group_destroy(grp);
  const double want[4] = {1.5 + 2.5, 4.5, -3.0, 2e-3};
  for (int i = 0; i < 2; i++) {
    CHECK(a[i].st == FB_OK, "rank %d: staged all-reduce failed", i);
    CHECK(!memcmp(a[i].got, want, sizeof want), "rank %d: %g %g %g %g", i, a[i].got[0],
          a[i].got[1], a[i].got[2], a[i].got[3]);
  }
}

int main(void) {
  test_host_read_faults(false);
  test_host_read_faults(true);
  test_missing_wait();
  test_unsafe_free();
  test_host_pointer_to_kernel();
  test_staged_collective();
  return fb_test_done("test_opaque_faults");
}
