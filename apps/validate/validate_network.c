/* `validate --dataset` on training-run files: the network a row's interconnect column states,
 * as the two profile keys the simulator prices it by (nics_per_node, nic_gbps; see
 * validate_rows.h, ds_row_network). It reads text and assumes what the text leaves out, saying
 * so; it runs nothing and prints nothing. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "validate_rows.h"

/* A source that leaves its network out but names the machines it rented. */
typedef struct net_fact {
  const char *source_id;
  int nics;
  double gbps;
  const char *why;
} net_fact;

static const net_fact net_facts[] = {
    {"oumi-pr213", 1, 50,
     "network not stated (GCP A100 40 GB VMs, 4 GPUs each): 1 x 50 Gb/s, GCP's a2-highgpu-4g "
     "bandwidth (GCP's A2 machine-type table)"},
    {"zeropp-tutorial", 1, 100,
     "fabric not stated (4 nodes of 16 V100-SXM3): 1 x 100 Gb/s assumed, the ZeRO++ "
     "evaluation's low-bandwidth setting (its blog's 'IB: 1'), and the rate the log's own "
     "timers imply: the ZeRO-3 forward (3356 ms) is one all-gather of 36 GB of fp16 weights, "
     "the ZeRO++ one (1795 ms) of half as many int8 bytes, ~11 GB/s per node either way"},
};

/* A number at s (digits, maybe a fraction); its end in *end, NaN when none. */
static double number_at(const char *s, const char **end) {
  char *e;
  if (!isdigit((unsigned char)*s)) return *end = s, NAN;
  double v = strtod(s, &e);
  *end = e;
  return v;
}

static const char *skip_spaces(const char *s) {
  while (*s == ' ') s++;
  return s;
}

/* "N x G Gb" (or "N * GGb"): N adapters of G Gb/s. */
static bool count_times_speed(const char *text, int *nics, double *gbps) {
  for (const char *p = text; *p; p++) {
    if (p > text && isalnum((unsigned char)p[-1])) continue;
    const char *e;
    double a = number_at(p, &e);
    if (isnan(a) || a != floor(a)) continue;
    e = skip_spaces(e);
    if (*e != 'x' && *e != '*') continue;
    double b = number_at(skip_spaces(e + 1), &e);
    if (isnan(b) || strncasecmp(skip_spaces(e), "Gb", 2)) continue;
    *nics = (int)a;
    *gbps = b;
    return true;
  }
  return false;
}

/* "G Gb/s ... per node", "G Gbps cross-node", "3.2 Tbps": a total, its adapters not counted. */
static bool total_speed(const char *text, double *gbps) {
  for (const char *p = text; *p; p++) {
    if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '.')) continue;
    const char *e;
    double g = number_at(p, &e);
    if (isnan(g) || !(g > 0)) continue;
    if (!strncasecmp(skip_spaces(e), "Gb", 2)) return *gbps = g, true;
    if (!strncasecmp(skip_spaces(e), "Tb", 2)) return *gbps = g * 1000, true;
  }
  return false;
}

bool ds_row_network(const char *text, const char *src, const fb_hardware *hw, int gpn,
                    int world, ds_network *net, char *why, size_t n) {
  const double nic = hw->nic_bw * 8e-9; /* the profile's adapter, Gb/s */
  double total;
  char buf[200];
  if (count_times_speed(text, &net->nics, &net->gbps)) return true;
  if (total_speed(text, &total)) {
    int k = nic > 0 ? (int)lround(total / nic) : 0;
    if (k >= 1 && fabs(k * nic - total) < 1e-6 * total) {
      net->nics = k;
      net->gbps = nic;
    } else {
      net->nics = 1;
      net->gbps = total;
    }
    snprintf(buf, sizeof buf, "adapter count not stated: %d x %.0f Gb/s per node (the stated "
             "%.0f Gb/s in adapters of the profile's speed)", net->nics, net->gbps, total);
    ds_append(why, n, buf);
    return true;
  }
  for (size_t i = 0; i < sizeof net_facts / sizeof net_facts[0]; i++)
    if (!strcmp(src, net_facts[i].source_id)) {
      net->nics = net_facts[i].nics;
      net->gbps = net_facts[i].gbps;
      ds_append(why, n, net_facts[i].why);
      return false;
    }
  /* the profile's adapters per GPU, on this row's node */
  const int per = hw->nics_per_node > 0 ? hw->nics_per_node : hw->devices_per_node;
  net->nics = (int)fmax(1, lround((double)per * gpn / hw->devices_per_node));
  net->gbps = nic > 0 ? nic : hw->inter_bw * 8e-9 * hw->devices_per_node / per;
  if (world > gpn) {
    snprintf(buf, sizeof buf, "network bandwidth not stated: %d x %.0f Gb/s per node (the "
             "profile's adapters per GPU, %d GPUs per node)", net->nics, net->gbps, gpn);
    ds_append(why, n, buf);
  }
  return false;
}
