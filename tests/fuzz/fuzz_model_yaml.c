/* libFuzzer target: a model YAML (models/NAME.yaml) through fb_model_spec_load, and, when it
 * loads, the parameter list built from it (fb_model_build: the dimension products). Any input
 * must end in FB_OK or one FB_EUSAGE line; it must not crash, leak, hang or allocate wildly. */
#include <assert.h>
#include <string.h>

#include "engine/config/config.h"
#include "engine/model/model.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *path = fuzz_write_file(data, size, ".yaml");
  fb_model_spec spec;
  memset(&spec, 0, sizeof spec);
  fb_status st = fb_model_spec_load(path, &spec);
  if (st != FB_OK) {
    assert(st == FB_EUSAGE);
    assert(fb_error_msg()[0] && !strchr(fb_error_msg(), '\n'));
    return 0;
  }
  fb_model m;
  if (fb_model_build(&spec, &m) == FB_OK) {
    assert(m.numel > 0 && m.nunits == 1 + spec.layers);
    fb_model_free(&m);
  }
  return 0;
}
