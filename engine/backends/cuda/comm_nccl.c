/* The nccl communicator: one GPU per rank, NCCL collectives enqueued on the caller's CUDA
 * stream. Bootstrap: under mpirun (OMPI_COMM_WORLD_SIZE set, built with MPI) rank 0's
 * ncclUniqueId is broadcast over MPI_COMM_WORLD; under a torchrun-style launcher (WORLD_SIZE
 * set) a TCP rendezvous: RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, rank 0 listens and
 * sends the id to each peer; with no launcher, the ranks are threads of this process (one GPU
 * each) and rank 0's id is handed to the others through an in-process rendezvous.
 * Communicators are NONBLOCKING (ncclConfig_t.blocking = 0): every NCCL call returns at once,
 * ncclInProgress is polled with ncclCommGetAsyncError under a deadline, so no thread can be
 * stuck inside NCCL while the communicator has to be torn down.
 * Abort protocol (one place, one time): call_mu is held by every thread while it calls NCCL
 * with this communicator (a collective, a whole group from group_start to group_end, the
 * watchdog's async-error query, finalize, abort). A failure (a collective past timeout_s, an
 * asynchronous NCCL error, a CUDA error on the tracking event, a failed NCCL call) is first
 * MARKED under mu (fail(): the first one wins, streams with work in flight are poisoned so the
 * next stream sync reports it); then whoever holds or next takes call_mu outside a group calls
 * ncclCommAbort exactly once (abort_locked()) — the watchdog if call_mu is free, else the
 * holder when it releases it. Every later call fails fast with the recorded status (FB_ETIMEOUT
 * / FB_ECOMM / FB_EDEVICE) naming the rank, the refused collective and the first failure.
 * destroy never blocks on a broken communicator: after a failure it aborts; otherwise it
 * finalizes (nonblocking) and polls with a bound, aborting if the bound passes.
 * A watchdog thread follows every collective with an event.
 * Groups (fb_comm_split): ncclCommSplit on the parent under the parent's call_mu, nonblocking
 * like the rest; the child gets its own lock, watchdog and abort path (an fb_comm of its own).
 * It does not choose the GPU (the cuda device does) nor record timings (comm.c wrappers). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* nccl.h declares a few functions with () instead of (void) */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#ifdef FB_HAVE_MPI
#include <mpi.h>
#endif

#include "cuda_impl.h"
#include "device_cuda.h"
#include "comm_nccl.h"

#define RDV_MAGIC 0x66736470u /* "fsdp" */

typedef struct pending {
  cudaEvent_t ev;
  double t_enqueued;
  fb_coll op;
  size_t count;
  fb_stream *s;
  uint64_t seq;
} pending;

/* A collective issued inside a group: tracked once group_end launched the group. */
typedef struct grp_op {
  fb_coll op;
  size_t count;
  fb_stream *s;
} grp_op;

typedef struct nccl_impl {
  ncclComm_t comm;            /* NULL once aborted or destroyed */
  void *one;                  /* device scalar for barrier */
  pthread_t watchdog;
  bool watchdog_running;
  /* call_mu (recursive): held while calling NCCL with comm; see the file comment. depth and
   * group_depth belong to its holder. */
  pthread_mutex_t call_mu;
  int depth;
  int group_depth;
  grp_op *grp;                /* collectives of the open group */
  size_t ngrp, cap_grp;
  bool aborted;               /* ncclCommAbort was called (under call_mu) */
  /* mu: the failure state, the ring, the watchdog's stop flag */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  int failed;                 /* fb_status of the first failure, 0 = healthy */
  char fail_msg[512];
  pending *ring;              /* circular queue of collectives in flight */
  size_t head, len, cap;
  cudaEvent_t *free_ev;       /* recycled events */
  size_t nfree, cap_free;
  uint64_t seq;
} nccl_impl;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fb_status nccl_err(int rank, const char *call, ncclResult_t r, ncclComm_t comm) {
  const char *last = ncclGetLastError(comm);
  return FB_ERR(r == ncclSystemError || r == ncclRemoteError ? FB_ECOMM : FB_EDEVICE,
                "rank %d: %s failed: %s%s%s", rank, call, ncclGetErrorString(r),
                last && *last ? ": " : "", last && *last ? last : "");
}

/* ---- bootstrap ------------------------------------------------------------------------------ */
static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  if (!v || !*v) return dflt;
  char *end;
  long x = strtol(v, &end, 10);
  return *end ? dflt : (int)x;
}

static fb_status io_all(int fd, void *buf, size_t n, bool wr, double deadline, const char *what,
                        int rank) {
  char *p = buf;
  while (n > 0) {
    double left = deadline - mono_s();
    if (left <= 0)
      return FB_ERR(FB_ETIMEOUT, "rank %d: TCP rendezvous: timed out while %s", rank, what);
    struct pollfd pfd = {.fd = fd, .events = wr ? POLLOUT : POLLIN};
    int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return FB_ERR(FB_ECOMM, "rank %d: TCP rendezvous: poll: %s", rank, strerror(errno));
    if (pr == 0) continue;
    ssize_t k = wr ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0)
      return FB_ERR(FB_ECOMM, "rank %d: TCP rendezvous: connection lost while %s%s%s", rank, what,
                    k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
    p += k;
    n -= (size_t)k;
  }
  return FB_OK;
}

typedef struct rdv_hello {
  uint32_t magic;
  int32_t rank, world;
} rdv_hello;

static fb_status rendezvous_root(int port, int world, double timeout_s, const ncclUniqueId *id) {
  fb_status st = FB_OK;
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return FB_ERR(FB_ECOMM, "rank 0: TCP rendezvous: socket: %s", strerror(errno));
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero); /* accept IPv4 too */
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port),
                             .sin6_addr = in6addr_any};
    rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  } else {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    rc = bind(fd, (struct sockaddr *)&a, sizeof a);
  }
  if (rc != 0) {
    st = FB_ERR(FB_ECOMM, "rank 0: TCP rendezvous: cannot listen on MASTER_PORT=%d: %s", port,
                strerror(errno));
    goto out;
  }
  if (listen(fd, world) != 0) {
    st = FB_ERR(FB_ECOMM, "rank 0: TCP rendezvous: listen: %s", strerror(errno));
    goto out;
  }
  double deadline = mono_s() + timeout_s;
  bool *seen = calloc((size_t)world, 1);
  if (!seen) {
    st = FB_ERR(FB_ENOMEM, "rank 0: TCP rendezvous: out of host memory");
    goto out;
  }
  for (int got = 1; got < world;) {
    double left = deadline - mono_s();
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int pr = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      st = FB_ERR(FB_ETIMEOUT, "rank 0: TCP rendezvous: only %d of %d ranks connected to port %d "
                  "within %.0f s", got, world, port, timeout_s);
      break;
    }
    int c = accept(fd, NULL, NULL);
    if (c < 0) continue;
    rdv_hello h;
    st = io_all(c, &h, sizeof h, false, deadline, "reading a peer's hello", 0);
    if (st == FB_OK && (h.magic != RDV_MAGIC || h.world != world || h.rank <= 0 ||
                        h.rank >= world || seen[h.rank]))
      st = FB_ERR(FB_ECOMM, "rank 0: TCP rendezvous: bad hello (rank %d, world %d; expected "
                  "world %d and a new rank in 1..%d)", (int)h.rank, (int)h.world, world,
                  world - 1);
    if (st == FB_OK) st = io_all(c, (void *)id, sizeof *id, true, deadline, "sending the id", 0);
    close(c);
    if (st != FB_OK) break;
    seen[h.rank] = true;
    got++;
  }
  free(seen);
out:
  close(fd);
  return st;
}

static fb_status rendezvous_peer(const char *addr, int port, int rank, int world,
                                 double timeout_s, ncclUniqueId *id) {
  char ports[16];
  snprintf(ports, sizeof ports, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int gr = getaddrinfo(addr, ports, &hints, &res);
  if (gr != 0)
    return FB_ERR(FB_EUSAGE, "rank %d: MASTER_ADDR=%s: %s", rank, addr, gai_strerror(gr));
  double deadline = mono_s() + timeout_s;
  fb_status st = FB_OK;
  int fd = -1;
  /* rank 0 may not listen yet: retry until the deadline */
  while (fd < 0) {
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
      int s = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (s < 0) continue;
      if (connect(s, a->ai_addr, a->ai_addrlen) == 0) fd = s;
      else close(s);
    }
    if (fd >= 0) break;
    if (mono_s() > deadline) {
      st = FB_ERR(FB_ETIMEOUT, "rank %d: TCP rendezvous: could not connect to MASTER_ADDR=%s "
                  "MASTER_PORT=%d within %.0f s", rank, addr, port, timeout_s);
      goto out;
    }
    usleep(100 * 1000);
  }
  rdv_hello h = {.magic = RDV_MAGIC, .rank = rank, .world = world};
  st = io_all(fd, &h, sizeof h, true, deadline, "sending the hello", rank);
  if (st == FB_OK) st = io_all(fd, id, sizeof *id, false, deadline, "receiving the id", rank);
  close(fd);
out:
  freeaddrinfo(res);
  return st;
}

#ifdef FB_HAVE_MPI
static void finalize_mpi_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}
#endif

/* ---- in-process rendezvous (ranks as threads, no launcher) -------------------------------------
 * One slot for the group being created: every rank registers, rank 0 puts its id, and once
 * all `world` ranks are there each takes the id; the last to take it closes the slot. A rank
 * that gives up (timeout) unregisters, so a half-created group never leaks into the next run.
 * Not a cache: the slot is empty between communicator creations. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool open;
  int world, arrived, taken;
  bool have_id, id_failed;
  unsigned char *seen;
  ncclUniqueId id;
} inproc = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void inproc_close_locked(void) {
  free(inproc.seen);
  inproc.seen = NULL;
  inproc.open = false;
  inproc.world = inproc.arrived = inproc.taken = 0;
  inproc.have_id = inproc.id_failed = false;
}

static fb_status inproc_rendezvous(int rank, int world, double timeout_s, ncclUniqueId *id) {
  fb_status st = FB_OK;
  pthread_mutex_lock(&inproc.mu);
  if (!inproc.open) {
    inproc.seen = calloc((size_t)world, 1);
    if (!inproc.seen) {
      pthread_mutex_unlock(&inproc.mu);
      return FB_ERR(FB_ENOMEM, "rank %d: nccl rendezvous: out of host memory", rank);
    }
    inproc.open = true;
    inproc.world = world;
  } else if (inproc.world != world || inproc.seen[rank]) {
    int w = inproc.world;
    pthread_mutex_unlock(&inproc.mu);
    return FB_ERR(FB_EINTERNAL, "rank %d: nccl: another in-process group (world %d) is being "
                  "created at the same time as this one (world %d)", rank, w, world);
  }
  inproc.seen[rank] = 1;
  inproc.arrived++;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&inproc.id);
    if (r == ncclSuccess) inproc.have_id = true;
    else {
      inproc.id_failed = true;
      st = FB_ERR(FB_ECOMM, "rank 0: ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    }
    pthread_cond_broadcast(&inproc.cv);
  } else {
    pthread_cond_broadcast(&inproc.cv);
  }
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += (time_t)timeout_s;
  while (st == FB_OK && !inproc.id_failed && !(inproc.have_id && inproc.arrived == world)) {
    if (pthread_cond_timedwait(&inproc.cv, &inproc.mu, &dl) == ETIMEDOUT) {
      st = FB_ERR(FB_ETIMEOUT, "rank %d: nccl in-process rendezvous: %d of %d ranks arrived "
                  "within %.0f s%s", rank, inproc.arrived, world, timeout_s,
                  inproc.have_id ? "" : " (rank 0 never did)");
      break;
    }
  }
  if (st == FB_OK && inproc.id_failed)
    st = FB_ERR(FB_ECOMM, "rank %d: nccl: rank 0 could not create the NCCL id", rank);
  if (st == FB_OK) {
    *id = inproc.id;
    if (++inproc.taken == world) inproc_close_locked();
  } else if (inproc.open) {
    inproc.seen[rank] = 0;
    inproc.arrived--;
    if (rank == 0) inproc.have_id = false;
    if (inproc.arrived == 0) inproc_close_locked();
    pthread_cond_broadcast(&inproc.cv);
  }
  pthread_mutex_unlock(&inproc.mu);
  return st;
}

/* Whether the ranks are threads of this process: no launcher started them (the runner's test:
 * neither OMPI_COMM_WORLD_SIZE nor WORLD_SIZE). */
static bool ranks_are_threads(void) {
  return env_int("OMPI_COMM_WORLD_SIZE", 0) <= 0 && env_int("WORLD_SIZE", 0) <= 0;
}

/* Fills id on every rank. */
static fb_status bootstrap(int rank, int world, double timeout_s, ncclUniqueId *id) {
  if (world == 1) {
    ncclResult_t r = ncclGetUniqueId(id);
    return r == ncclSuccess ? FB_OK : nccl_err(rank, "ncclGetUniqueId", r, NULL);
  }
  double t = timeout_s > 0 ? timeout_s : 300;
  if (t < 30) t = 30; /* ranks start at different times: give them a moment */
  if (ranks_are_threads()) return inproc_rendezvous(rank, world, t, id);
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) return nccl_err(rank, "ncclGetUniqueId", r, NULL);
  }
#ifdef FB_HAVE_MPI
  if (getenv("OMPI_COMM_WORLD_SIZE")) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int prov;
      if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov) != MPI_SUCCESS)
        return FB_ERR(FB_ECOMM, "rank %d: MPI_Init_thread failed", rank);
      atexit(finalize_mpi_at_exit);
    }
    int mr = -1, mw = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &mr);
    MPI_Comm_size(MPI_COMM_WORLD, &mw);
    if (mr != rank || mw != world)
      return FB_ERR(FB_EINTERNAL, "rank %d: MPI says rank %d of %d, the run says %d of %d", rank,
                    mr, mw, rank, world);
    int e = MPI_Bcast(id, (int)sizeof *id, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (e != MPI_SUCCESS) return FB_ERR(FB_ECOMM, "rank %d: MPI_Bcast(ncclUniqueId) failed", rank);
    return FB_OK;
  }
#endif
  const char *addr = getenv("MASTER_ADDR");
  int port = env_int("MASTER_PORT", -1);
  if (!addr || !*addr || port <= 0 || port > 65535)
    return FB_ERR(FB_EUSAGE, "rank %d: --comm nccl with %d ranks needs mpirun, or MASTER_ADDR and "
                  "MASTER_PORT (1..65535) set like torchrun (got MASTER_ADDR=%s MASTER_PORT=%s)",
                  rank, world, addr ? addr : "(unset)",
                  getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "(unset)");
  return rank == 0 ? rendezvous_root(port, world, t, id)
                   : rendezvous_peer(addr, port, rank, world, t, id);
}

/* ---- failure and abort ----------------------------------------------------------------------- */
static void poison(fb_stream *s, fb_status st, const char *msg) {
  int expected = 0;
  if (__atomic_load_n(&s->poison, __ATOMIC_ACQUIRE) != 0) return;
  snprintf(s->poison_msg, sizeof s->poison_msg, "%s", msg);
  snprintf(s->poison_where, sizeof s->poison_where, "%s", __FILE__);
  __atomic_compare_exchange_n(&s->poison, &expected, (int)st, false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

/* Marks the communicator failed (the first failure wins) and poisons every stream with a
 * collective in flight. Takes mu; never calls NCCL. */
static void fail(fb_comm *c, fb_status st, const char *msg) {
  nccl_impl *n = c->impl;
  pthread_mutex_lock(&n->mu);
  if (!n->failed) {
    n->failed = (int)st;
    snprintf(n->fail_msg, sizeof n->fail_msg, "%s", msg);
    fprintf(stderr, "fsdpbench: %s\n", msg);
    for (size_t i = 0; i < n->len; i++) poison(n->ring[(n->head + i) % n->cap].s, st, msg);
  }
  pthread_mutex_unlock(&n->mu);
}

static int failed_status(nccl_impl *n, char *msg, size_t len) {
  pthread_mutex_lock(&n->mu);
  int f = n->failed;
  if (msg) snprintf(msg, len, "%s", n->fail_msg);
  pthread_mutex_unlock(&n->mu);
  return f;
}

/* The one place that aborts: call_mu held, outside a group, at most once. ncclCommAbort makes
 * the NCCL kernels still running return and frees the communicator. */
static void abort_locked(fb_comm *c) {
  nccl_impl *n = c->impl;
  if (n->aborted || !n->comm || n->group_depth > 0) return;
  ncclCommAbort(n->comm);
  n->aborted = true;
  n->comm = NULL;
}

static void call_lock(fb_comm *c) {
  nccl_impl *n = c->impl;
  pthread_mutex_lock(&n->call_mu);
  n->depth++;
}

/* Releases call_mu; the outermost release of a failed communicator performs the abort. */
static void call_unlock(fb_comm *c) {
  nccl_impl *n = c->impl;
  if (--n->depth == 0 && n->group_depth == 0 && failed_status(n, NULL, 0)) abort_locked(c);
  pthread_mutex_unlock(&n->call_mu);
}

/* From the watchdog: abort now if nobody is inside NCCL, else leave it to the holder. */
static void try_abort(fb_comm *c) {
  nccl_impl *n = c->impl;
  if (pthread_mutex_trylock(&n->call_mu) != 0) return;
  if (n->depth == 0) abort_locked(c);
  pthread_mutex_unlock(&n->call_mu);
}

/* Marks the failure of an NCCL call made by this thread and returns it as an error. */
static fb_status fail_call(fb_comm *c, const char *what, ncclResult_t r) {
  nccl_impl *n = c->impl;
  fb_status st = nccl_err(c->rank, what, r, n->aborted ? NULL : n->comm);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", fb_error_msg());
  fail(c, st, msg);
  return st;
}

/* Polls a nonblocking communicator until its last call completed (ncclSuccess), failed, the
 * deadline passed or the watchdog marked it failed. call_mu held. */
static fb_status wait_ready(fb_comm *c, const char *what, double bound_s) {
  nccl_impl *n = c->impl;
  const double deadline = mono_s() + bound_s;
  for (unsigned spin = 0;; spin++) {
    ncclResult_t ar = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(n->comm, &ar);
    if (r != ncclSuccess) return fail_call(c, "ncclCommGetAsyncError", r);
    if (ar == ncclSuccess) return FB_OK;
    if (ar != ncclInProgress) return fail_call(c, what, ar);
    char msg[512];
    int f = failed_status(n, msg, sizeof msg);
    if (f) return FB_ERR((fb_status)f, "rank %d: %s: the communicator failed: %s", c->rank, what, msg);
    if (mono_s() > deadline) {
      snprintf(msg, sizeof msg, "rank %d: %s: NCCL did not complete the call within %.1f s (a "
               "peer may have died); NCCL communicator aborted", c->rank, what, bound_s);
      fail(c, FB_ETIMEOUT, msg);
      return FB_ERR(FB_ETIMEOUT, "%s", msg);
    }
    if (spin > 1000) usleep(100);
    else sched_yield();
  }
}

static double call_bound(const fb_comm *c) { return c->timeout_s > 0 ? c->timeout_s : 300; }

/* ---- watchdog -------------------------------------------------------------------------------- */
static void *watchdog_main(void *arg) {
  fb_comm *c = arg;
  nccl_impl *n = c->impl;
  (void)fb_cuda_bind(c->dev);
  pthread_mutex_lock(&n->mu);
  while (!n->stop) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&n->cv, &n->mu, &ts);
    if (n->stop) break;
    if (n->failed) {
      pthread_mutex_unlock(&n->mu);
      try_abort(c);
      pthread_mutex_lock(&n->mu);
      continue;
    }
    fb_status fst = FB_OK;
    char msg[512];
    while (n->len > 0) {
      pending *p = &n->ring[n->head];
      cudaError_t e = cudaEventQuery(p->ev);
      if (e == cudaSuccess) {
        n->free_ev[n->nfree++] = p->ev;
        n->head = (n->head + 1) % n->cap;
        n->len--;
        continue;
      }
      if (e != cudaErrorNotReady) {
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (%zu elements): cudaEventQuery: %s", c->rank,
                 fb_coll_name(p->op), (unsigned long long)p->seq, p->count,
                 cudaGetErrorString(e));
        fst = FB_EDEVICE;
      } else if (c->timeout_s > 0 && mono_s() - p->t_enqueued > c->timeout_s) {
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (%zu elements) did not complete within "
                 "%.1f s (a peer may have died or diverged); NCCL communicator aborted", c->rank,
                 fb_coll_name(p->op), (unsigned long long)p->seq, p->count, c->timeout_s);
        fst = FB_ETIMEOUT;
      }
      break;
    }
    pthread_mutex_unlock(&n->mu);
    if (fst != FB_OK) {
      fail(c, fst, msg);
    } else if (pthread_mutex_trylock(&n->call_mu) == 0) {
      /* asynchronous NCCL errors (network, remote peer), only while nobody is inside NCCL */
      if (n->depth == 0 && !n->aborted && n->comm) {
        ncclResult_t ar = ncclSuccess;
        if (ncclCommGetAsyncError(n->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
            ar != ncclInProgress) {
          const char *last = ncclGetLastError(n->comm);
          snprintf(msg, sizeof msg, "rank %d: NCCL asynchronous error: %s%s%s", c->rank,
                   ncclGetErrorString(ar), last && *last ? ": " : "", last && *last ? last : "");
          fail(c, FB_ECOMM, msg);
        }
      }
      pthread_mutex_unlock(&n->call_mu);
    }
    if (failed_status(n, NULL, 0)) try_abort(c);
    pthread_mutex_lock(&n->mu);
  }
  pthread_mutex_unlock(&n->mu);
  return NULL;
}

/* Follows a just-enqueued collective with an event the watchdog polls. */
static fb_status track(fb_comm *c, fb_stream *s, fb_coll op, size_t count) {
  nccl_impl *n = c->impl;
  fb_status st = FB_OK;
  pthread_mutex_lock(&n->mu);
  if (n->len == n->cap) {
    size_t cap = n->cap ? 2 * n->cap : 256;
    pending *r = malloc(cap * sizeof *r);
    cudaEvent_t *f = realloc(n->free_ev, cap * sizeof *f);
    if (!r || !f) {
      free(r);
      if (f) n->free_ev = f;
      st = FB_ERR(FB_ENOMEM, "rank %d: nccl watchdog: out of host memory", c->rank);
      goto out;
    }
    for (size_t i = 0; i < n->len; i++) r[i] = n->ring[(n->head + i) % n->cap];
    free(n->ring);
    n->ring = r;
    n->free_ev = f;
    n->head = 0;
    n->cap = cap;
    n->cap_free = cap;
  }
  cudaEvent_t ev;
  cudaError_t e = cudaSuccess;
  if (n->nfree > 0) ev = n->free_ev[--n->nfree];
  else e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(ev, s->s);
  if (e != cudaSuccess) {
    st = FB_ERR(FB_EDEVICE, "rank %d: %s: cudaEventRecord: %s", c->rank, fb_coll_name(op),
                cudaGetErrorString(e));
    goto out;
  }
  n->ring[(n->head + n->len) % n->cap] = (pending){.ev = ev, .t_enqueued = mono_s(), .op = op,
                                                   .count = count, .s = s, .seq = ++n->seq};
  n->len++;
out:
  pthread_mutex_unlock(&n->mu);
  return st;
}

/* ---- collectives ------------------------------------------------------------------------------ */
static fb_status nccl_type(const fb_comm *c, fb_dtype t, ncclDataType_t *out) {
  switch (t) {
  case FB_F32: *out = ncclFloat32; return FB_OK;
  case FB_BF16: *out = ncclBfloat16; return FB_OK;
  case FB_F64: *out = ncclFloat64; return FB_OK;
  case FB_U64: *out = ncclUint64; return FB_OK;
  case FB_I32: *out = ncclInt32; return FB_OK;
  case FB_I8: *out = ncclInt8; return FB_OK;
  default:
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: nccl: dtype %s is not supported", c->rank,
                  fb_dtype_name(t));
  }
}

/* Binds the device and takes call_mu for an NCCL call on c; fails fast (releasing it) when the
 * communicator failed earlier or was destroyed. `what` names the refused call. */
static fb_status lock_healthy(fb_comm *c, const char *what) {
  nccl_impl *n = c->impl;
  FB_TRY(fb_cuda_bind(c->dev));
  call_lock(c);
  char msg[512];
  int f = failed_status(n, msg, sizeof msg);
  if (f || !n->comm) {
    call_unlock(c);
    return FB_ERR(f ? (fb_status)f : FB_ECOMM, "rank %d: %s refused: the NCCL communicator "
                  "failed earlier (%s)", c->rank, what, f ? msg : "destroyed");
  }
  return FB_OK;
}

/* Takes call_mu for a collective; fails fast (releasing it) when the communicator failed. */
static fb_status coll_begin(fb_comm *c, fb_coll op) {
  return lock_healthy(c, fb_coll_name(op));
}

/* After the NCCL call: waits for a nonblocking enqueue, tracks the collective (at group_end
 * inside a group) and releases call_mu. */
static fb_status coll_end(fb_comm *c, fb_stream *s, fb_coll op, size_t count, ncclResult_t r,
                          const char *call) {
  nccl_impl *n = c->impl;
  fb_status st = FB_OK;
  if (r != ncclSuccess && r != ncclInProgress) {
    st = fail_call(c, call, r);
  } else if (n->group_depth > 0) {
    if (n->ngrp == n->cap_grp) {
      size_t cap = n->cap_grp ? 2 * n->cap_grp : 64;
      grp_op *v = realloc(n->grp, cap * sizeof *v);
      if (!v) {
        char msg[256];
        snprintf(msg, sizeof msg, "rank %d: %s: out of host memory tracking a group", c->rank,
                 fb_coll_name(op));
        fail(c, FB_ENOMEM, msg);
        st = FB_ERR(FB_ENOMEM, "%s", msg);
        goto out;
      }
      n->grp = v;
      n->cap_grp = cap;
    }
    n->grp[n->ngrp++] = (grp_op){.op = op, .count = count, .s = s};
  } else {
    if (r == ncclInProgress) st = wait_ready(c, call, call_bound(c));
    if (st == FB_OK) st = track(c, s, op, count);
  }
out:
  call_unlock(c);
  return st;
}

#define NCCL_COLL(c, s, op, count, call)                                                       \
  do {                                                                                         \
    FB_TRY(coll_begin(c, op));                                                                 \
    ncclResult_t r_ = (call);                                                                  \
    return coll_end(c, s, op, count, r_, #call);                                               \
  } while (0)

/* All-to-all as NCCL builds it: one grouped send and receive per peer (NCCL >= 2.7). */
static fb_status nccl_all_to_all(fb_comm *c, fb_stream *s, const fb_coll_call *a,
                                 ncclDataType_t dt) {
  nccl_impl *n = c->impl;
  const size_t b = a->count * fb_dtype_size(a->t);
  ncclResult_t r = ncclGroupStart();
  for (int j = 0; j < c->world && r == ncclSuccess; j++) {
    r = ncclSend((const char *)a->send + (size_t)j * b, a->count, dt, j, n->comm, s->s);
    if (r == ncclSuccess)
      r = ncclRecv((char *)a->recv + (size_t)j * b, a->count, dt, j, n->comm, s->s);
  }
  const ncclResult_t e = ncclGroupEnd();
  return coll_end(c, s, a->op, a->count, r != ncclSuccess ? r : e, "ncclSend/ncclRecv");
}

/* One collective onto NCCL (the wrapper in comm.c checked buffers, dtype and root). */
static fb_status nccl_issue(fb_comm *c, fb_stream *s, const fb_coll_call *a) {
  nccl_impl *n = c->impl;
  ncclDataType_t dt = ncclFloat32;
  if (a->op != FB_COLL_BARRIER) FB_TRY(nccl_type(c, a->t, &dt));
  switch (a->op) {
  case FB_COLL_ALL_GATHER:
    NCCL_COLL(c, s, a->op, a->count,
              ncclAllGather(a->send, a->recv, a->count, dt, n->comm, s->s));
  case FB_COLL_REDUCE_SCATTER:
    NCCL_COLL(c, s, a->op, a->count,
              ncclReduceScatter(a->send, a->recv, a->count, dt, ncclSum, n->comm, s->s));
  case FB_COLL_ALL_REDUCE:
    NCCL_COLL(c, s, a->op, a->count,
              ncclAllReduce(a->send, a->recv, a->count, dt, ncclSum, n->comm, s->s));
  case FB_COLL_BROADCAST:
    NCCL_COLL(c, s, a->op, a->count,
              ncclBroadcast(a->recv, a->recv, a->count, dt, a->root, n->comm, s->s));
  case FB_COLL_REDUCE:
    NCCL_COLL(c, s, a->op, a->count,
              ncclReduce(a->send, a->recv, a->count, dt, ncclSum, a->root, n->comm, s->s));
  case FB_COLL_ALL_TO_ALL: return nccl_all_to_all(c, s, a, dt);
  case FB_COLL_BARRIER:
    NCCL_COLL(c, s, a->op, 1,
              ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->comm, s->s));
  case FB_NCOLL: break;
  }
  return FB_ERR(FB_EINTERNAL, "rank %d: nccl: unknown collective %d", c->rank, (int)a->op);
}

/* group_start holds call_mu until group_end, so the whole group is issued by one thread
 * (NCCL's rule for groups) and the communicator cannot be aborted under an open group; the
 * caller must call group_end after every successful group_start, even after an error in
 * between (group_end then still closes NCCL's group before anything is aborted). */
static fb_status nccl_group_start(fb_comm *c) {
  nccl_impl *n = c->impl;
  FB_TRY(lock_healthy(c, "group"));
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    fb_status st = fail_call(c, "ncclGroupStart", r);
    call_unlock(c);
    return st;
  }
  if (n->group_depth++ == 0) n->ngrp = 0;
  return FB_OK; /* call_mu stays held until group_end */
}

static fb_status nccl_group_end(fb_comm *c) {
  nccl_impl *n = c->impl;
  /* call_mu is recursive: a trylock succeeds on the thread holding it (or when nobody does),
   * so this tells whether the calling thread is the one that opened the group */
  if (pthread_mutex_trylock(&n->call_mu) != 0)
    return FB_ERR(FB_EINTERNAL, "rank %d: nccl group_end on a thread that opened no group",
                  c->rank);
  const bool mine = n->depth > 0 && n->group_depth > 0;
  pthread_mutex_unlock(&n->call_mu);
  if (!mine) return FB_ERR(FB_EINTERNAL, "rank %d: nccl group_end without group_start", c->rank);
  fb_status st = FB_OK;
  ncclResult_t r = ncclGroupEnd();
  n->group_depth--;
  if (r != ncclSuccess && r != ncclInProgress) st = fail_call(c, "ncclGroupEnd", r);
  else if (n->group_depth == 0 && r == ncclInProgress)
    st = wait_ready(c, "ncclGroupEnd", call_bound(c));
  if (st == FB_OK && n->group_depth == 0) {
    for (size_t i = 0; i < n->ngrp && st == FB_OK; i++)
      st = track(c, n->grp[i].s, n->grp[i].op, n->grp[i].count);
    n->ngrp = 0;
  }
  call_unlock(c); /* the hold taken by group_start; aborts here if anything failed */
  return st;
}

static void nccl_destroy(fb_comm *c) {
  if (!c) return;
  nccl_impl *n = c->impl;
  (void)fb_cuda_bind(c->dev);
  if (n->watchdog_running) {
    pthread_mutex_lock(&n->mu);
    n->stop = true;
    pthread_cond_signal(&n->cv);
    pthread_mutex_unlock(&n->mu);
    pthread_join(n->watchdog, NULL);
  }
  call_lock(c);
  if (n->group_depth > 0) {
    /* a group left open by an error path: close it so NCCL's group state is clean, then
     * treat the communicator as failed */
    while (n->group_depth > 0) {
      (void)ncclGroupEnd();
      n->group_depth--;
      n->depth--;
      pthread_mutex_unlock(&n->call_mu);
    }
    char msg[256];
    snprintf(msg, sizeof msg, "rank %d: nccl communicator destroyed with a group open", c->rank);
    fail(c, FB_EINTERNAL, msg);
  }
  if (n->comm && !n->aborted) {
    if (failed_status(n, NULL, 0)) {
      abort_locked(c);
    } else {
      /* nonblocking finalize: flushes what was issued; poll with a bound, abort past it */
      const double bound = c->timeout_s > 0 ? c->timeout_s : 60;
      ncclResult_t r = ncclCommFinalize(n->comm);
      bool ok = r == ncclSuccess || r == ncclInProgress;
      const double deadline = mono_s() + bound;
      while (ok) {
        ncclResult_t ar = ncclSuccess;
        if (ncclCommGetAsyncError(n->comm, &ar) != ncclSuccess || (ar != ncclSuccess &&
                                                                   ar != ncclInProgress)) {
          ok = false;
          r = ar;
          break;
        }
        if (ar == ncclSuccess) break;
        if (mono_s() > deadline) {
          ok = false;
          r = ncclInProgress;
          break;
        }
        usleep(1000);
      }
      if (ok) {
        ncclCommDestroy(n->comm);
      } else {
        fprintf(stderr, "fsdpbench: rank %d: ncclCommFinalize %s; aborting the communicator\n",
                c->rank, r == ncclInProgress ? "did not complete in time" : ncclGetErrorString(r));
        ncclCommAbort(n->comm);
      }
      n->comm = NULL;
    }
  }
  n->depth--;
  pthread_mutex_unlock(&n->call_mu);
  for (size_t i = 0; i < n->len; i++) cudaEventDestroy(n->ring[(n->head + i) % n->cap].ev);
  for (size_t i = 0; i < n->nfree; i++) cudaEventDestroy(n->free_ev[i]);
  free(n->ring);
  free(n->free_ev);
  free(n->grp);
  cudaFree(n->one);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  pthread_mutex_destroy(&n->call_mu);
  free(n);
  free(c);
}

static fb_status nccl_split(fb_comm *c, int color, int key, int size, fb_comm **out);

const fb_comm_ops fb_nccl_comm_ops = {
    .name = "nccl",
    .issue = nccl_issue,
    .group_start = nccl_group_start,
    .group_end = nccl_group_end,
    .split = nccl_split,
    .destroy = nccl_destroy,
    .host_memory = false, /* device buffers go straight to NCCL: never staged */
};

/* Polls a nonblocking communicator being created (init or split) until it is ready; aborts it
 * on failure or past the bound. */
static fb_status poll_new(int rank, int world, ncclComm_t comm, double timeout_s,
                          const char *what) {
  const double bound = timeout_s > 0 ? (timeout_s < 30 ? 30 : timeout_s) : 300;
  const double deadline = mono_s() + bound;
  for (;;) {
    ncclResult_t ar = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &ar);
    if (r != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
      fb_status st = nccl_err(rank, what, r != ncclSuccess ? r : ar, comm);
      ncclCommAbort(comm);
      return st;
    }
    if (ar == ncclSuccess) return FB_OK;
    if (mono_s() > deadline) {
      ncclCommAbort(comm);
      return FB_ERR(FB_ETIMEOUT, "rank %d: %s: the %d ranks did not connect within %.0f s", rank,
                    what, world, bound);
    }
    usleep(1000);
  }
}

/* Creates a nonblocking communicator and polls its initialisation with a bound. */
static fb_status init_comm(int rank, int world, const ncclUniqueId *id, double timeout_s,
                           ncclComm_t *out) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, world, *id, rank, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) {
    fb_status st = nccl_err(rank, "ncclCommInitRankConfig", r, NULL);
    if (comm) ncclCommAbort(comm);
    return st;
  }
  FB_TRY(poll_new(rank, world, comm, timeout_s, "ncclCommInitRankConfig"));
  *out = comm;
  return FB_OK;
}

/* Frees what impl_new made (no NCCL communicator, no watchdog yet). */
static void impl_free(fb_comm *c) {
  nccl_impl *n = c->impl;
  if (n->one) cudaFree(n->one);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  pthread_mutex_destroy(&n->call_mu);
  free(n);
  free(c);
}

/* An fb_comm for (rank, world) on dev before it has an NCCL communicator: its locks and the
 * barrier scalar. */
static fb_status impl_new(fb_device *dev, int rank, int world, double timeout_s, fb_comm **out) {
  fb_comm *c = calloc(1, sizeof *c);
  nccl_impl *n = calloc(1, sizeof *n);
  if (!c || !n) {
    free(c);
    free(n);
    return FB_ERR(FB_ENOMEM, "rank %d: nccl communicator: out of host memory", rank);
  }
  *c = (fb_comm){.ops = &fb_nccl_comm_ops, .impl = n, .rank = rank, .world = world, .dev = dev,
                 .timeout_s = timeout_s};
  pthread_mutexattr_t ma;
  bool mu_ok = false, call_ok = false, cv_ok = false;
  if (pthread_mutexattr_init(&ma) == 0) {
    if (pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE) == 0)
      call_ok = pthread_mutex_init(&n->call_mu, &ma) == 0;
    pthread_mutexattr_destroy(&ma);
  }
  mu_ok = pthread_mutex_init(&n->mu, NULL) == 0;
  cv_ok = pthread_cond_init(&n->cv, NULL) == 0;
  if (!mu_ok || !call_ok || !cv_ok) {
    if (cv_ok) pthread_cond_destroy(&n->cv);
    if (mu_ok) pthread_mutex_destroy(&n->mu);
    if (call_ok) pthread_mutex_destroy(&n->call_mu);
    free(n);
    free(c);
    return FB_ERR(FB_EINTERNAL, "rank %d: pthread init failed", rank);
  }
  cudaError_t e = cudaMalloc(&n->one, sizeof(float));
  if (e == cudaSuccess) e = cudaMemset(n->one, 0, sizeof(float));
  if (e != cudaSuccess) {
    impl_free(c);
    return FB_ERR(FB_EDEVICE, "rank %d: cudaMalloc(barrier scalar): %s", rank,
                  cudaGetErrorString(e));
  }
  *out = c;
  return FB_OK;
}

/* Gives c its ready NCCL communicator and starts the watchdog; on failure aborts comm (never
 * blocks, unlike destroy on a communicator peers still use) and frees c. */
static fb_status impl_start(fb_comm *c, ncclComm_t comm, fb_comm **out) {
  nccl_impl *n = c->impl;
  n->comm = comm;
  if (pthread_create(&n->watchdog, NULL, watchdog_main, c) != 0) {
    int rank = c->rank;
    ncclCommAbort(comm);
    impl_free(c);
    return FB_ERR(FB_EINTERNAL, "rank %d: nccl watchdog: pthread_create failed", rank);
  }
  n->watchdog_running = true;
  *out = c;
  return FB_OK;
}

/* ncclCommSplit under the parent's call_mu (the abort protocol: no NCCL call on the parent
 * outside it), then the child polled to readiness and wrapped in its own fb_comm. */
static fb_status nccl_split(fb_comm *c, int color, int key, int size, fb_comm **out) {
  (void)size;
  nccl_impl *n = c->impl;
  FB_TRY(lock_healthy(c, "split"));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t child = NULL;
  ncclResult_t r = ncclCommSplit(n->comm, color, key, &child, &cfg);
  fb_status st = FB_OK;
  if (r != ncclSuccess && r != ncclInProgress) st = fail_call(c, "ncclCommSplit", r);
  else if (r == ncclInProgress) st = wait_ready(c, "ncclCommSplit", call_bound(c));
  if (st == FB_OK && !child)
    st = FB_ERR(FB_ECOMM, "rank %d: ncclCommSplit (color %d) returned no communicator", c->rank,
                color);
  else if (st == FB_OK) st = poll_new(c->rank, c->world, child, c->timeout_s, "ncclCommSplit");
  else if (child) ncclCommAbort(child);
  call_unlock(c);
  FB_TRY(st);
  int rank = 0, count = 0;
  if (ncclCommUserRank(child, &rank) != ncclSuccess || ncclCommCount(child, &count) != ncclSuccess) {
    ncclCommAbort(child);
    return FB_ERR(FB_ECOMM, "rank %d: ncclCommSplit: cannot query the new communicator", c->rank);
  }
  fb_comm *sub = NULL;
  fb_status st2 = impl_new(c->dev, rank, count, c->timeout_s, &sub);
  if (st2 != FB_OK) {
    ncclCommAbort(child);
    return st2;
  }
  return impl_start(sub, child, out);
}

fb_status fb_comm_nccl_create(fb_device *dev, double timeout_s, fb_comm **out) {
  *out = NULL;
  if (!dev || dev->ops != &fb_cuda_device_ops)
    return FB_ERR(FB_EUSAGE, "--comm nccl needs --backend cuda (got %s)",
                  dev ? dev->ops->name : "no device");
  const int rank = dev->rank, world = dev->world;
  FB_TRY(fb_cuda_bind(dev));
  if (world > 1 && ranks_are_threads()) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    if (world > count)
      return FB_ERR(FB_EUNSUPPORTED, "rank %d: --comm nccl with %d ranks in one process needs "
                    "one GPU per rank (%d visible; NCCL cannot put two ranks on one GPU): use "
                    "fewer ranks or a launcher", rank, world, count);
  }
  fb_comm *c = NULL;
  FB_TRY(impl_new(dev, rank, world, timeout_s, &c));
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclComm_t comm = NULL;
  fb_status st = bootstrap(rank, world, timeout_s, &id);
  if (st == FB_OK) st = init_comm(rank, world, &id, timeout_s, &comm);
  if (st != FB_OK) {
    impl_free(c);
    return st;
  }
  return impl_start(c, comm, out);
}
