/* The nccl communicator: one process per GPU, NCCL collectives enqueued on the caller's CUDA
 * stream. Bootstrap: under mpirun (OMPI_COMM_WORLD_SIZE set, built with MPI) rank 0's
 * ncclUniqueId is broadcast over MPI_COMM_WORLD; otherwise a TCP rendezvous like torchrun's:
 * RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, rank 0 listens and sends the id to each peer.
 * A watchdog thread follows every collective with an event; one that has not completed after
 * timeout_s, or an asynchronous NCCL error, aborts the communicator and poisons the stream so
 * the next stream sync fails with a line naming the rank and the collective.
 * It does not choose the GPU (the cuda device does) nor record timings (comm.c wrappers). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
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

#include "../device/cuda_impl.h"
#include "../device/device_cuda.h"
#include "comm.h"

#define RDV_MAGIC 0x66736470u /* "fsdp" */

typedef struct pending {
  cudaEvent_t ev;
  double t_enqueued;
  fb_coll op;
  size_t count;
  fb_stream *s;
  uint64_t seq;
} pending;

typedef struct nccl_impl {
  ncclComm_t comm;
  void *one;                  /* device scalar for barrier */
  pthread_t watchdog;
  bool watchdog_running;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool stop;
  int aborted;                /* fb_status that aborted the communicator, 0 = healthy */
  char abort_msg[512];
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

/* Fills id on every rank. */
static fb_status bootstrap(int rank, int world, double timeout_s, ncclUniqueId *id) {
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(id);
    if (r != ncclSuccess) return nccl_err(rank, "ncclGetUniqueId", r, NULL);
  }
  if (world == 1) return FB_OK;
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
  double t = timeout_s > 0 ? timeout_s : 300;
  if (t < 30) t = 30; /* processes start at different times: give them a moment */
  return rank == 0 ? rendezvous_root(port, world, t, id)
                   : rendezvous_peer(addr, port, rank, world, t, id);
}

/* ---- watchdog -------------------------------------------------------------------------------- */
static void poison(fb_stream *s, fb_status st, const char *msg) {
  int expected = 0;
  if (__atomic_load_n(&s->poison, __ATOMIC_ACQUIRE) != 0) return;
  snprintf(s->poison_msg, sizeof s->poison_msg, "%s", msg);
  snprintf(s->poison_where, sizeof s->poison_where, "%s", __FILE__);
  __atomic_compare_exchange_n(&s->poison, &expected, (int)st, false, __ATOMIC_RELEASE,
                              __ATOMIC_RELAXED);
}

/* Called with mu held: aborts the communicator and poisons every stream with work in flight. */
static void abort_locked(fb_comm *c, fb_status st, const char *msg) {
  nccl_impl *n = c->impl;
  if (n->aborted) return;
  n->aborted = (int)st;
  snprintf(n->abort_msg, sizeof n->abort_msg, "%s", msg);
  fprintf(stderr, "fsdpbench: %s\n", msg);
  ncclCommAbort(n->comm); /* makes the stuck NCCL kernels return */
  for (size_t i = 0; i < n->len; i++) poison(n->ring[(n->head + i) % n->cap].s, st, msg);
}

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
    if (n->stop || n->aborted) continue;
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
        char msg[512];
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (%zu elements): cudaEventQuery: %s", c->rank,
                 fb_coll_name(p->op), (unsigned long long)p->seq, p->count,
                 cudaGetErrorString(e));
        abort_locked(c, FB_EDEVICE, msg);
      } else if (c->timeout_s > 0 && mono_s() - p->t_enqueued > c->timeout_s) {
        char msg[512];
        snprintf(msg, sizeof msg, "rank %d: %s #%llu (%zu elements) did not complete within "
                 "%.1f s (a peer may have died or diverged); NCCL communicator aborted", c->rank,
                 fb_coll_name(p->op), (unsigned long long)p->seq, p->count, c->timeout_s);
        abort_locked(c, FB_ETIMEOUT, msg);
      }
      break;
    }
    if (!n->aborted) {
      ncclResult_t ar = ncclSuccess;
      if (ncclCommGetAsyncError(n->comm, &ar) == ncclSuccess && ar != ncclSuccess &&
          ar != ncclInProgress) {
        char msg[512];
        snprintf(msg, sizeof msg, "rank %d: NCCL asynchronous error: %s", c->rank,
                 ncclGetErrorString(ar));
        abort_locked(c, FB_ECOMM, msg);
      }
    }
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
  default:
    return FB_ERR(FB_EUNSUPPORTED, "rank %d: nccl: dtype %s is not supported", c->rank,
                  fb_dtype_name(t));
  }
}

static fb_status check_alive(fb_comm *c, fb_coll op) {
  nccl_impl *n = c->impl;
  pthread_mutex_lock(&n->mu);
  int a = n->aborted;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", n->abort_msg);
  pthread_mutex_unlock(&n->mu);
  if (!a) return fb_cuda_bind(c->dev);
  return FB_ERR((fb_status)a, "rank %d: %s refused: the communicator was aborted (%s)", c->rank,
                fb_coll_name(op), msg);
}

#define NCCL_CALL(c, op, count, call)                                                          \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    if (r_ != ncclSuccess)                                                                     \
      return nccl_err((c)->rank, #call, r_, ((nccl_impl *)(c)->impl)->comm);                   \
    return track(c, s, op, count);                                                             \
  } while (0)

static fb_status nccl_all_gather(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                 size_t count, fb_dtype t) {
  ncclDataType_t dt = ncclFloat32;
  FB_TRY(check_alive(c, FB_COLL_ALL_GATHER));
  FB_TRY(nccl_type(c, t, &dt));
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_ALL_GATHER, count, ncclAllGather(send, recv, count, dt, n->comm, s->s));
}

static fb_status nccl_reduce_scatter(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                     size_t count, fb_dtype t) {
  ncclDataType_t dt = ncclFloat32;
  FB_TRY(check_alive(c, FB_COLL_REDUCE_SCATTER));
  FB_TRY(nccl_type(c, t, &dt));
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_REDUCE_SCATTER, count,
            ncclReduceScatter(send, recv, count, dt, ncclSum, n->comm, s->s));
}

static fb_status nccl_all_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv,
                                 size_t count, fb_dtype t) {
  ncclDataType_t dt = ncclFloat32;
  FB_TRY(check_alive(c, FB_COLL_ALL_REDUCE));
  FB_TRY(nccl_type(c, t, &dt));
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_ALL_REDUCE, count,
            ncclAllReduce(send, recv, count, dt, ncclSum, n->comm, s->s));
}

static fb_status nccl_broadcast(fb_comm *c, fb_stream *s, void *buf, size_t count, fb_dtype t,
                                int root) {
  ncclDataType_t dt = ncclFloat32;
  FB_TRY(check_alive(c, FB_COLL_BROADCAST));
  FB_TRY(nccl_type(c, t, &dt));
  if (root < 0 || root >= c->world)
    return FB_ERR(FB_EINTERNAL, "rank %d: broadcast: root %d out of range", c->rank, root);
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_BROADCAST, count, ncclBroadcast(buf, buf, count, dt, root, n->comm, s->s));
}

static fb_status nccl_reduce(fb_comm *c, fb_stream *s, const void *send, void *recv,
                             size_t count, fb_dtype t, int root) {
  ncclDataType_t dt = ncclFloat32;
  FB_TRY(check_alive(c, FB_COLL_REDUCE));
  FB_TRY(nccl_type(c, t, &dt));
  if (root < 0 || root >= c->world)
    return FB_ERR(FB_EINTERNAL, "rank %d: reduce: root %d out of range", c->rank, root);
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_REDUCE, count,
            ncclReduce(send, recv, count, dt, ncclSum, root, n->comm, s->s));
}

static fb_status nccl_barrier(fb_comm *c, fb_stream *s) {
  FB_TRY(check_alive(c, FB_COLL_BARRIER));
  nccl_impl *n = c->impl;
  NCCL_CALL(c, FB_COLL_BARRIER, 1,
            ncclAllReduce(n->one, n->one, 1, ncclFloat32, ncclSum, n->comm, s->s));
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
  if (n->aborted) {
    /* ncclCommAbort already released the communicator */
  } else {
    ncclResult_t r = ncclCommFinalize(n->comm);
    if (r != ncclSuccess)
      fprintf(stderr, "fsdpbench: rank %d: ncclCommFinalize: %s\n", c->rank,
              ncclGetErrorString(r));
    ncclCommDestroy(n->comm);
  }
  for (size_t i = 0; i < n->len; i++) cudaEventDestroy(n->ring[(n->head + i) % n->cap].ev);
  for (size_t i = 0; i < n->nfree; i++) cudaEventDestroy(n->free_ev[i]);
  free(n->ring);
  free(n->free_ev);
  cudaFree(n->one);
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
  free(n);
  free(c);
}

const fb_comm_ops fb_nccl_comm_ops = {
    .name = "nccl",
    .all_gather = nccl_all_gather,
    .reduce_scatter = nccl_reduce_scatter,
    .all_reduce = nccl_all_reduce,
    .broadcast = nccl_broadcast,
    .reduce = nccl_reduce,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

fb_status fb_comm_nccl_create(fb_device *dev, double timeout_s, fb_comm **out) {
  *out = NULL;
  if (!dev || dev->ops != &fb_cuda_device_ops)
    return FB_ERR(FB_EUSAGE, "--comm nccl needs --backend cuda (got %s)",
                  dev ? dev->ops->name : "no device");
  const int rank = dev->rank, world = dev->world;
  fb_status st = FB_OK;
  FB_TRY(fb_cuda_bind(dev));
  fb_comm *c = calloc(1, sizeof *c);
  nccl_impl *n = calloc(1, sizeof *n);
  if (!c || !n) {
    free(c);
    free(n);
    return FB_ERR(FB_ENOMEM, "rank %d: nccl communicator: out of host memory", rank);
  }
  *c = (fb_comm){.ops = &fb_nccl_comm_ops, .impl = n, .rank = rank, .world = world, .dev = dev,
                 .timeout_s = timeout_s};
  if (pthread_mutex_init(&n->mu, NULL) != 0 || pthread_cond_init(&n->cv, NULL) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: pthread init failed", rank);
    goto fail_free;
  }
  cudaError_t e = cudaMalloc(&n->one, sizeof(float));
  if (e == cudaSuccess) e = cudaMemset(n->one, 0, sizeof(float));
  if (e != cudaSuccess) {
    st = FB_ERR(FB_EDEVICE, "rank %d: cudaMalloc(barrier scalar): %s", rank,
                cudaGetErrorString(e));
    goto fail_sync;
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  FB_CHECK_GOTO(st, bootstrap(rank, world, timeout_s, &id), fail_one);
  ncclResult_t r = ncclCommInitRank(&n->comm, world, id, rank);
  if (r != ncclSuccess) {
    st = nccl_err(rank, "ncclCommInitRank", r, NULL);
    goto fail_one;
  }
  if (pthread_create(&n->watchdog, NULL, watchdog_main, c) != 0) {
    st = FB_ERR(FB_EINTERNAL, "rank %d: nccl watchdog: pthread_create failed", rank);
    goto fail_comm;
  }
  n->watchdog_running = true;
  *out = c;
  return FB_OK;

fail_comm:
  ncclCommDestroy(n->comm);
fail_one:
  cudaFree(n->one);
fail_sync:
  pthread_cond_destroy(&n->cv);
  pthread_mutex_destroy(&n->mu);
fail_free:
  free(n);
  free(c);
  return st;
}
