/* Shared by the fuzz targets: the fuzz input written to one scratch file per process (the
 * parsers read paths, as the CLI gives them; in RAM where possible), removed at exit. It parses nothing itself. */
#ifndef FB_FUZZ_FILE_H
#define FB_FUZZ_FILE_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_path_[128];

/* RAM-backed /dev/shm where there is one (thousands of writes a second), else /tmp. */
static const char *fuzz_dir_(void) {
  return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

static void fuzz_remove_file_(void) {
  if (fuzz_path_[0]) unlink(fuzz_path_);
}

/* Writes data to the scratch file (created on first use, suffix e.g. ".yaml") and returns its
 * path; aborts when the file cannot be written (the fuzzer would otherwise test nothing). */
static const char *fuzz_write_file(const uint8_t *data, size_t size, const char *suffix) {
  if (!fuzz_path_[0]) {
    snprintf(fuzz_path_, sizeof fuzz_path_, "%s/fsdpb-fuzz-XXXXXX%s", fuzz_dir_(), suffix);
    int fd = mkstemps(fuzz_path_, (int)strlen(suffix));
    if (fd < 0) abort();
    close(fd);
    atexit(fuzz_remove_file_);
  }
  FILE *f = fopen(fuzz_path_, "wb");
  if (!f) abort();
  if (size && fwrite(data, 1, size, f) != size) abort();
  if (fclose(f)) abort();
  return fuzz_path_;
}

#endif
