/* Input and output file checks, and outputs written through a temporary (files.h). */
#include "files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

fb_status fb_check_input(const char *path, const char *flag, const char *want) {
  struct stat sb;
  if (stat(path, &sb) != 0)
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s (want %s)", flag, path, strerror(errno), want);
  if (!S_ISREG(sb.st_mode))
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': it is %s, not a regular file (want %s)", flag,
                  path, S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                  : "a device or socket", want);
  if (access(path, R_OK) != 0)
    return FB_ERR(FB_EUSAGE, "%s: cannot read '%s': %s (want %s)", flag, path, strerror(errno), want);
  return FB_OK;
}

/* What a non-regular file is, for the refusal line. */
static const char *kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return "not a regular file";
}

fb_status fb_check_output(const char *path, const char *flag) {
  struct stat sb;
  if (lstat(path, &sb) != 0) {
    if (errno == ENOENT) return FB_OK;
    return FB_ERR(FB_EUSAGE, "%s: cannot write '%s': %s", flag, path, strerror(errno));
  }
  if (S_ISREG(sb.st_mode)) return FB_OK;
  return FB_ERR(FB_EUSAGE, "%s: '%s' exists and is %s; fsdpbench replaces only regular files "
                "(remove it or write elsewhere)", flag, path, kind_of(sb.st_mode));
}

/* `name` less an optional "rank<digits>_" prefix. */
static const char *unprefixed(const char *name) {
  if (strncmp(name, "rank", 4)) return name;
  const char *p = name + 4;
  if (*p < '0' || *p > '9') return name;
  while (*p >= '0' && *p <= '9') p++;
  return *p == '_' ? p + 1 : name;
}

fb_status fb_check_output_dir(const char *dir, const char *const *names, const char *flag) {
  DIR *d = opendir(dir);
  if (!d) return FB_OK; /* missing (created later) or not a directory (its own error later) */
  fb_status st = FB_OK;
  struct dirent *e;
  while (st == FB_OK && (e = readdir(d))) {
    const char *base = unprefixed(e->d_name);
    for (int i = 0; names[i] && st == FB_OK; i++) {
      if (strcmp(base, names[i])) continue;
      char path[4096];
      int n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      if (n > 0 && (size_t)n < sizeof path) st = fb_check_output(path, flag);
    }
  }
  closedir(d);
  return st;
}

/* A fresh temporary beside `path`: ".<name>.<pid>-<n>.tmp" in the same directory (rename is
 * atomic only within one file system), created with O_EXCL so nothing existing is opened. */
static fb_status make_temp(fb_out_file *o) {
  static atomic_uint serial;
  const char *slash = strrchr(o->path, '/');
  const int dlen = slash ? (int)(slash - o->path) + 1 : 0;
  const char *name = slash ? slash + 1 : o->path;
  for (int tries = 0; tries < 100; tries++) {
    unsigned k = atomic_fetch_add(&serial, 1);
    int n = snprintf(o->tmp, sizeof o->tmp, "%.*s.%s.%ld-%u.tmp", dlen, o->path, name,
                     (long)getpid(), k);
    if (n < 0 || (size_t)n >= sizeof o->tmp)
      return FB_ERR(FB_EUSAGE, "%s: path too long: '%s'", o->flag, o->path);
    int fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0)
      return FB_ERR(FB_EIO, "%s: cannot write '%s': %s", o->flag, o->path, strerror(errno));
    o->f = fdopen(fd, "wb");
    if (o->f) return FB_OK;
    close(fd);
    unlink(o->tmp);
    return FB_ERR(FB_ENOMEM, "%s: cannot write '%s': out of host memory", o->flag, o->path);
  }
  return FB_ERR(FB_EIO, "%s: cannot write '%s': no free temporary name beside it", o->flag,
                o->path);
}

fb_status fb_out_open(fb_out_file *o, const char *path, const char *flag) {
  memset(o, 0, sizeof *o);
  snprintf(o->flag, sizeof o->flag, "%s", flag ? flag : "output");
  int n = snprintf(o->path, sizeof o->path, "%s", path);
  if (!*path || n < 0 || (size_t)n >= sizeof o->path)
    return FB_ERR(FB_EUSAGE, "%s: '%s' is not allowed (want a file name of 1 to %zu bytes)",
                  o->flag, path, sizeof o->path - 1);
  if (path[n - 1] == '/')
    return FB_ERR(FB_EUSAGE, "%s: '%s' names a directory (want a file)", o->flag, path);
  FB_TRY(fb_check_output(path, o->flag));
  return make_temp(o);
}

fb_status fb_out_commit(fb_out_file *o) {
  FILE *f = o->f;
  o->f = NULL;
  if (!f) return FB_ERR(FB_EINTERNAL, "%s: '%s' committed twice", o->flag, o->path);
  int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
  int e = errno;
  if (fclose(f) != 0 && !bad) {
    bad = 1;
    e = errno;
  }
  fb_status st = FB_OK;
  if (bad)
    st = FB_ERR(FB_EIO, "%s: write error on '%s' (%s; disk full?): nothing was written there",
                o->flag, o->path, strerror(e));
  if (st == FB_OK) st = fb_check_output(o->path, o->flag); /* it may have appeared meanwhile */
  if (st == FB_OK && rename(o->tmp, o->path) != 0)
    st = FB_ERR(FB_EIO, "%s: cannot write '%s': %s", o->flag, o->path, strerror(errno));
  if (st != FB_OK) unlink(o->tmp);
  return st;
}

void fb_out_discard(fb_out_file *o) {
  if (!o->f) return;
  fclose(o->f);
  o->f = NULL;
  unlink(o->tmp);
}
