/* libFuzzer target: a command line. The input is split on NUL or newline into argv (at most
 * 64 arguments) and parsed by fb_config_parse_cli, then checked by fb_run_config_finalize as the
 * CLI does before a run; no run is started and nothing is printed. Any input must end in
 * FB_OK or one FB_EUSAGE line. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "engine/config/config.h"
#include "strategies/strategy.h"

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "fsdpbench";
  char *start = buf;
  for (size_t i = 0; i <= size && argc < MAX_ARGS + 1; i++) {
    if (i < size && buf[i] != '\n' && buf[i] != '\0') continue;
    if (i == size && start == buf + size && argc > 1) break; /* a trailing separator */
    buf[i] = 0;
    argv[argc++] = start;
    start = buf + i + 1;
  }
  argv[argc] = NULL;
  fb_run_config c;
  fb_config_defaults(&c);
  fb_cli_action action;
  fb_status st = fb_config_parse_cli(&c, argc, argv, 1, &action);
  if (st == FB_OK && action == FB_CLI_RUN) st = fb_run_config_finalize(&c);
  if (st != FB_OK) {
    assert(st == FB_EUSAGE);
    assert(fb_error_msg()[0] && !strchr(fb_error_msg(), '\n'));
  }
  free(buf);
  return 0;
}
