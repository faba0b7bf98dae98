/* zero3's inter-tensor partition: every tensor owned exactly once, loads add up, the greedy
 * largest-first rule is followed step by step (checked against an independent re-derivation
 * with a sorted order), the result is deterministic, the imbalance is max/mean and within the
 * greedy bound (max <= mean + largest tensor), for the debug and gpt2-124m models and
 * W in {1,2,3,4,8}. It does not run any training (see the equivalence tests). */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/config/config.h"
#include "engine/model/model.h"
#include "strategies/zero3_partition.h"

static const fb_model *g_model; /* for the qsort comparator */

static int by_size_desc(const void *a, const void *b) {
  const fb_param *x = &g_model->params[*(const int *)a], *y = &g_model->params[*(const int *)b];
  if (x->numel != y->numel) return x->numel > y->numel ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static void check_model(const char *name, const int *worlds, int nw) {
  fb_model_spec spec;
  fb_model m;
  memset(&m, 0, sizeof m);
  CHECK_OK(fb_model_spec_load(name, &spec));
  CHECK_OK(fb_model_build(&spec, &m));
  if (m.nparams <= 0) {
    CHECK(0, "%s: model has no parameters", name);
    return;
  }
  const int P = m.nparams;
  int *owner = malloc((size_t)P * sizeof *owner), *owner2 = malloc((size_t)P * sizeof *owner2);
  int *order = malloc((size_t)P * sizeof *order);
  int64_t load[8], load2[8], ref[8];
  for (int i = 0; i < P; i++) order[i] = i;
  g_model = &m;
  qsort(order, (size_t)P, sizeof *order, by_size_desc);
  int64_t total = 0, largest = 0;
  for (int i = 0; i < P; i++) {
    total += m.params[i].numel;
    if (m.params[i].numel > largest) largest = m.params[i].numel;
  }

  for (int wi = 0; wi < nw; wi++) {
    const int W = worlds[wi];
    fb_zero3_partition(&m, W, owner, load);

    /* every tensor owned exactly once, by a valid rank; loads are the owned sums */
    int64_t sum[8] = {0};
    int bad = 0;
    for (int i = 0; i < P; i++) {
      if (owner[i] < 0 || owner[i] >= W) bad++;
      else sum[owner[i]] += m.params[i].numel;
    }
    CHECK(bad == 0, "%s W=%d: %d tensors without a valid owner", name, W, bad);
    int64_t lsum = 0;
    for (int w = 0; w < W; w++) {
      CHECK(sum[w] == load[w], "%s W=%d rank %d: load %lld but owns %lld elements", name, W, w,
            (long long)load[w], (long long)sum[w]);
      lsum += load[w];
    }
    CHECK(lsum == total, "%s W=%d: loads sum to %lld, model has %lld", name, W,
          (long long)lsum, (long long)total);

    /* the greedy rule, re-derived: largest first (ties by id), least-loaded rank (ties low) */
    for (int w = 0; w < W; w++) ref[w] = 0;
    int mismatch = 0;
    for (int j = 0; j < P; j++) {
      const int i = order[j];
      int to = 0;
      for (int w = 1; w < W; w++)
        if (ref[w] < ref[to]) to = w;
      if (owner[i] != to) mismatch++;
      ref[to] += m.params[i].numel;
    }
    CHECK(mismatch == 0, "%s W=%d: %d tensors differ from largest-first greedy", name, W,
          mismatch);

    /* deterministic */
    fb_zero3_partition(&m, W, owner2, load2);
    CHECK(!memcmp(owner, owner2, (size_t)P * sizeof *owner), "%s W=%d: owners differ between runs",
          name, W);

    /* imbalance = max / mean; greedy guarantees max <= mean + largest tensor */
    int64_t max = 0;
    for (int w = 0; w < W; w++)
      if (load[w] > max) max = load[w];
    const double mean = (double)total / W;
    const double imb = fb_zero3_imbalance(load, W);
    CHECK_CLOSE(imb, (double)max / mean, 1e-12, 0);
    CHECK(imb >= 1.0 - 1e-12, "%s W=%d: imbalance %g < 1", name, W, imb);
    CHECK((double)max <= mean + (double)largest, "%s W=%d: max load %lld above mean %.1f + %lld",
          name, W, (long long)max, mean, (long long)largest);
    if (W == 1) CHECK(imb == 1.0, "%s W=1: imbalance %g", name, imb);
    /* every rank owns something when there are at least as many tensors as ranks */
    if (P >= W)
      for (int w = 0; w < W; w++)
        CHECK(load[w] > 0, "%s W=%d: rank %d owns nothing", name, W, w);
    printf("%s W=%d: %d tensors, imbalance %.4f\n", name, W, P, imb);
  }
  /* gpt2-124m at W=2 is close to balanced: the largest tensor (the embedding) is ~30% */
  if (!strcmp(name, "gpt2-124m")) {
    fb_zero3_partition(&m, 2, owner, load);
    CHECK(fb_zero3_imbalance(load, 2) < 1.35, "gpt2-124m W=2: imbalance %g",
          fb_zero3_imbalance(load, 2));
  }
  free(owner);
  free(owner2);
  free(order);
  fb_model_free(&m);
}

int main(void) {
  const int worlds[] = {1, 2, 3, 4, 8};
  check_model("debug", worlds, 5);
  check_model("gpt2-124m", worlds, 5);

  /* hand-made model, sizes by id {5, 10, 3, 7, 5}, 2 ranks: the expected owners by hand */
  fb_param ps[5];
  memset(ps, 0, sizeof ps);
  const int64_t sz[5] = {5, 10, 3, 7, 5};
  for (int i = 0; i < 5; i++) {
    ps[i].id = i;
    ps[i].numel = sz[i];
  }
  fb_model tiny;
  memset(&tiny, 0, sizeof tiny);
  tiny.params = ps;
  tiny.nparams = 5;
  int owner[5];
  int64_t load[2];
  fb_zero3_partition(&tiny, 2, owner, load);
  /* order: 10(id1) r0, 7(id3) r1, 5(id0) r1 -> 12, 5(id4) r0 -> 15, 3(id2) r1 -> 15 */
  const int want[5] = {1, 0, 1, 1, 0};
  for (int i = 0; i < 5; i++)
    CHECK(owner[i] == want[i], "tiny: param %d owned by %d, want %d", i, owner[i], want[i]);
  CHECK(load[0] == 15 && load[1] == 15, "tiny: loads %lld %lld", (long long)load[0],
        (long long)load[1]);
  CHECK(fb_zero3_imbalance(load, 2) == 1.0, "tiny: imbalance %g", fb_zero3_imbalance(load, 2));
  return fb_test_done("test_zero3_partition");
}
