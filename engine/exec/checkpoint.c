/* Sharded checkpoints (see checkpoint.h): shard files, the manifest, verification and the
 * range-by-range load that reshards. Host I/O with POSIX calls; device data moves through
 * fb_copy_d2h / fb_copy_h2d on the compute stream. */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../comm/comm.h"
#include "../core/crc32.h"
#include "fault.h"

#define MAGIC "FBCKPT1"
enum { HAS_M = 1, HAS_V = 2 };

typedef struct rec_hdr {
  uint32_t unit, pad;
  int64_t start, n;
} rec_hdr;

typedef struct shard_hdr {
  char magic[8];
  uint32_t version, rank, nrec, flags;
} shard_hdr;

/* ---- small I/O helpers --------------------------------------------------------------------- */

static fb_status write_crc(int fd, const void *buf, size_t n, uint32_t *crc, const char *path) {
  const char *p = buf;
  *crc = fb_crc32(*crc, buf, n);
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return FB_ERR(FB_EIO, "checkpoint: writing %s: %s", path, strerror(errno));
    p += w, n -= (size_t)w;
  }
  return FB_OK;
}

static fb_status read_at(int fd, void *buf, size_t n, off_t off, const char *path) {
  char *p = buf;
  while (n > 0) {
    ssize_t got = pread(fd, p, n, off);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      return FB_ERR(FB_EUSAGE, "--resume: %s is truncated (the checkpoint is incomplete)", path);
    p += got, n -= (size_t)got, off += got;
  }
  return FB_OK;
}

static fb_status sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return FB_ERR(FB_EIO, "checkpoint: cannot open %s: %s", dir, strerror(errno));
  int rc = fsync(fd);
  close(fd);
  return rc ? FB_ERR(FB_EIO, "checkpoint: fsync %s: %s", dir, strerror(errno)) : FB_OK;
}

/* Removes a directory tree this module made; never follows a symbolic link. */
static int rm_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb)) return -1;
  if (!S_ISDIR(sb.st_mode)) return unlink(path);
  DIR *d = opendir(path);
  if (!d) return -1;
  struct dirent *e;
  char sub[4096];
  while ((e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
    rm_tree(sub);
  }
  closedir(d);
  return rmdir(path);
}

/* ---- the destination ------------------------------------------------------------------- */

/* A save replaces only an older checkpoint of the same step: a real directory (not a symbolic
 * link) holding a regular manifest.json. Anything else at DIR/step-<N> is the user's. */
static fb_status check_step_dest(const char *final) {
  struct stat sb, mb;
  if (lstat(final, &sb) != 0) {
    if (errno == ENOENT) return FB_OK;
    return FB_ERR(FB_EUSAGE, "--ckpt: cannot write '%s': %s", final, strerror(errno));
  }
  char manifest[4200];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", final);
  if (S_ISDIR(sb.st_mode) && lstat(manifest, &mb) == 0 && S_ISREG(mb.st_mode)) return FB_OK;
  return FB_ERR(FB_EUSAGE, "--ckpt: '%s' exists and is not a checkpoint (%s); a save replaces "
                "only an older checkpoint of the same step (remove it or choose another --ckpt)",
                final, S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ?
                "a directory without a regular manifest.json" : "not a directory");
}

/* Whether the runner saves after `n` steps of a run over (start, steps]. */
static bool saves_at(int n, int start, int steps, int save_every) {
  return n > start && n <= steps && ((save_every > 0 && n % save_every == 0) || n == steps);
}

fb_status fb_ckpt_check_dir(const char *dir, int start, int steps, int save_every) {
  DIR *d = opendir(dir);
  if (!d) return FB_OK; /* created by the save */
  fb_status st = FB_OK;
  struct dirent *e;
  while (st == FB_OK && (e = readdir(d))) {
    char *end = NULL;
    if (strncmp(e->d_name, "step-", 5) || e->d_name[5] < '0' || e->d_name[5] > '9') continue;
    long n = strtol(e->d_name + 5, &end, 10);
    if (*end || n > steps || !saves_at((int)n, start, steps, save_every)) continue;
    char final[4200];
    snprintf(final, sizeof final, "%s/%s", dir, e->d_name);
    st = check_step_dest(final);
  }
  closedir(d);
  return st;
}

/* ---- ranks agree ------------------------------------------------------------------------- */

/* True on every rank when `ok` holds on every rank (an all-reduce of failures). */
static fb_status all_ok(fb_rank *r, bool ok, bool *out) {
  uint64_t bad = ok ? 0 : 1;
  fb_device *d = r->dev;
  void *buf = NULL;
  FB_TRY(d->ops->alloc(d, r->commst, sizeof bad, FB_MEM_TEMP, &buf));
  fb_status st = fb_copy_h2d(d, r->commst, buf, &bad, sizeof bad);
  if (st == FB_OK && r->world > 1)
    st = fb_comm_unrecorded(r->comm, r->commst, FB_COLL_ALL_REDUCE, buf, buf, 1, FB_U64, 0);
  if (st == FB_OK) st = fb_copy_d2h(d, r->commst, &bad, buf, sizeof bad);
  d->ops->free(d, buf, sizeof bad, FB_MEM_TEMP, r->commst);
  *out = bad == 0;
  return st;
}

/* ---- save ---------------------------------------------------------------------------------- */

static int state_flags(const fb_state_range *v, int n) {
  int f = 0;
  for (int i = 0; i < n; i++) f |= (v[i].m ? HAS_M : 0) | (v[i].v ? HAS_V : 0);
  return f;
}

/* Writes this rank's shard as tmpdir/rank-R.bin (via a temporary name, fsync'd). */
static fb_status write_shard(fb_rank *r, const char *tmpdir, const fb_state_range *v, int n,
                             uint32_t *crc_out, int64_t *bytes_out) {
  char path[4300], final[4200];
  snprintf(final, sizeof final, "%s/rank-%05d.bin", tmpdir, r->rank);
  snprintf(path, sizeof path, "%s.tmp", final);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FB_ERR(FB_EIO, "checkpoint: cannot create %s: %s", path, strerror(errno));
  const int flags = state_flags(v, n);
  shard_hdr h = {.version = 1, .rank = (uint32_t)r->rank, .nrec = (uint32_t)n, .flags = (uint32_t)flags};
  memcpy(h.magic, MAGIC, sizeof MAGIC);
  uint32_t crc = 0;
  fb_status st = write_crc(fd, &h, sizeof h, &crc, path);
  for (int i = 0; i < n && st == FB_OK; i++) {
    rec_hdr rh = {.unit = (uint32_t)v[i].unit, .start = v[i].start, .n = v[i].n};
    st = write_crc(fd, &rh, sizeof rh, &crc, path);
  }
  float *host = NULL;
  for (int i = 0; i < n && st == FB_OK; i++) {
    float *tmp = realloc(host, (size_t)v[i].n * sizeof *host + 1);
    if (!tmp) { st = FB_ERR(FB_ENOMEM, "checkpoint: out of host memory"); break; }
    host = tmp;
    const float *src[3] = {v[i].p, flags & HAS_M ? v[i].m : NULL, flags & HAS_V ? v[i].v : NULL};
    for (int k = 0; k < 3 && st == FB_OK; k++) {
      if (k > 0 && !(flags & (k == 1 ? HAS_M : HAS_V))) continue;
      if (src[k]) st = fb_copy_d2h(r->dev, r->compute, host, src[k], (size_t)v[i].n * 4);
      else memset(host, 0, (size_t)v[i].n * 4);
      if (st == FB_OK) st = write_crc(fd, host, (size_t)v[i].n * 4, &crc, path);
    }
  }
  free(host);
  uint32_t c = crc;
  if (st == FB_OK) st = write_crc(fd, &c, sizeof c, &crc, path);
  if (st == FB_OK && fsync(fd)) st = FB_ERR(FB_EIO, "checkpoint: fsync %s: %s", path, strerror(errno));
  struct stat sb;
  if (st == FB_OK && fstat(fd, &sb) == 0) *bytes_out = (int64_t)sb.st_size;
  if (close(fd) && st == FB_OK) st = FB_ERR(FB_EIO, "checkpoint: closing %s: %s", path, strerror(errno));
  if (st == FB_OK && rename(path, final))
    st = FB_ERR(FB_EIO, "checkpoint: rename %s: %s", path, strerror(errno));
  if (st != FB_OK) unlink(path);
  *crc_out = c;
  return st;
}

/* Rank 0: the manifest, from every shard's size and CRC (read back from the files). */
static fb_status write_manifest(fb_rank *r, const char *tmpdir, int steps_done) {
  char path[4300], final[4200];
  snprintf(final, sizeof final, "%s/manifest.json", tmpdir);
  snprintf(path, sizeof path, "%s.tmp", final);
  FILE *f = fopen(path, "w");
  if (!f) return FB_ERR(FB_EIO, "checkpoint: cannot create %s: %s", path, strerror(errno));
  fprintf(f, "{\n  \"format\": \"fsdpbench-checkpoint-1\",\n  \"step\": %d,\n  \"world\": %d,\n"
             "  \"strategy\": \"%s\",\n  \"model\": \"%s\",\n  \"numel\": %lld,\n"
             "  \"optimizer\": \"%s\",\n  \"shards\": [\n",
          steps_done, r->world, r->strategy->name, r->cfg->model, (long long)r->model->numel,
          r->cfg->optimizer);
  fb_status st = FB_OK;
  for (int k = 0; k < r->world && st == FB_OK; k++) {
    char shard[4200];
    snprintf(shard, sizeof shard, "%s/rank-%05d.bin", tmpdir, k);
    int fd = open(shard, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) || sb.st_size < 4) {
      st = FB_ERR(FB_EIO, "checkpoint: shard %s is missing", shard);
    } else {
      uint32_t crc = 0;
      st = read_at(fd, &crc, 4, sb.st_size - 4, shard);
      fprintf(f, "    {\"file\": \"rank-%05d.bin\", \"bytes\": %lld, \"crc32\": %u}%s\n", k,
              (long long)sb.st_size, crc, k + 1 < r->world ? "," : "");
    }
    if (fd >= 0) close(fd);
  }
  fprintf(f, "  ]\n}\n");
  if (fflush(f) || fsync(fileno(f))) st = st ? st : FB_ERR(FB_EIO, "checkpoint: writing %s: %s", path, strerror(errno));
  if (fclose(f) && st == FB_OK) st = FB_ERR(FB_EIO, "checkpoint: writing %s: %s", path, strerror(errno));
  if (st == FB_OK && rename(path, final)) st = FB_ERR(FB_EIO, "checkpoint: rename %s: %s", path, strerror(errno));
  return st;
}

fb_status fb_ckpt_save(fb_rank *r, const char *dir, int steps_done) {
  if (!r->strategy->state_ranges)
    return FB_ERR(FB_EUNSUPPORTED, "--ckpt: strategy %s cannot save its state", r->strategy->name);
  char tmpdir[4096], final[4096];
  snprintf(tmpdir, sizeof tmpdir, "%s/.step-%d.tmp", dir, steps_done);
  snprintf(final, sizeof final, "%s/step-%d", dir, steps_done);
  fb_state_range *v = NULL;
  int n = 0;
  FB_TRY(r->strategy->state_ranges(r, true, &v, &n));
  FB_TRY(fb_stream_sync(r->dev, r->compute));
  if (r->rank == 0) rm_tree(tmpdir); /* a leftover of an interrupted save */
  bool ok = true;
  FB_TRY(all_ok(r, true, &ok)); /* nobody creates before rank 0 cleaned */
  fb_status st = FB_OK;
  if ((mkdir(dir, 0755) && errno != EEXIST) || (mkdir(tmpdir, 0755) && errno != EEXIST))
    st = FB_ERR(FB_EIO, "checkpoint: cannot create %s: %s", tmpdir, strerror(errno));
  uint32_t crc = 0;
  int64_t bytes = 0;
  if (st == FB_OK) st = write_shard(r, tmpdir, v, n, &crc, &bytes);
  free(v);
  fb_fault_point(r->rank, steps_done, FB_FAULT_SAVE); /* tests only (FSDPBENCH_FAULT) */
  char why[512] = "";
  if (st != FB_OK) snprintf(why, sizeof why, "%s", fb_error_msg());
  FB_TRY(all_ok(r, st == FB_OK, &ok));
  if (ok && r->rank == 0) {
    st = write_manifest(r, tmpdir, steps_done);
    if (st == FB_OK) st = sync_dir(tmpdir);
    if (st == FB_OK) st = check_step_dest(final);
    if (st == FB_OK) rm_tree(final); /* an older save of the same step is replaced */
    if (st == FB_OK && rename(tmpdir, final))
      st = FB_ERR(FB_EIO, "checkpoint: rename %s: %s", tmpdir, strerror(errno));
    if (st == FB_OK) st = sync_dir(dir);
    if (st != FB_OK) snprintf(why, sizeof why, "%s", fb_error_msg());
  }
  bool committed = false;
  FB_TRY(all_ok(r, r->rank != 0 || (ok && st == FB_OK), &committed));
  if (committed) return FB_OK;
  if (r->rank == 0) rm_tree(tmpdir);
  return FB_ERR(FB_EIO, "checkpoint step-%d not written (%s); earlier checkpoints in %s are "
                "unchanged", steps_done, why[0] ? why : "another rank could not write its shard",
                dir);
}

/* ---- manifest ------------------------------------------------------------------------------ */

typedef struct manifest {
  fb_ckpt_info info;
  int nshards;
  struct { char file[64]; int64_t bytes; uint32_t crc; } *shard;
} manifest;

static fb_status read_manifest(const char *stepdir, const char *flag, manifest *m) {
  memset(m, 0, sizeof *m);
  char path[4200], line[1024];
  snprintf(path, sizeof path, "%s/manifest.json", stepdir);
  FILE *f = fopen(path, "r");
  if (!f) return FB_ERR(FB_EUSAGE, "%s: %s has no manifest.json (not a complete checkpoint)", flag, stepdir);
  bool format = false;
  m->info.step = m->info.world = -1;
  while (fgets(line, sizeof line, f)) {
    char file[64];
    long long bytes;
    unsigned crc;
    if (strstr(line, "\"fsdpbench-checkpoint-1\"")) format = true;
    sscanf(line, " \"step\": %d", &m->info.step);
    sscanf(line, " \"world\": %d", &m->info.world);
    sscanf(line, " \"strategy\": \"%31[^\"]\"", m->info.strategy);
    sscanf(line, " \"model\": \"%511[^\"]\"", m->info.model);
    sscanf(line, " \"optimizer\": \"%15[^\"]\"", m->info.optimizer);
    long long ne;
    if (sscanf(line, " \"numel\": %lld", &ne) == 1) m->info.numel = ne;
    if (sscanf(line, " {\"file\": \"%63[^\"]\", \"bytes\": %lld, \"crc32\": %u}", file, &bytes, &crc) == 3) {
      void *t = realloc(m->shard, (size_t)(m->nshards + 1) * sizeof *m->shard);
      if (!t) { fclose(f); free(m->shard); return FB_ERR(FB_ENOMEM, "out of host memory"); }
      m->shard = t;
      snprintf(m->shard[m->nshards].file, sizeof m->shard[0].file, "%s", file);
      m->shard[m->nshards].bytes = bytes;
      m->shard[m->nshards++].crc = crc;
    }
  }
  fclose(f);
  if (!format || m->info.step < 0 || m->info.world < 1 || m->nshards != m->info.world || strchr(stepdir, '\n')) {
    free(m->shard);
    m->shard = NULL;
    return FB_ERR(FB_EUSAGE, "%s: %s is not a valid fsdpbench checkpoint manifest", flag, path);
  }
  return FB_OK;
}

static int step_of(const char *name) {
  int s = -1, len = 0;
  return sscanf(name, "step-%d%n", &s, &len) == 1 && name[len] == 0 && s >= 0 ? s : -1;
}

fb_status fb_ckpt_resolve(const char *path, const char *flag, char *out, size_t n) {
  char mf[4200];
  snprintf(mf, sizeof mf, "%s/manifest.json", path);
  if (access(mf, R_OK) == 0) {
    snprintf(out, n, "%s", path);
    return FB_OK;
  }
  DIR *d = opendir(path);
  if (!d) return FB_ERR(FB_EUSAGE, "%s: cannot open '%s': %s (want a checkpoint directory)", flag, path, strerror(errno));
  int best = -1;
  struct dirent *e;
  while ((e = readdir(d))) {
    int s = step_of(e->d_name);
    snprintf(mf, sizeof mf, "%s/%s/manifest.json", path, e->d_name);
    if (s > best && access(mf, R_OK) == 0) best = s;
  }
  closedir(d);
  if (best < 0) return FB_ERR(FB_EUSAGE, "%s: '%s' holds no complete checkpoint (step-N/manifest.json)", flag, path);
  snprintf(out, n, "%s/step-%d", path, best);
  return FB_OK;
}

fb_status fb_ckpt_read_info(const char *stepdir, fb_ckpt_info *info) {
  manifest m;
  FB_TRY(read_manifest(stepdir, "checkpoint", &m));
  *info = m.info;
  free(m.shard);
  return FB_OK;
}

/* ---- verified shards and their records ----------------------------------------------------- */

typedef struct shard {
  int fd;
  char path[4200];
  uint32_t nrec, flags;
  rec_hdr *rec;
  off_t *data; /* offset of each record's p (m and v follow) */
} shard;

static fb_status open_shard(const char *stepdir, const char *flag, const char *file, int64_t bytes,
                            uint32_t crc, shard *s) {
  memset(s, 0, sizeof *s);
  snprintf(s->path, sizeof s->path, "%s/%s", stepdir, file);
  s->fd = open(s->path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (s->fd < 0 || fstat(s->fd, &sb) || !S_ISREG(sb.st_mode) || sb.st_size != bytes)
    return FB_ERR(FB_EUSAGE, "%s: %s is missing or has the wrong size (the checkpoint is corrupt)", flag, s->path);
  /* the whole file's CRC, then the stored one */
  uint32_t c = 0, stored = 0;
  char buf[1 << 16];
  for (off_t off = 0; off < bytes - 4;) {
    size_t k = (size_t)(bytes - 4 - off) < sizeof buf ? (size_t)(bytes - 4 - off) : sizeof buf;
    FB_TRY(read_at(s->fd, buf, k, off, s->path));
    c = fb_crc32(c, buf, k);
    off += (off_t)k;
  }
  FB_TRY(read_at(s->fd, &stored, 4, bytes - 4, s->path));
  if (c != stored || c != crc)
    return FB_ERR(FB_EUSAGE, "%s: %s fails its checksum (the checkpoint is corrupt)", flag, s->path);
  shard_hdr h;
  FB_TRY(read_at(s->fd, &h, sizeof h, 0, s->path));
  if (memcmp(h.magic, MAGIC, sizeof MAGIC) || h.version != 1 || h.nrec > (1u << 24))
    return FB_ERR(FB_EUSAGE, "%s: %s is not an fsdpbench shard", flag, s->path);
  s->nrec = h.nrec, s->flags = h.flags;
  s->rec = calloc(h.nrec + 1, sizeof *s->rec);
  s->data = calloc(h.nrec + 1, sizeof *s->data);
  if (!s->rec || !s->data) return FB_ERR(FB_ENOMEM, "out of host memory");
  if (h.nrec) FB_TRY(read_at(s->fd, s->rec, h.nrec * sizeof *s->rec, sizeof h, s->path));
  const int per = 1 + !!(h.flags & HAS_M) + !!(h.flags & HAS_V);
  off_t off = (off_t)(sizeof h + h.nrec * sizeof *s->rec);
  for (uint32_t i = 0; i < h.nrec; i++) {
    if (s->rec[i].n < 0 || s->rec[i].start < 0)
      return FB_ERR(FB_EUSAGE, "%s: %s has a bad record", flag, s->path);
    s->data[i] = off;
    off += (off_t)(s->rec[i].n * 4 * per);
  }
  if (off != bytes - 4) return FB_ERR(FB_EUSAGE, "%s: %s: records do not match its size", flag, s->path);
  return FB_OK;
}

static void close_shards(shard *s, int n) {
  for (int i = 0; s && i < n; i++) {
    if (s[i].fd >= 0) close(s[i].fd);
    free(s[i].rec);
    free(s[i].data);
  }
  free(s);
}

static fb_status open_all(const char *stepdir, const char *flag, manifest *m, shard **out) {
  shard *s = calloc((size_t)m->nshards, sizeof *s);
  if (!s) return FB_ERR(FB_ENOMEM, "out of host memory");
  for (int i = 0; i < m->nshards; i++) s[i].fd = -1;
  for (int i = 0; i < m->nshards; i++) {
    fb_status st = open_shard(stepdir, flag, m->shard[i].file, m->shard[i].bytes, m->shard[i].crc, &s[i]);
    if (st != FB_OK) {
      close_shards(s, m->nshards);
      return st;
    }
  }
  *out = s;
  return FB_OK;
}

/* Fills host[0..n) (which = 0 p, 1 m, 2 v) for unit u's elements [start, start+n) from the
 * shards; counts the elements found in *covered. */
static fb_status fill(shard *s, int ns, int u, int64_t start, int64_t n, int which, float *host,
                      int64_t *covered) {
  *covered = 0;
  for (int i = 0; i < ns; i++) {
    if (which == 1 && !(s[i].flags & HAS_M)) continue;
    if (which == 2 && !(s[i].flags & HAS_V)) continue;
    for (uint32_t k = 0; k < s[i].nrec; k++) {
      const rec_hdr *rh = &s[i].rec[k];
      if ((int)rh->unit != u) continue;
      int64_t lo = rh->start > start ? rh->start : start;
      int64_t hi = rh->start + rh->n < start + n ? rh->start + rh->n : start + n;
      if (lo >= hi) continue;
      off_t off = s[i].data[k] + (off_t)(which == 0 ? 0 : which == 1 ? rh->n * 4
                                  : rh->n * 4 * (1 + !!(s[i].flags & HAS_M)));
      FB_TRY(read_at(s[i].fd, host + (lo - start), (size_t)(hi - lo) * 4,
                     off + (off_t)(lo - rh->start) * 4, s[i].path));
      *covered += hi - lo;
    }
  }
  return FB_OK;
}

static fb_status load_range(fb_rank *r, shard *s, int ns, const fb_state_range *v, bool params_only,
                            const char *flag) {
  float *host = malloc((size_t)v->n * sizeof *host + 1);
  if (!host) return FB_ERR(FB_ENOMEM, "out of host memory");
  fb_status st = FB_OK;
  float *dst[3] = {v->p, params_only ? NULL : v->m, params_only ? NULL : v->v};
  for (int k = 0; k < 3 && st == FB_OK; k++) {
    if (!dst[k]) continue;
    int64_t covered = 0;
    st = fill(s, ns, v->unit, v->start, v->n, k, host, &covered);
    if (st == FB_OK && covered != v->n)
      st = FB_ERR(FB_EUSAGE, "%s: the checkpoint covers %lld of the %lld %s elements of unit %d "
                  "this rank needs (another model or optimizer?)", flag, (long long)covered,
                  (long long)v->n, k == 0 ? "parameter" : "optimizer", v->unit);
    if (st == FB_OK) st = fb_copy_h2d(r->dev, r->compute, dst[k], host, (size_t)v->n * 4);
  }
  free(host);
  return st;
}

fb_status fb_ckpt_load(fb_rank *r, const char *stepdir, bool params_only, int *steps_done) {
  const char *flag = params_only ? "--init-from" : "--resume";
  if (!r->strategy->state_ranges)
    return FB_ERR(FB_EUNSUPPORTED, "%s: strategy %s cannot load a state", flag, r->strategy->name);
  manifest m;
  FB_TRY(read_manifest(stepdir, flag, &m));
  fb_status st = FB_OK;
  if (m.info.numel != r->model->numel)
    st = FB_ERR(FB_EUSAGE, "%s: the checkpoint holds model '%s' (%lld parameters), this run is '%s' "
                "(%lld)", flag, m.info.model, (long long)m.info.numel, r->cfg->model,
                (long long)r->model->numel);
  else if (!params_only && strcmp(m.info.optimizer, r->cfg->optimizer))
    st = FB_ERR(FB_EUSAGE, "%s: the checkpoint's optimizer is %s, this run's %s", flag,
                m.info.optimizer, r->cfg->optimizer);
  shard *s = NULL;
  if (st == FB_OK) st = open_all(stepdir, flag, &m, &s);
  fb_state_range *v = NULL;
  int n = 0;
  if (st == FB_OK) st = r->strategy->state_ranges(r, false, &v, &n);
  for (int i = 0; i < n && st == FB_OK; i++) st = load_range(r, s, m.nshards, &v[i], params_only, flag);
  if (st == FB_OK) st = fb_stream_sync(r->dev, r->compute);
  if (st == FB_OK && r->strategy->state_loaded) st = r->strategy->state_loaded(r);
  free(v);
  close_shards(s, m.nshards);
  *steps_done = m.info.step;
  free(m.shard);
  return st;
}

fb_status fb_ckpt_read_params(const char *stepdir, const fb_model *mdl, float **unit_dst) {
  manifest m;
  FB_TRY(read_manifest(stepdir, "export", &m));
  shard *s = NULL;
  fb_status st = m.info.numel == mdl->numel ? open_all(stepdir, "export", &m, &s)
                 : FB_ERR(FB_EUSAGE, "export: the checkpoint's model has %lld parameters, model "
                          "'%s' %lld", (long long)m.info.numel, m.info.model, (long long)mdl->numel);
  for (int u = 0; u < mdl->nunits && st == FB_OK; u++) {
    int64_t covered = 0;
    st = fill(s, m.nshards, u, 0, mdl->units[u].numel, 0, unit_dst[u], &covered);
    if (st == FB_OK && covered != mdl->units[u].numel)
      st = FB_ERR(FB_EUSAGE, "export: the checkpoint covers %lld of unit %d's %lld parameters",
                  (long long)covered, u, (long long)mdl->units[u].numel);
  }
  close_shards(s, m.nshards);
  free(m.shard);
  return st;
}
