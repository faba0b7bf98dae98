/* The MPI communicator, exact results. Run plainly, it re-launches itself with
 * `mpirun --oversubscribe -np W` for W in {2,3,4} and exits with their status; it exits 77 when
 * the build has no MPI or mpirun is missing. Under mpirun (OMPI_COMM_WORLD_SIZE set) every
 * rank opens a cpu device and checks every collective (in-place variants included) for counts
 * {0,1,2,7,13,1000,1031} in fp32/fp64/u64/bf16. MPI may reduce in any order, so the fp32/fp64
 * values here are small dyadic numbers whose sums are exact in any order; u64 sums are exact
 * modulo 2^64; bf16 sums are exact in fp32 and rounded once. */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "engine/comm/comm.h"
#include "engine/backends/cpu/device_cpu.h"

#ifdef FB_HAVE_MPI
typedef union val {
  float f;
  double d;
  uint64_t u;
  uint16_t h;
  unsigned char b[8];
} val;

static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* fp32 -> bf16 round to nearest even through frexp/nearbyint (finite inputs). */
static uint16_t ref_bf16(float f) {
  float r = 0.0f;
  if (f != 0.0f) {
    int e;
    double m = frexp((double)f, &e);
    r = (float)ldexp(nearbyint(ldexp(m, 8)), e - 8);
  }
  uint32_t u;
  memcpy(&u, &r, 4);
  return (uint16_t)(u >> 16);
}

static val value(fb_dtype t, int r, size_t i) {
  val v;
  memset(&v, 0, sizeof v);
  const int k = (int)(i % 1009);
  switch (t) {
  case FB_F32: v.f = (float)((r * 7 + k * 3) % 101 - 50) * 0.25f; break;
  case FB_F64: v.d = (double)((r * 5 + k * 3) % 1001 - 500) * 0.125 + 1e6 * r; break;
  case FB_U64:
    v.u = ((uint64_t)r + 1) * 0x9E3779B97F4A7C15ull * ((uint64_t)i + 1) ^ ((uint64_t)i << 40);
    break;
  case FB_BF16: v.h = ref_bf16(1.0f + (float)((r * 5 + k * 3) % 128) / 128.0f); break;
  default: break;
  }
  return v;
}

static val sum_all(fb_dtype t, int W, size_t i) {
  val a = value(t, 0, i);
  float fb = bf2f(a.h);
  for (int r = 1; r < W; r++) {
    val x = value(t, r, i);
    if (t == FB_F32) a.f += x.f;
    if (t == FB_F64) a.d += x.d;
    if (t == FB_U64) a.u += x.u;
    if (t == FB_BF16) fb += bf2f(x.h);
  }
  if (t == FB_BF16) a.h = ref_bf16(fb);
  return a;
}

static fb_device *dev;
static fb_stream *cs;
static fb_comm *comm;
static int R, W;

typedef struct dbuf {
  fb_buf b;
  size_t n;
} dbuf;

static void dalloc(dbuf *d, fb_dtype t, size_t n) {
  const size_t es = fb_dtype_size(t);
  d->n = n;
  CHECK_OK(fb_alloc(dev, n * es, FB_MEM_COMM, "test.mpi", &d->b));
  if (n) {
    unsigned char *junk = malloc(n * es);
    memset(junk, 0xAB, n * es);
    CHECK_OK(fb_copy_h2d(dev, cs, d->b.ptr, junk, n * es));
    free(junk);
  }
}

static void dfill(dbuf *d, fb_dtype t, size_t at, size_t n, int owner, size_t vfirst) {
  if (!n) return;
  const size_t es = fb_dtype_size(t);
  unsigned char *h = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    val v = value(t, owner, vfirst + i);
    memcpy(h + i * es, v.b, es);
  }
  CHECK_OK(fb_copy_h2d(dev, cs, (char *)d->b.ptr + at * es, h, n * es));
  free(h);
}

/* sum: compare with the sum over ranks at vfirst + i, else with value(owner, vfirst + i). */
static void dexpect(const dbuf *d, fb_dtype t, size_t at, size_t n, int sum, int owner,
                    size_t vfirst, const char *what) {
  if (!n) return;
  const size_t es = fb_dtype_size(t);
  unsigned char *h = malloc(n * es);
  CHECK_OK(fb_copy_d2h(dev, cs, h, (const char *)d->b.ptr + at * es, n * es));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    val v = sum ? sum_all(t, W, vfirst + i) : value(t, owner, vfirst + i);
    if (memcmp(h + i * es, v.b, es) && !bad++) first = i;
  }
  CHECK(bad == 0, "rank %d of %d: %s %s count %zu: %zu wrong (first %zu)", R, W, what,
        fb_dtype_name(t), d->n, bad, first);
  free(h);
}

static void dfree(dbuf *d) { fb_free(dev, &d->b, NULL); }

static void run_cases(void) {
  static const size_t counts[] = {0, 1, 2, 7, 13, 1000, 1031};
  static const fb_dtype types[] = {FB_F32, FB_F64, FB_U64, FB_BF16};
  const int r = R;
  for (size_t ti = 0; ti < 4; ti++) {
    const fb_dtype t = types[ti];
    const size_t es = fb_dtype_size(t);
    for (size_t ci = 0; ci < 7; ci++) {
      const size_t n = counts[ci];
      dbuf a, b;
      dalloc(&a, t, n);
      dalloc(&b, t, n * W);
      dfill(&a, t, 0, n, r, 0);
      CHECK_OK(fb_all_gather(comm, cs, 0, a.b.ptr, b.b.ptr, n, t));
      for (int j = 0; j < W; j++) dexpect(&b, t, j * n, n, 0, j, 0, "all_gather");
      dfree(&b);
      dfree(&a);

      dalloc(&b, t, n * W);
      dfill(&b, t, r * n, n, r, 0);
      CHECK_OK(fb_all_gather(comm, cs, 0, (char *)b.b.ptr + r * n * es, b.b.ptr, n, t));
      for (int j = 0; j < W; j++) dexpect(&b, t, j * n, n, 0, j, 0, "all_gather in place");
      dfree(&b);

      dalloc(&a, t, n * W);
      dalloc(&b, t, n);
      dfill(&a, t, 0, n * W, r, 0);
      CHECK_OK(fb_reduce_scatter(comm, cs, 1, a.b.ptr, b.b.ptr, n, t));
      dexpect(&b, t, 0, n, 1, 0, r * n, "reduce_scatter");
      CHECK_OK(fb_reduce_scatter(comm, cs, 1, a.b.ptr, (char *)a.b.ptr + r * n * es, n, t));
      dexpect(&a, t, r * n, n, 1, 0, r * n, "reduce_scatter in place");
      dfree(&b);
      dfree(&a);

      dalloc(&a, t, n);
      dalloc(&b, t, n);
      dfill(&a, t, 0, n, r, 0);
      CHECK_OK(fb_all_reduce(comm, cs, 2, a.b.ptr, b.b.ptr, n, t));
      dexpect(&b, t, 0, n, 1, 0, 0, "all_reduce");
      dexpect(&a, t, 0, n, 0, r, 0, "all_reduce leaves send");
      CHECK_OK(fb_all_reduce(comm, cs, 2, a.b.ptr, a.b.ptr, n, t));
      dexpect(&a, t, 0, n, 1, 0, 0, "all_reduce in place");
      dfree(&b);
      dfree(&a);

      const int broot = (int)((n + ti) % (size_t)W);
      dalloc(&a, t, n);
      if (r == broot) dfill(&a, t, 0, n, broot, 0);
      CHECK_OK(fb_broadcast(comm, cs, -1, a.b.ptr, n, t, broot));
      dexpect(&a, t, 0, n, 0, broot, 0, "broadcast");
      dfree(&a);

      const int rroot = (int)((n * 3 + 1 + ti) % (size_t)W);
      dalloc(&a, t, n);
      dalloc(&b, t, r == rroot ? n : 0);
      dfill(&a, t, 0, n, r, 0);
      CHECK_OK(fb_reduce(comm, cs, -1, a.b.ptr, r == rroot ? b.b.ptr : NULL, n, t, rroot));
      if (r == rroot) dexpect(&b, t, 0, n, 1, 0, 0, "reduce");
      CHECK_OK(fb_reduce(comm, cs, -1, a.b.ptr, r == rroot ? a.b.ptr : NULL, n, t, rroot));
      if (r == rroot) dexpect(&a, t, 0, n, 1, 0, 0, "reduce in place");
      else dexpect(&a, t, 0, n, 0, r, 0, "reduce leaves non-root");
      dfree(&b);
      dfree(&a);
      CHECK_OK(fb_barrier(comm, cs));
    }
  }
  CHECK_OK(fb_stream_sync(dev, cs));
}

static int under_mpirun(int argc, char **argv) {
  fb_status st = fb_mpi_init(&argc, &argv, &R, &W);
  if (st != FB_OK) {
    fprintf(stderr, "fb_mpi_init: %s\n", fb_error_msg());
    return 1;
  }
  CHECK_OK(fb_device_open(&fb_cpu_device_ops, R, W, 1, 0, NULL, &dev));
  if (dev) {
    CHECK_OK(dev->ops->stream_create(dev, FB_STREAM_COMM, &cs));
    CHECK_OK(fb_comm_mpi_create(dev, 60.0, &comm));
    CHECK(comm && comm->rank == R && comm->world == W, "rank/world");
    CHECK(fb_comm_lookup("mpi") == comm->ops, "registry");
    if (comm && cs) run_cases();
    fb_comm_destroy(comm);
    if (cs) dev->ops->stream_destroy(dev, cs);
    fb_device_close(dev);
  }
  char name[64];
  snprintf(name, sizeof name, "test_mpi_comm rank %d of %d", R, W);
  int rc = fb_test_done(name);
  fb_mpi_finalize();
  return rc;
}

static int have_mpirun(void) {
  const char *path = getenv("PATH");
  if (!path) return 0;
  char *p = strdup(path), *save = NULL;
  int found = 0;
  for (char *dir = strtok_r(p, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
    char f[4096];
    snprintf(f, sizeof f, "%s/mpirun", dir);
    found = access(f, X_OK) == 0;
  }
  free(p);
  return found;
}

static int launch(int np) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) return 1;
  self[len] = 0;
  char nps[16];
  snprintf(nps, sizeof nps, "%d", np);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    char *args[] = {"mpirun", "--oversubscribe", "-np", nps, self, NULL};
    execvp("mpirun", args);
    _exit(127);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0) return 1;
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  printf("mpirun -np %d: exit %d\n", np, rc);
  fflush(stdout);
  return rc;
}
#endif

int main(int argc, char **argv) {
#ifndef FB_HAVE_MPI
  (void)argc;
  (void)argv;
  printf("test_mpi_comm: skipped, this build has no MPI\n");
  return 77;
#else
  if (getenv("OMPI_COMM_WORLD_SIZE")) return under_mpirun(argc, argv);
  if (!have_mpirun()) {
    printf("test_mpi_comm: skipped, mpirun not found\n");
    return 77;
  }
  int rc = 0;
  for (int np = 2; np <= 4; np++) {
    int r = launch(np);
    if (r && !rc) rc = r;
  }
  return rc;
#endif
}
