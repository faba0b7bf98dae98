/* An output directory written whole or not at all (out_dir.h). */
#define _GNU_SOURCE
#include "out_dir.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json_out.h"

static volatile sig_atomic_t caught; /* SIGINT / SIGTERM seen while a set was open */
static struct sigaction old_int, old_term, old_xfsz;
static int holds; /* nesting depth of fb_out_signals_hold */

static void on_signal(int sig) { caught = sig; }

void fb_out_signals_hold(void) {
  if (holds++) return;
  struct sigaction act = {.sa_handler = on_signal, .sa_flags = SA_RESTART};
  struct sigaction ign = {.sa_handler = SIG_IGN};
  sigemptyset(&act.sa_mask);
  sigemptyset(&ign.sa_mask);
  caught = 0;
  sigaction(SIGINT, &act, &old_int);
  sigaction(SIGTERM, &act, &old_term);
  sigaction(SIGXFSZ, &ign, &old_xfsz);
}

void fb_out_signals_release(void) {
  if (holds <= 0 || --holds) return;
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGXFSZ, &old_xfsz, NULL);
  caught = 0;
}


int fb_out_dir_stopped(void) { return caught; }

fb_status fb_rm_tree(const char *path) {
  struct stat sb;
  if (lstat(path, &sb) != 0)
    return errno == ENOENT ? FB_OK
                           : FB_ERR(FB_EIO, "cannot remove '%s': %s", path, strerror(errno));
  if (S_ISDIR(sb.st_mode)) {
    DIR *d = opendir(path);
    if (!d) return FB_ERR(FB_EIO, "cannot remove '%s': %s", path, strerror(errno));
    struct dirent *e;
    fb_status st = FB_OK;
    while (st == FB_OK && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[PATH_MAX];
      if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub)
        st = FB_ERR(FB_EIO, "cannot remove '%s/%s': path too long", path, e->d_name);
      else st = fb_rm_tree(sub);
    }
    closedir(d);
    if (st != FB_OK) return st;
    if (rmdir(path) != 0) return FB_ERR(FB_EIO, "cannot remove '%s': %s", path, strerror(errno));
    return FB_OK;
  }
  if (unlink(path) != 0) return FB_ERR(FB_EIO, "cannot remove '%s': %s", path, strerror(errno));
  return FB_OK;
}

/* dest without trailing slashes split into parent and name; false for "/", "." or "..". */
static bool split(const char *dest, char *parent, size_t np, char *name, size_t nn) {
  char d[4096];
  snprintf(d, sizeof d, "%s", dest);
  size_t n = strlen(d);
  while (n > 1 && d[n - 1] == '/') d[--n] = '\0';
  char *slash = strrchr(d, '/');
  const char *base = slash ? slash + 1 : d;
  if (!*base || !strcmp(base, ".") || !strcmp(base, "..")) return false;
  snprintf(name, nn, "%s", base);
  if (!slash) snprintf(parent, np, ".");
  else if (slash == d) snprintf(parent, np, "/");
  else {
    *slash = '\0';
    snprintf(parent, np, "%s", d);
  }
  return true;
}

/* A fresh directory "<parent>/.<name>.<what>-XXXXXX" into buf. */
static fb_status temp_sibling(const char *dest, const char *what, char *buf, size_t n,
                              const char *flag) {
  char parent[4096], name[1024];
  if (!split(dest, parent, sizeof parent, name, sizeof name))
    return FB_ERR(FB_EUSAGE, "%s: '%s' cannot be replaced as a whole (want a directory's name, "
                  "not '/', '.' or '..')", flag, dest);
  if ((size_t)snprintf(buf, n, "%s/.%s.%s-XXXXXX", parent, name, what) >= n)
    return FB_ERR(FB_EUSAGE, "%s: path too long: '%s'", flag, dest);
  FB_TRY(fb_mkdir_p(parent));
  if (!mkdtemp(buf))
    return FB_ERR(errno == EACCES || errno == EROFS ? FB_EUSAGE : FB_EIO,
                  "%s: cannot create a directory beside '%s': %s", flag, dest, strerror(errno));
  return FB_OK;
}

fb_status fb_out_dir_check(const char *dest, const char *flag) {
  char parent[4096], name[1024];
  struct stat sb;
  if (lstat(dest, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return FB_ERR(FB_EUSAGE, "%s: '%s' exists and is not a directory (want a directory, which "
                  "is replaced as a whole)", flag, dest);
  if (!split(dest, parent, sizeof parent, name, sizeof name))
    return FB_ERR(FB_EUSAGE, "%s: '%s' cannot be replaced as a whole (want a directory's name, "
                  "not '/', '.' or '..')", flag, dest);
  while (stat(parent, &sb) != 0) { /* the nearest folder that exists is the one written */
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = '\0';
    else *slash = '\0';
  }
  if (!S_ISDIR(sb.st_mode) || access(parent, W_OK | X_OK) != 0)
    return FB_ERR(FB_EUSAGE, "%s: cannot create '%s': '%s' is not a writable directory", flag,
                  dest, parent);
  return FB_OK;
}

/* Whether `name` is one of the set's names, alone or behind a "rank<N>_" prefix. */
static bool owned(const char *const *ours, const char *name) {
  if (!ours) return true;
  if (!strncmp(name, "rank", 4)) {
    const char *p = name + 4;
    while (*p >= '0' && *p <= '9') p++;
    if (p > name + 4 && *p == '_') name = p + 1;
  }
  for (int i = 0; ours[i]; i++)
    if (!strcmp(name, ours[i])) return true;
  return false;
}

/* Moves the entries of dest that are not the set's (the user's own files beside it) into the
 * new set, so the swap keeps them; on failure moves back what it moved. */
static fb_status carry_over(fb_out_dir *o) {
  DIR *d = opendir(o->dest);
  if (!d) return FB_OK;
  char moved[64][256];
  int nm = 0;
  fb_status st = FB_OK;
  struct dirent *e;
  while (st == FB_OK && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || owned(o->ours, e->d_name)) continue;
    char from[PATH_MAX + 4416], to[PATH_MAX + 4416];
    snprintf(from, sizeof from, "%s/%s", o->dest, e->d_name);
    snprintf(to, sizeof to, "%s/%s", o->part, e->d_name);
    struct stat sb;
    if (lstat(to, &sb) == 0) continue; /* the new set has one: it wins */
    if (nm == 64 || strlen(e->d_name) >= sizeof moved[0] || rename(from, to) != 0)
      st = FB_ERR(FB_EIO, "%s: cannot keep '%s' in the new outputs: %s", o->flag, from,
                  nm == 64 ? "too many files of other programs there" : strerror(errno));
    else snprintf(moved[nm++], sizeof moved[0], "%s", e->d_name);
  }
  closedir(d);
  for (int i = 0; st != FB_OK && i < nm; i++) {
    char from[PATH_MAX + 4416], to[PATH_MAX + 4416];
    snprintf(from, sizeof from, "%s/%.255s", o->part, moved[i]);
    snprintf(to, sizeof to, "%s/%.255s", o->dest, moved[i]);
    (void)rename(from, to);
  }
  return st;
}

fb_status fb_out_dir_begin(fb_out_dir *o, const char *dest, const char *const *ours,
                           const char *flag) {
  memset(o, 0, sizeof *o);
  o->ours = ours;
  snprintf(o->flag, sizeof o->flag, "%s", flag);
  if (snprintf(o->dest, sizeof o->dest, "%s", dest) >= (int)sizeof o->dest)
    return FB_ERR(FB_EUSAGE, "%s: path too long: '%s'", flag, dest);
  struct stat sb;
  if (lstat(dest, &sb) == 0 && !S_ISDIR(sb.st_mode))
    return FB_ERR(FB_EUSAGE, "%s: '%s' exists and is not a directory (want a directory, which "
                  "is replaced as a whole)", flag, dest);
  FB_TRY(temp_sibling(dest, "part", o->part, sizeof o->part, flag));
  fb_out_signals_hold();
  o->active = true;
  return FB_OK;
}

const char *fb_out_dir_path(const fb_out_dir *o) { return o->part; }

void fb_out_dir_abort(fb_out_dir *o) {
  if (!o->active) return;
  o->active = false;
  (void)fb_rm_tree(o->part);
  fb_out_signals_release();
}

/* The one line a failed set ends with: what failed, and that dest is as it was. */
static fb_status left_as_it_was(fb_out_dir *o, fb_status st) {
  char why[1024];
  snprintf(why, sizeof why, "%s", fb_error_msg());
  static const char tail[] = ": nothing was written there"; /* a file's own (files.c) */
  const size_t n = strlen(why), nt = sizeof tail - 1;
  if (n > nt && !strcmp(why + n - nt, tail)) why[n - nt] = '\0';
  const char *in = strstr(why, o->part); /* name the folder the user knows */
  const int pre = in ? (int)(in - why) : (int)strlen(why);
  const char *post = in ? in + strlen(o->part) : "";
  struct stat sb;
  const bool was = lstat(o->dest, &sb) == 0;
  fb_out_dir_abort(o);
  return FB_ERR(st, "%.*s%s%s; %s %s%s", pre, why, in ? o->dest : "", post,
                was ? "the previous outputs in" : "nothing was written to", o->dest,
                was ? " are left as they were" : "");
}

fb_status fb_out_dir_fail(fb_out_dir *o, fb_status st) {
  if (!o->active) return st;
  return left_as_it_was(o, st);
}

fb_status fb_out_dir_commit(fb_out_dir *o) {
  if (!o->active) return FB_ERR(FB_EINTERNAL, "%s: no output set open", o->flag);
  if (caught) {
    (void)FB_ERR(FB_EINTERRUPTED, "%s: stopped by signal %d while writing '%s'", o->flag,
                 (int)caught, o->dest);
    return left_as_it_was(o, FB_EINTERRUPTED);
  }
  char old[4160] = "";
  struct stat sb;
  if (lstat(o->dest, &sb) == 0) {
    fb_status st = carry_over(o);
    if (st != FB_OK) return left_as_it_was(o, st);
    st = temp_sibling(o->dest, "old", old, sizeof old, o->flag);
    if (st != FB_OK) return left_as_it_was(o, st);
    if (rename(o->dest, old) != 0) {
      int e = errno;
      rmdir(old);
      (void)FB_ERR(FB_EIO, "%s: cannot move '%s' aside: %s", o->flag, o->dest, strerror(e));
      return left_as_it_was(o, FB_EIO);
    }
  }
  if (rename(o->part, o->dest) != 0) {
    int e = errno;
    if (old[0]) rename(old, o->dest);
    (void)FB_ERR(FB_EIO, "%s: cannot move the new outputs to '%s': %s", o->flag, o->dest,
                 strerror(e));
    return left_as_it_was(o, FB_EIO);
  }
  o->active = false;
  fb_status st = old[0] ? fb_rm_tree(old) : FB_OK;
  fb_out_signals_release();
  return st;
}

fb_status fb_out_dir_write(const char *dest, const char *const *ours, const char *flag,
                           fb_status (*write)(const char *dir, void *ctx), void *ctx) {
  fb_out_dir o;
  FB_TRY(fb_out_dir_begin(&o, dest, ours, flag));
  fb_status st = write(fb_out_dir_path(&o), ctx);
  if (st == FB_OK && fb_out_dir_stopped())
    st = FB_ERR(FB_EINTERRUPTED, "%s: stopped by signal %d while writing the outputs", flag,
                fb_out_dir_stopped());
  return st == FB_OK ? fb_out_dir_commit(&o) : fb_out_dir_fail(&o, st);
}
