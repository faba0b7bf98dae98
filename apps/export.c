/* `fsdpbench export CKPT OUT.safetensors`: the full model of a checkpoint (any strategy, any
 * world size) as one safetensors file with the names its family's users expect
 * (engine/exec/safetensors.h). It does not export optimizer state. */
#include "export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/config/config.h"
#include "../engine/core/files.h"
#include "../engine/exec/checkpoint.h"
#include "../engine/exec/safetensors.h"

static fb_status export_run(const char *ckpt, const char *out) {
  char dir[4096];
  FB_TRY(fb_check_output(out, "export")); /* before the checkpoint is read */
  FB_TRY(fb_ckpt_resolve(ckpt, "export", dir, sizeof dir));
  fb_ckpt_info info;
  FB_TRY(fb_ckpt_read_info(dir, &info));
  fb_model_spec spec;
  FB_TRY(fb_model_spec_load(info.model, &spec));
  fb_model m;
  FB_TRY(fb_model_build(&spec, &m));
  float **unit = calloc((size_t)m.nunits, sizeof *unit);
  fb_status st = unit ? FB_OK : FB_ERR(FB_ENOMEM, "export: out of host memory");
  for (int u = 0; u < m.nunits && st == FB_OK; u++)
    if (!(unit[u] = calloc((size_t)m.units[u].numel + 1, sizeof **unit)))
      st = FB_ERR(FB_ENOMEM, "export: out of host memory");
  if (st == FB_OK) st = fb_ckpt_read_params(dir, &m, unit);
  char note[128];
  snprintf(note, sizeof note, "%s after %d steps (%s, %d ranks)", spec.name, info.step,
           info.strategy, info.world);
  if (st == FB_OK) st = fb_safetensors_write(out, &m, unit, note);
  double sum = 0;
  for (int i = 0; i < m.nparams && st == FB_OK; i++)
    for (int64_t j = 0; j < m.params[i].numel; j++)
      sum += unit[m.params[i].unit][m.params[i].offset + j];
  if (st == FB_OK)
    printf("export: %s -> %s: %d tensors, %lld fp32 parameters, sum %.17g\n", dir, out,
           m.nparams, (long long)m.numel, sum);
  for (int u = 0; unit && u < m.nunits; u++) free(unit[u]);
  free(unit);
  fb_model_free(&m);
  return st;
}

int fb_export_main(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: fsdpbench export CKPT OUT.safetensors\n"
           "Writes the parameters of checkpoint CKPT (a step-<N> directory, or a --ckpt directory:\n"
           "its newest) as fp32 safetensors with Hugging Face GPT-2 / Meta Llama tensor names.\n");
    return 0;
  }
  if (argc != 3) {
    fprintf(stderr, "fsdpbench: error: export: want `fsdpbench export CKPT OUT.safetensors`\n");
    return 2;
  }
  fb_status st = export_run(argv[1], argv[2]);
  if (st == FB_OK) return 0;
  fprintf(stderr, "fsdpbench: error: %s\n", fb_error_msg());
  return st == FB_EUSAGE ? 2 : st == FB_ENOMEM ? 3 : 1;
}
