/* libFuzzer target: a run configuration YAML (--config FILE) through fb_config_load_yaml and,
 * when it loads, fb_run_config_finalize (the cross-checks, which also load the model it names).
 * Nothing is run. Any input must end in FB_OK or one FB_EUSAGE line. */
#include <assert.h>
#include <string.h>

#include "engine/config/config.h"
#include "strategies/strategy.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file(data, size, ".yaml");
  fb_run_config c;
  fb_config_defaults(&c);
  fb_status st = fb_config_load_yaml(&c, path);
  if (st == FB_OK) st = fb_run_config_finalize(&c);
  if (st != FB_OK) {
    assert(st == FB_EUSAGE);
    assert(fb_error_msg()[0] && !strchr(fb_error_msg(), '\n'));
  }
  return 0;
}
