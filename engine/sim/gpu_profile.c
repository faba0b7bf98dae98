/* GPU name -> hardware profile (gpu_profile.h). The names are those cudaGetDeviceProperties and
 * the driver report ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA H100 PCIe",
 * "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA GH200 480GB") and those the datasets use ("H100-SXM",
 * "A100-SXM4-80GB", "H100 (SXM, HBM2e, 500W)" with a memory column). The rules go from the most
 * specific to the least, first match wins; a card no profile models (its peak, its links) maps
 * to none rather than to a near one. */
#include "gpu_profile.h"

#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct gpu_rule {
  const char *has;    /* a word of the name (case-insensitive, not inside a longer word) */
  const char *also;   /* a second word, or NULL */
  int mem_lo, mem_hi; /* the stated memory (GB) must lie here; 0 = any */
  const char *profile;/* NULL: no profile */
  const char *why;
} gpu_rule;

static const gpu_rule rules[] = {
    {.has = "GH200", .why = "a Grace Hopper GH200: no profile describes it"},
    {.has = "GB200", .why = "a Blackwell GB200: no profile describes it"},
    {.has = "B200", .why = "a Blackwell B200: no profile describes it"},
    {.has = "B100", .why = "a Blackwell B100: no profile describes it"},
    {.has = "PCIe", .why = "a PCIe card: the profiles model SXM boards on NVLink (h100-nvl aside); "
                            "--hardware a100 or h100 gives their peak"},
    {.has = "H200", .also = "NVL", .why = "an H200 NVL: no profile describes it"},
    {.has = "H200", .profile = "h200", .why = "an H200 SXM 141 GB"},
    {.has = "H100", .also = "NVL", .profile = "h100-nvl", .why = "an H100 NVL 94 GB"},
    {.has = "H100", .also = "HBM2e", .profile = "h100-96gb", .why = "an H100 SXM 96 GB (HBM2e)"},
    {.has = "H100", .also = "96GB", .profile = "h100-96gb", .why = "an H100 SXM 96 GB"},
    {.has = "H100", .mem_lo = 90, .mem_hi = 100, .profile = "h100-96gb",
     .why = "an H100 SXM 96 GB"},
    {.has = "H100", .profile = "h100", .why = "an H100 SXM 80 GB"},
    {.has = "A100", .also = "40GB", .profile = "a100-40gb", .why = "an A100 SXM4 40 GB"},
    {.has = "A100", .mem_lo = 40, .mem_hi = 40, .profile = "a100-40gb",
     .why = "an A100 SXM4 40 GB"},
    {.has = "A100", .profile = "a100", .why = "an A100 SXM4 80 GB (or of unstated memory)"},
    {.has = "V100", .mem_lo = 1, .mem_hi = 31, .why = "a V100 16 GB: no profile describes it"},
    {.has = "V100", .also = "16GB", .why = "a V100 16 GB: no profile describes it"},
    {.has = "V100", .profile = "v100",
     .why = "a V100 SXM2/SXM3 32 GB (or of unstated memory)"},
};

/* Whether `word` occurs in s as a token of its own, ignoring case: not inside a longer
 * alphanumeric run ("H200" is not in "GH200", "NVL" not in "NVLink4"; "40GB" is in
 * "A100-SXM4-40GB"). */
static bool has(const char *s, const char *word) {
  const size_t w = strlen(word);
  for (const char *p = s; *p; p++) {
    if (p > s && isalnum((unsigned char)p[-1])) continue;
    size_t i = 0;
    while (i < w && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)word[i])) i++;
    if (i == w && !isalnum((unsigned char)p[w])) return true;
  }
  return false;
}

const char *fb_gpu_profile_for(const char *gpu, int mem_gb, char *why, size_t n) {
  const char *g = gpu ? gpu : "";
  for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
    const gpu_rule *r = &rules[i];
    if (!has(g, r->has) || (r->also && !has(g, r->also))) continue;
    if (r->mem_lo && (mem_gb < r->mem_lo || mem_gb > r->mem_hi)) continue;
    if (why && n) snprintf(why, n, "%s", r->why);
    return r->profile;
  }
  if (why && n) snprintf(why, n, "no profile describes it");
  return NULL;
}
