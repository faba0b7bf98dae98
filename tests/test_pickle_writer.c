/* The pickle writer (traces/pickle_writer.h): the exact bytes of a small pickle (opcodes and
 * int/float encodings, checked without Python), then, when python3 is present, a pickle with
 * every kind of value, edge-case ints and floats, non-ASCII text and lists and dicts longer
 * than one batch, loaded by Python's pickle and compared value by value. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "traces/pickle_writer.h"

/* {"a": [1, -1, 300, 70000, 2**40, True, False, None, 1.5]} */
static void test_bytes(void) {
  static const unsigned char want[] = {
      0x80, 0x02, '}', '(', 'X', 1, 0, 0, 0, 'a', ']', '(', 'K', 1, 'J', 0xff, 0xff, 0xff, 0xff,
      'M', 0x2c, 0x01, 'J', 0x70, 0x11, 0x01, 0x00, 0x8a, 8, 0, 0, 0, 0, 0, 1, 0, 0, 0x88,
      0x89, 'N', 'G', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 'e', 'u', '.'};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL, "open_memstream");
  if (!f) return;
  fb_pkl p;
  fb_pkl_begin(&p, f);
  fb_pkl_dict(&p);
  fb_pkl_key(&p, "a");
  fb_pkl_list(&p);
  fb_pkl_int(&p, 1);
  fb_pkl_int(&p, -1);
  fb_pkl_int(&p, 300);
  fb_pkl_int(&p, 70000);
  fb_pkl_int(&p, INT64_C(1) << 40);
  fb_pkl_bool(&p, true);
  fb_pkl_bool(&p, false);
  fb_pkl_none(&p);
  fb_pkl_float(&p, 1.5);
  fb_pkl_close(&p);
  fb_pkl_close(&p);
  fb_pkl_end(&p);
  fclose(f);
  CHECK(len == sizeof want && memcmp(buf, want, len) == 0, "bytes differ (%zu vs %zu)", len,
        sizeof want);
  free(buf);
}

static bool have_python(void) { return system("python3 -c 'import pickle' 2>/dev/null") == 0; }

enum { NLONG = 2500 };

static void write_long(const char *path) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL, "open %s", path);
  if (!f) return;
  fb_pkl p;
  fb_pkl_begin(&p, f);
  fb_pkl_dict(&p);
  fb_pkl_key(&p, "ints");
  fb_pkl_list(&p);
  const int64_t edge[] = {0, 255, 256, 65535, 65536, INT32_MAX, (int64_t)INT32_MAX + 1,
                          INT32_MIN, (int64_t)INT32_MIN - 1, INT64_MAX, INT64_MIN, -300};
  for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) fb_pkl_int(&p, edge[i]);
  fb_pkl_close(&p);
  fb_pkl_key(&p, "floats");
  fb_pkl_list(&p);
  fb_pkl_float(&p, 0.1);
  fb_pkl_float(&p, -2.5e300);
  fb_pkl_float(&p, 5e-324);
  fb_pkl_close(&p);
  fb_pkl_key(&p, "text");
  fb_pkl_str(&p, "h\xc3\xa9 \"q\" \\ \n");
  fb_pkl_key(&p, "null");
  fb_pkl_str(&p, NULL);
  fb_pkl_key(&p, "empty");
  fb_pkl_list(&p);
  fb_pkl_dict(&p);
  fb_pkl_close(&p);
  fb_pkl_list(&p);
  fb_pkl_close(&p);
  fb_pkl_close(&p);
  fb_pkl_key(&p, "long");
  fb_pkl_list(&p);
  for (int i = 0; i < NLONG; i++) {
    fb_pkl_dict(&p);
    fb_pkl_key(&p, "i");
    fb_pkl_int(&p, i);
    fb_pkl_close(&p);
  }
  fb_pkl_close(&p);
  fb_pkl_key(&p, "wide");
  fb_pkl_dict(&p);
  for (int i = 0; i < NLONG; i++) {
    char k[16];
    snprintf(k, sizeof k, "k%d", i);
    fb_pkl_key(&p, k);
    fb_pkl_int(&p, -i);
  }
  fb_pkl_close(&p);
  fb_pkl_close(&p);
  fb_pkl_end(&p);
  CHECK(ferror(f) == 0, "write error");
  fclose(f);
}

static void test_python(void) {
  if (!have_python()) {
    fprintf(stderr, "test_pickle_writer: python3 missing, the load check is skipped\n");
    return;
  }
  char path[] = "/tmp/fb_test_pickle_XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0, "mkstemp");
  if (fd < 0) return;
  close(fd);
  write_long(path);
  char cmd[2048];
  snprintf(cmd, sizeof cmd,
           "python3 -c 'import pickle,sys\n"
           "d = pickle.load(open(sys.argv[1], \"rb\"))\n"
           "want = {\"ints\": [0, 255, 256, 65535, 65536, 2**31-1, 2**31, -2**31, -2**31-1,"
           " 2**63-1, -2**63, -300], \"floats\": [0.1, -2.5e300, 5e-324],"
           " \"text\": \"h?? \\\"q\\\" \\\\ \\n\", \"null\": None, \"empty\": [{}, []],"
           " \"long\": [{\"i\": i} for i in range(%d)],"
           " \"wide\": {\"k%%d\" %% i: -i for i in range(%d)}}\n"
           "bad = [k for k in want if d.get(k) != want[k]] + sorted(set(d) - set(want))\n"
           "print(\"differs:\", bad, file=sys.stderr) if bad else None\n"
           "sys.exit(1 if bad else 0)' %s",
           NLONG, NLONG, path);
  CHECK(system(cmd) == 0, "python's pickle.load gives back what was written");
  unlink(path);
}

int main(void) {
  test_bytes();
  test_python();
  return fb_test_done("test_pickle_writer");
}
