/* Run configuration and model files: defaults, YAML loading, flags overriding the file in any
 * order, every bad input -> FB_EUSAGE with one line naming the flag/key and the bad value,
 * --help covering every option, write/read round trip, and every shipped model loading with
 * the parameter count its public config implies. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../engine/config/config.h"
#include "check.h"
#include "strategies/strategy.h"

static char tmpdir[] = "/tmp/fb_test_config_XXXXXX";

/* Writes text to tmpdir/name and returns the path (static buffer rotation). */
static const char *write_file(const char *name, const char *text) {
  static char paths[8][512];
  static int next;
  char *p = paths[next++ % 8];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  FILE *f = fopen(p, "w");
  if (!f) {
    perror(p);
    exit(1);
  }
  fputs(text, f);
  fclose(f);
  return p;
}

/* defaults + flags (space-separated) + finalize. */
static fb_status run_cli(const char *line, fb_run_config *c, fb_cli_action *action) {
  char buf[2048];
  char *argv[64];
  int argc = 0;
  snprintf(buf, sizeof buf, "%s", line);
  argv[argc++] = "fsdpbench";
  for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
  argv[argc] = NULL;
  fb_config_defaults(c);
  fb_cli_action a;
  fb_status st = fb_config_parse_cli(c, argc, argv, 1, &a);
  if (action) *action = a;
  if (st == FB_OK && a == FB_CLI_RUN) st = fb_run_config_finalize(c);
  return st;
}

/* Expects FB_EUSAGE with a one-line message containing every needle. */
static void expect_usage(const char *line, const char *n1, const char *n2, const char *n3) {
  fb_run_config c;
  fb_status st = run_cli(line, &c, NULL);
  const char *m = fb_error_msg();
  CHECK(st == FB_EUSAGE, "'%s' -> %s (want usage): %s", line, fb_status_name(st), m);
  if (st != FB_EUSAGE) return;
  CHECK(!strchr(m, '\n'), "'%s': message has a newline: %s", line, m);
  const char *needles[] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i]) CHECK(strstr(m, needles[i]), "'%s': message lacks \"%s\": %s", line, needles[i], m);
}

static void expect_yaml_usage(const char *text, const char *n1, const char *n2, const char *n3) {
  const char *p = write_file("bad.yaml", text);
  fb_run_config c;
  fb_config_defaults(&c);
  fb_status st = fb_config_load_yaml(&c, p);
  const char *m = fb_error_msg();
  CHECK(st == FB_EUSAGE, "yaml '%s' -> %s (want usage): %s", text, fb_status_name(st), m);
  if (st != FB_EUSAGE) return;
  CHECK(!strchr(m, '\n'), "message has a newline: %s", m);
  CHECK(strstr(m, "bad.yaml"), "message lacks the file name: %s", m);
  const char *needles[] = {n1, n2, n3};
  for (int i = 0; i < 3; i++)
    if (needles[i]) CHECK(strstr(m, needles[i]), "yaml '%s': message lacks \"%s\": %s", text, needles[i], m);
}

static void test_defaults(void) {
  fb_run_config c;
  fb_config_defaults(&c);
  CHECK(!strcmp(c.model, "debug") && !strcmp(c.strategy, "fsdp"), "model/strategy defaults");
  CHECK(!strcmp(c.backend, "auto") && !strcmp(c.comm, "auto") && !c.hardware[0], "backend/comm");
  CHECK(c.world == 0 && c.batch == 0 && c.micro_batch == 0 && c.seq == 0 && c.steps == 10,
        "sizes");
  CHECK(!strcmp(c.optimizer, "adamw") && c.lr == 3e-4 && c.min_lr == -1 && c.warmup == 0,
        "optimizer");
  CHECK(c.beta1 == 0.9 && c.beta2 == 0.95 && c.eps == 1e-8 && c.weight_decay == 0.1 &&
            c.momentum == 0.9 && c.grad_clip == 1.0 && c.seed == 1337,
        "optimizer numbers");
  CHECK(!strcmp(c.schedule, "cosine") && !strcmp(c.data, "synthetic"), "schedule/data");
  CHECK(c.prefetch_forward && c.prefetch_backward && c.reshard_after_forward &&
            c.max_inflight == 2 && c.accum == FB_ACCUM_REDUCE && c.bucket_bytes == 25 << 20,
        "strategy options");
  CHECK(c.param_dtype == FB_DTYPE_AUTO && c.reduce_dtype == FB_F32, "dtypes");
  CHECK(c.recompute == FB_RECOMPUTE_OFF && c.recompute_layers == 0, "recompute");
  CHECK(c.threads == 0 && c.mem_limit == 0 && c.timeout_s == 600 && !c.out[0] && !c.trace,
        "resources");
  CHECK(c.trace_wait == 0 && c.trace_warmup == 1 && c.trace_active == 0 && !c.mem_snapshot &&
            c.log_every == 1 && !c.quiet,
        "trace");
  /* finalize resolves the derived defaults against the model */
  CHECK_OK(fb_run_config_finalize(&c));
  CHECK(c.seq == 256 && c.spec.max_seq == 256, "seq = min(256, max_seq): %d", c.seq);
  CHECK_CLOSE(c.min_lr, 3e-5, 1e-12, 0);
  CHECK(!strcmp(c.spec.name, "debug") && c.spec.dim == 256, "spec loaded");
}

static void test_flags(void) {
  fb_run_config c;
  fb_cli_action a;
  CHECK_OK(run_cli("--strategy ddp --world=2 --batch 4 --micro-batch 1 --seq 64 --steps=3 "
                   "--lr 1e-3 --min-lr=0 --no-prefetch-forward --trace --recompute=true "
                   "--quiet false --mem-limit 1.5GiB --bucket-mb 0.5 --accum no_reduce "
                   "--param-dtype bf16 --trace-steps 1,2,3 --seed 18446744073709551615 "
                   "--model gpt2-124m --backend cpu --comm local --optimizer sgd",
                   &c, &a));
  CHECK(a == FB_CLI_RUN, "action");
  CHECK(!strcmp(c.strategy, "ddp") && c.world == 2 && c.batch == 4 && c.micro_batch == 1,
        "ints");
  CHECK(c.seq == 64 && c.steps == 3 && c.lr == 1e-3 && c.min_lr == 0, "numbers");
  CHECK(!c.prefetch_forward && c.trace && c.recompute == FB_RECOMPUTE_FULL && !c.quiet,
        "booleans (--recompute=true is full)");
  CHECK(c.mem_limit == 1610612736LL && c.bucket_bytes == 524288, "sizes %lld %lld",
        (long long)c.mem_limit, (long long)c.bucket_bytes);
  CHECK(c.accum == FB_ACCUM_NO_REDUCE && c.param_dtype == FB_BF16, "enums");
  CHECK(c.trace_wait == 1 && c.trace_warmup == 2 && c.trace_active == 3, "trace steps");
  CHECK(c.seed == UINT64_MAX, "seed");
  CHECK(c.spec.vocab == 50257 && c.spec.max_seq == 1024, "model gpt2-124m");
  CHECK(c.nics_per_node == 0 && c.nic_gbps == 0, "network: the profile's unless given");
  CHECK_OK(run_cli("--trace-steps 0,1,0", &c, &a));
  CHECK(c.trace_wait == 0 && c.trace_warmup == 1 && c.trace_active == 0, "--trace-steps ACTIVE 0");
  CHECK_OK(run_cli("--nics-per-node 4 --nic-gbps 100", &c, &a));
  CHECK(c.nics_per_node == 4 && c.nic_gbps == 100, "--nics-per-node / --nic-gbps: %d %g",
        c.nics_per_node, c.nic_gbps);

  /* --recompute: a mode, the old boolean's words, or no value at all (= full). */
  static const struct {
    const char *line;
    fb_recompute want;
    int layers;
  } rc[] = {
      {"--recompute", FB_RECOMPUTE_FULL, 0},
      {"--recompute --steps 3", FB_RECOMPUTE_FULL, 0},
      {"--recompute full --recompute-layers 1", FB_RECOMPUTE_FULL, 1},
      {"--recompute selective", FB_RECOMPUTE_SELECTIVE, 0},
      {"--recompute=selective --recompute-layers=4", FB_RECOMPUTE_SELECTIVE, 4},
      {"--recompute off", FB_RECOMPUTE_OFF, 0},
      {"--recompute true", FB_RECOMPUTE_FULL, 0},
      {"--recompute=false", FB_RECOMPUTE_OFF, 0},
      {"--recompute full --no-recompute", FB_RECOMPUTE_OFF, 0},
      {"--recompute-layers 2", FB_RECOMPUTE_OFF, 2},
  };
  for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
    CHECK_OK(run_cli(rc[i].line, &c, NULL));
    CHECK(c.recompute == rc[i].want && c.recompute_layers == rc[i].layers,
          "'%s' -> %s, %d layers", rc[i].line, fb_recompute_name(c.recompute),
          c.recompute_layers);
  }
  /* Which blocks K of L checkpoints: exactly K (all for K = 0), block 1 first, spread. */
  for (int L = 1; L <= 12; L++)
    for (int K = 0; K <= L; K++) {
      int n = 0, last = 0, gap = 0;
      for (int l = 1; l <= L; l++)
        if (fb_tf_block_recomputed(l, L, K)) {
          if (n && l - last > gap) gap = l - last;
          n++;
          last = l;
        }
      CHECK(n == (K ? K : L) && fb_tf_block_recomputed(1, L, K), "L %d K %d: %d blocks", L, K,
            n);
      CHECK(!K || gap <= (L + K - 1) / K, "L %d K %d: gap %d", L, K, gap);
    }
  CHECK(fb_tf_block_recomputed(1, 4, 2) && !fb_tf_block_recomputed(2, 4, 2) &&
            fb_tf_block_recomputed(3, 4, 2) && !fb_tf_block_recomputed(4, 4, 2),
        "every 2nd of 4: blocks 1 and 3");

  CHECK_OK(run_cli("--model gpt2-124m", &c, NULL));
  CHECK(c.seq == 256, "seq default min(256, 1024) = %d", c.seq);
  CHECK_OK(run_cli("--model gpt2-124m --seq 1024", &c, NULL));
  CHECK(c.seq == 1024, "seq at max_seq");

  CHECK_OK(run_cli("--steps 3 --help --foo", &c, &a));
  CHECK(a == FB_CLI_HELP, "--help anywhere wins");
  CHECK_OK(run_cli("--version", &c, &a));
  CHECK(a == FB_CLI_VERSION, "--version");
  bool help = false;
  char *argv[] = {"x", "--help", NULL};
  fb_config_defaults(&c);
  CHECK_OK(fb_config_parse_args(&c, 2, argv, 1, &help));
  CHECK(help, "parse_args help");

  int64_t b;
  CHECK(fb_parse_bytes("512M", &b) == 0 && b == 512LL << 20, "512M");
  CHECK(fb_parse_bytes("8G", &b) == 0 && b == 8LL << 30, "8G");
  CHECK(fb_parse_bytes("4096", &b) == 0 && b == 4096, "plain");
  CHECK(fb_parse_bytes("2kb", &b) == 0 && b == 2048, "kb");
  CHECK(fb_parse_bytes("1.5GiB", &b) == 0 && b == 3LL << 29, "1.5GiB");
  CHECK(fb_parse_bytes("garbage", &b) < 0 && fb_parse_bytes("-1G", &b) < 0 &&
            fb_parse_bytes("12Q", &b) < 0 && fb_parse_bytes("", &b) < 0 &&
            fb_parse_bytes("1.5", &b) < 0 && fb_parse_bytes("1e30", &b) < 0,
        "bad sizes rejected");
}

static void test_yaml_and_override(void) {
  const char *p = write_file("run.yaml", "# a run\n"
                                         "model: debug-llama\n"
                                         "strategy: zero3\n"
                                         "steps: 7\n"
                                         "batch: 4\n"
                                         "micro_batch: 2\n"
                                         "prefetch-backward: false\n"
                                         "recompute: true\n"
                                         "trace_steps: [2, 0, 1]\n"
                                         "lr: 1e-3\n"
                                         "out: \"\"\n");
  fb_run_config c;
  fb_config_defaults(&c);
  CHECK_OK(fb_config_load_yaml(&c, p));
  CHECK(!strcmp(c.model, "debug-llama") && !strcmp(c.strategy, "zero3"), "strings");
  CHECK(c.steps == 7 && c.batch == 4 && c.micro_batch == 2 && !c.prefetch_backward, "values");
  CHECK(c.trace_wait == 2 && c.trace_warmup == 0 && c.trace_active == 1, "yaml list");
  /* ACTIVE 0 (every remaining step, the default) reads back from YAML as from the command line */
  CHECK_OK(fb_config_load_yaml(&c, write_file("ts.yaml", "trace-steps: '0,1,0'\n")));
  CHECK(c.trace_wait == 0 && c.trace_warmup == 1 && c.trace_active == 0, "yaml ACTIVE 0");
  CHECK_OK(fb_config_load_yaml(&c, write_file("ts.yaml", "trace_steps: [3, 0, 0]\n")));
  CHECK(c.trace_wait == 3 && c.trace_warmup == 0 && c.trace_active == 0, "yaml list ACTIVE 0");
  CHECK(c.lr == 1e-3, "lr");
  CHECK(c.recompute == FB_RECOMPUTE_FULL, "yaml recompute: true (the old boolean) is full");
  CHECK_OK(fb_config_load_yaml(&c, write_file("rc.yaml", "recompute: selective\n"
                                                         "recompute_layers: 2\n")));
  CHECK(c.recompute == FB_RECOMPUTE_SELECTIVE && c.recompute_layers == 2, "yaml selective");
  CHECK_OK(fb_config_load_yaml(&c, write_file("rc.yaml", "recompute: false\n")));
  CHECK(c.recompute == FB_RECOMPUTE_OFF, "yaml recompute: false is off");

  /* The file never overrides a flag, wherever --config sits. */
  char line[1024];
  snprintf(line, sizeof line, "--steps 5 --config %s --lr 2e-3", p);
  CHECK_OK(run_cli(line, &c, NULL));
  CHECK(c.steps == 5 && c.batch == 4 && c.lr == 2e-3, "config after: steps %d batch %d", c.steps,
        c.batch);
  snprintf(line, sizeof line, "--config=%s --steps=5", p);
  CHECK_OK(run_cli(line, &c, NULL));
  CHECK(c.steps == 5 && c.batch == 4 && c.spec.family == FB_LLAMA, "config before");

  /* Round trip: write every option, read it back, get the same values. */
  snprintf(line, sizeof line,
           "--strategy yafsdp --world 4 --batch 16 --lr 0.00123 --mem-limit 3G --hardware "
           "%s/models/debug.yaml --out a\"b --accum no-reshard --bucket-mb 1.25 --seed 42 "
           "--no-reshard-after-forward --trace-steps 3,1,4 --recompute selective "
           "--recompute-layers 3",
           fb_data_root());
  CHECK_OK(run_cli(line, &c, NULL));
  const char *rt = write_file("rt.yaml", "");
  FILE *f = fopen(rt, "w");
  fb_config_write_yaml(f, &c);
  fclose(f);
  fb_run_config d;
  fb_config_defaults(&d);
  CHECK_OK(fb_config_load_yaml(&d, rt));
  for (int i = 0; i < fb_config_option_count(); i++) {
    const fb_option *o = fb_config_option_at(i);
    char a[600], b[600];
    fb_config_format_option(&c, o, a, sizeof a);
    fb_config_format_option(&d, o, b, sizeof b);
    CHECK(!strcmp(a, b), "round trip of %s: '%s' != '%s'", o->name, a, b);
  }
  CHECK(!strcmp(d.out, "a\"b") && d.lr == 0.00123, "round trip");

  /* An empty file sets nothing. */
  fb_config_defaults(&c);
  CHECK_OK(fb_config_load_yaml(&c, write_file("empty.yaml", "# nothing\n")));
  CHECK(c.steps == 10, "empty file");
}

static void test_bad_flags(void) {
  expect_usage("--model foo", "--model", "'foo'", "gpt2-124m");
  expect_usage("--model nowhere/foo.yaml", "--model", "nowhere/foo.yaml", NULL);
  expect_usage("--strategy foo", "--strategy", "'foo'", "fsdp");
  expect_usage("--foo 3", "unknown flag '--foo'", "--help", NULL);
  expect_usage("--stesp 3", "'--stesp'", "--steps", NULL);
  expect_usage("--foo=3", "unknown flag '--foo'", NULL, NULL);
  expect_usage("--no-steps", "'--no-steps'", NULL, NULL);
  expect_usage("steps 3", "'steps'", NULL, NULL);
  expect_usage("--help=1", "--help", "'1'", NULL);
  expect_usage("--steps", "--steps", "missing value", NULL);
  expect_usage("--steps --lr 1", "--steps", "missing value", NULL);
  expect_usage("--steps 0", "--steps", "'0'", ">= 1");
  expect_usage("--steps -3", "--steps: '-3' is not allowed", "want an integer >= 1", NULL);
  expect_usage("--steps 3x", "--steps", "'3x'", "not an integer");
  expect_usage("--steps 99999999999", "--steps", "99999999999", NULL);
  expect_usage("--steps 1.5", "--steps", "'1.5'", NULL);
  expect_usage("--batch 0", "--batch", "'0'", NULL);
  expect_usage("--batch -8", "--batch", "'-8'", NULL);
  expect_usage("--micro-batch -1", "--micro-batch", "'-1'", NULL);
  expect_usage("--world -1", "--world", "'-1'", NULL);
  expect_usage("--seq -5", "--seq", "'-5'", NULL);
  expect_usage("--seq 4096", "--seq", "4096", "max_seq 256");
  expect_usage("--model gpt2-124m --seq 1025", "--seq", "1025", "max_seq 1024");
  expect_usage("--world 3 --batch 8", "--batch", "8", "3");
  expect_usage("--world 2 --batch 8 --micro-batch 3", "--micro-batch", "3", NULL);
  expect_usage("--batch 8 --micro-batch 16", "--micro-batch", "16", NULL);
  expect_usage("--strategy single --world 2", "--world", "2", "single");
  expect_usage("--lr abc", "--lr: 'abc' is not a number", NULL, NULL);
  expect_usage("--lr 0", "--lr", "'0'", "> 0");
  expect_usage("--lr nan", "--lr", "'nan'", NULL);
  expect_usage("--lr inf", "--lr", "'inf'", NULL);
  expect_usage("--lr 1e999", "--lr", "1e999", NULL);
  expect_usage("--min-lr -1", "--min-lr", "'-1'", NULL);
  expect_usage("--min-lr 1", "--min-lr", "1", "lr");
  expect_usage("--warmup -1", "--warmup", "'-1'", NULL);
  expect_usage("--beta1 1", "--beta1", "'1'", "< 1");
  expect_usage("--beta2 -0.1", "--beta2", "'-0.1'", NULL);
  expect_usage("--eps 0", "--eps", "'0'", "> 0");
  expect_usage("--weight-decay -1", "--weight-decay", "'-1'", NULL);
  expect_usage("--momentum 1", "--momentum", "'1'", NULL);
  expect_usage("--grad-clip -1", "--grad-clip", "'-1'", ">= 0");
  expect_usage("--seed -1", "--seed", "'-1'", NULL);
  expect_usage("--seed 1e3", "--seed", "'1e3'", NULL);
  expect_usage("--backend gpu", "--backend", "'gpu'", "cpu-opaque");
  expect_usage("--comm tcp", "--comm", "'tcp'", "nccl");
  expect_usage("--optimizer adam", "--optimizer", "'adam'", "adamw");
  expect_usage("--schedule linear", "--schedule", "'linear'", "cosine");
  expect_usage("--accum sometimes", "--accum", "'sometimes'", "no-reshard");
  expect_usage("--param-dtype fp16", "--param-dtype", "'fp16'", "bf16");
  expect_usage("--reduce-dtype int8", "--reduce-dtype", "'int8'", "fp32");
  expect_usage("--threads -1", "--threads", "'-1'", NULL);
  expect_usage("--nics-per-node 65", "--nics-per-node", "'65'", NULL);
  expect_usage("--nic-gbps -100", "--nic-gbps", "'-100'", NULL);
  expect_usage("--max-inflight 0", "--max-inflight", "'0'", ">= 1");
  expect_usage("--bucket-mb 0", "--bucket-mb", "'0'", NULL);
  expect_usage("--mem-limit garbage", "--mem-limit", "'garbage'", "512M");
  expect_usage("--mem-limit -5", "--mem-limit", "'-5'", NULL);
  expect_usage("--timeout 0", "--timeout", "'0'", NULL);
  expect_usage("--log-every 0", "--log-every", "'0'", NULL);
  expect_usage("--trace=maybe", "--trace", "'maybe'", "true or false");
  expect_usage("--no-trace=1", "--no-trace", NULL, NULL);
  expect_usage("--recompute x", "--recompute: 'x' is not allowed (off|full|selective|op)", NULL,
               NULL);
  expect_usage("--recompute=", "--recompute: '' is not allowed", NULL, NULL);
  expect_usage("--recompute Full", "--recompute", "'Full'", "off|full|selective|op");
  expect_usage("--no-recompute=full", "--no-recompute", "takes no value", NULL);
  expect_usage("--recompute-layers 5", "--recompute-layers: 5 is not allowed",
               "between 0 and 4", "debug");
  expect_usage("--model debug-llama --recompute selective --recompute-layers 9",
               "--recompute-layers", "9", "between 0 and 4");
  expect_usage("--recompute-layers -1", "--recompute-layers", "'-1'", NULL);
  expect_usage("--recompute-layers two", "--recompute-layers", "'two'", "not an integer");
  expect_usage("--trace-steps 1,2", "--trace-steps", "'1,2'", "WAIT,WARMUP,ACTIVE");
  expect_usage("--trace-steps -1,0,1", "--trace-steps", "'-1,0,1'", NULL);
  expect_usage("--trace-steps 0,0,-1", "--trace-steps", "'0,0,-1'", NULL);
  expect_usage("--trace-steps 1,2,3,4", "--trace-steps", NULL, NULL);
  expect_usage("--mesh 2x3 --world 4", "--mesh", "'2x3'", "REPLICA*SHARD = 4");
  expect_usage("--mesh 0x4", "--mesh", "'0x4'", ">= 1");
  expect_usage("--mesh 2by2", "--mesh", "'2by2'", "REPLICAxSHARD");
  expect_usage("--mesh 2x2x2", "--mesh", "'2x2x2'", "REPLICAxSHARD");
  expect_usage("--data /nonexistent/tokens.bin", "--data", "/nonexistent/tokens.bin", NULL);
  expect_usage("--hardware nope", "--hardware", "'nope'", NULL);
  expect_usage("--comm sim --backend cpu", "--comm", "sim", NULL);
  expect_usage("--backend sim --comm local", "--comm", "local", NULL);
  expect_usage("--backend cpu --comm nccl", "--comm", "nccl", NULL);
  expect_usage("--config /nonexistent/run.yaml", "--config", "/nonexistent/run.yaml", NULL);
  char longv[400];
  memset(longv, 'x', sizeof longv - 1);
  longv[sizeof longv - 1] = 0;
  char line[512];
  snprintf(line, sizeof line, "--model %s", longv);
  expect_usage(line, "--model", "too long", NULL);
}

static void test_bad_yaml(void) {
  expect_yaml_usage("model: debug\nsteps: 3\nfoo: 1\n", "bad.yaml:3: unknown key 'foo'",
                    "allowed: model, strategy", NULL);
  expect_yaml_usage("model: debug\nsteps: [1, 2\nbatch: 3\n", "bad.yaml:", NULL, NULL);
  expect_yaml_usage("model: debug\n  steps: 3\n", "bad.yaml:2:", NULL, NULL);
  expect_yaml_usage("steps: abc\n", "bad.yaml:1: steps", "'abc'", "integer");
  expect_yaml_usage("micro_batch: -2\n", "micro_batch", "'-2'", NULL);
  expect_yaml_usage("lr: fast\n", "lr", "'fast'", "not a number");
  expect_yaml_usage("trace: maybe\n", "trace", "'maybe'", NULL);
  expect_yaml_usage("recompute: maybe\n", "bad.yaml:1: recompute: 'maybe' is not allowed",
                    "(off|full|selective|op)", NULL);
  expect_yaml_usage("recompute_layers: -2\n", "recompute_layers", "'-2'", NULL);
  expect_yaml_usage("backend: gpu\n", "backend", "'gpu'", "cpu");
  expect_yaml_usage("mem_limit: lots\n", "mem_limit", "'lots'", NULL);
  expect_yaml_usage("steps: 3\nsteps: 4\n", "duplicate key 'steps'", "line 1", NULL);
  expect_yaml_usage("steps: 3\nmicro-batch: 1\nmicro_batch: 2\n", "duplicate key", NULL, NULL);
  expect_yaml_usage("model:\n  name: debug\n", "model", "a mapping is not allowed", NULL);
  /* a list or mapping where a single value is expected: refused naming the key, never read
   * as its first element (only --trace-steps, itself a list, takes one) */
  expect_yaml_usage("steps: [3]\n", "bad.yaml:1:8: steps", "a list is not allowed", NULL);
  expect_yaml_usage("model: [debug, 1B]\n", "model", "a list is not allowed", NULL);
  expect_yaml_usage("batch:\n  - 4\n", "batch", "a list is not allowed", NULL);
  expect_yaml_usage("steps: {n: 3}\n", "steps", "a mapping is not allowed", NULL);
  expect_yaml_usage("trace_steps: {wait: 1}\n", "trace_steps", "a mapping is not allowed", NULL);
  expect_yaml_usage("- steps\n- 3\n", "mapping", NULL, NULL);
  expect_yaml_usage("just a string\n", "mapping", NULL, NULL);
  expect_yaml_usage("config: other.yaml\n", "unknown key 'config'", NULL, NULL);
  expect_yaml_usage("steps: 3\n---\nsteps: 4\n", "one YAML document", NULL, NULL);
  expect_yaml_usage("steps: &x 1\nbatch: *x\n", "batch", "alias", NULL);
  expect_yaml_usage("out: \"a\\nb\"\n", "out", "control character", NULL);
}

/* Bounds (issue 15): each size key has an upper bound with a reason, fb_model_build refuses a
 * spec whose products overflow int64 (a spec made in code skips the loader's bounds), and the
 * reader's mapping shape delivers one level of entries and refuses anything deeper. */
static fb_status collect_entry(void *ctx, const char *path, int line, const char *key,
                               const char *name, const char *value) {
  char *out = ctx;
  size_t n = strlen(out);
  snprintf(out + n, 256 - n, "%s.%s=%s@%d;", key, name, value, line);
  return FB_OK;
}

static fb_status collect_key(void *ctx, const char *path, int line, const char *key,
                             const char *value) {
  return collect_entry(ctx, path, line, "", key, value);
}

static void test_bounds(void) {
  fb_model_spec s;
  const char *base = "name: b\nfamily: llama\nvocab: 64\ndim: 32\nheads: 4\nkv_heads: 2\n"
                     "ffn: 64\nmax_seq: 16\nnorm_eps: 1e-5\nrope_theta: 10000\ntied: true\n"
                     "init_std: 0.02\n";
  char text[512];
  snprintf(text, sizeof text, "%slayers: 1024\n", base);
  CHECK_OK(fb_model_spec_load(write_file("l1024.yaml", text), &s));
  snprintf(text, sizeof text, "%slayers: 1025\n", base);
  fb_status st = fb_model_spec_load(write_file("l1025.yaml", text), &s);
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "layers: '1025'") &&
            strstr(fb_error_msg(), "[1, 1024]") && strstr(fb_error_msg(), "published"),
        "layers 1025: %s", fb_error_msg());

  fb_model_spec big = {.name = "big", .family = FB_GPT2, .vocab = 8, .dim = 2147483646,
                       .layers = 1, .heads = 1, .kv_heads = 1, .ffn = 8, .max_seq = 8};
  fb_model m;
  st = fb_model_build(&big, &m); /* qkv is 3*dim x dim: 1.4e19 elements */
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "overflows"), "dim 2^31-2: %s %s",
        fb_status_name(st), fb_error_msg());
  big = (fb_model_spec){.name = "wide", .family = FB_LLAMA, .vocab = 8, .dim = 1 << 30,
                        .layers = 8, .heads = 1, .kv_heads = 1, .ffn = 1 << 30, .max_seq = 8};
  st = fb_model_build(&big, &m); /* each block 2^62 elements: the total wraps at block 2 */
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "overflows"), "8 x 2^62: %s %s",
        fb_status_name(st), fb_error_msg());

  char got[256] = "";
  const fb_yaml_shape shape = {.flag = "--x", .visit = collect_key, .entry = collect_entry};
  CHECK_OK(fb_yaml_read(write_file("map.yaml", "a: 1\nk:\n  x: 2\n  y: ~\nb: 3\n"), &shape,
                        got));
  CHECK(!strcmp(got, ".a=1@1;k.x=2@3;k.y=@4;.b=3@5;"), "entries: %s", got);
  st = fb_yaml_read(write_file("deep.yaml", "k:\n  x: {y: 1}\n"), &shape, got);
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "k.x") && strstr(fb_error_msg(), "deep.yaml:2"),
        "nested entry: %s", fb_error_msg());
  st = fb_yaml_read(write_file("list.yaml", "a: [1, 2]\n"), &shape, got);
  CHECK(st == FB_EUSAGE && strstr(fb_error_msg(), "list"), "list without lists: %s",
        fb_error_msg());
}

/* Parameter count of a spec, computed here independently of the engine. */
static int64_t count_params(const fb_model_spec *s) {
  int64_t V = s->vocab, D = s->dim, F = s->ffn, L = s->layers;
  if (s->family == FB_GPT2) {
    int64_t block = 2 * D + (3 * D * D + 3 * D) + (D * D + D) + 2 * D + (D * F + F) + (F * D + D);
    return V * D + (int64_t)s->max_seq * D + L * block + 2 * D + (s->tied ? 0 : V * D);
  }
  int64_t kv = D / s->heads * s->kv_heads;
  int64_t block = D + D * D + 2 * D * kv + D * D + D + 3 * D * F;
  return V * D + L * block + D + (s->tied ? 0 : V * D);
}

static void test_models(void) {
  static const struct {
    const char *name;
    fb_family family;
    int64_t params;
    bool tied;
  } want[] = {
      {"debug", FB_GPT2, 3356160, true},
      {"debug-llama", FB_LLAMA, 2902272, true},
      {"gpt2-124m", FB_GPT2, 124439808, true},
      {"gpt2-xl", FB_GPT2, 1557611200, true},
      {"1B", FB_LLAMA, 1235814400, true},
      {"8B", FB_LLAMA, 8030261248LL, false},
      {"70B", FB_LLAMA, 70553706496LL, false},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    fb_model_spec s;
    memset(&s, 0, sizeof s);
    CHECK_OK(fb_model_spec_load(want[i].name, &s));
    CHECK(!strcmp(s.name, want[i].name), "name %s", s.name);
    CHECK(s.family == want[i].family && s.tied == want[i].tied, "%s family/tied", want[i].name);
    CHECK(count_params(&s) == want[i].params, "%s: %lld params, want %lld", want[i].name,
          (long long)count_params(&s), (long long)want[i].params);
    CHECK(s.norm_eps > 0 && s.init_std > 0 && s.dim % s.heads == 0 && s.heads % s.kv_heads == 0,
          "%s sane", want[i].name);
  }
  fb_model_spec s;
  CHECK_OK(fb_model_spec_load("1B", &s));
  CHECK(s.rope_theta == 500000.0f && s.kv_heads == 8 && s.max_seq == 8192, "1B details");
  CHECK_OK(fb_model_spec_load("debug-llama", &s));
  CHECK(s.heads == 8 && s.kv_heads == 2 && s.ffn == 688 && s.vocab == 512, "debug-llama");

  /* A path works too. */
  char path[600];
  snprintf(path, sizeof path, "%s/models/gpt2-xl.yaml", fb_data_root());
  CHECK_OK(fb_model_spec_load(path, &s));
  CHECK(s.dim == 1600 && s.heads == 25, "by path");

  static const char base[] = "name: m\nfamily: llama\nvocab: 64\ndim: 32\nlayers: 1\nheads: 4\n"
                             "kv_heads: 2\nffn: 64\nmax_seq: 16\nnorm_eps: 1e-5\n"
                             "rope_theta: 10000\ntied: true\ninit_std: 0.02\n";
  const char *ok = write_file("m.yaml", base);
  CHECK_OK(fb_model_spec_load(ok, &s));
  CHECK(s.family == FB_LLAMA && s.kv_heads == 2 && s.dim == 32, "custom model");
  static const struct {
    const char *from, *to, *n1, *n2;
  } bad[] = {
      {"dim: 32\n", "dim: 0\n", "dim", "'0'"},
      {"vocab: 64\n", "vocab: -64\n", "vocab", "'-64'"},
      {"layers: 1\n", "layers: one\n", "layers", "'one'"},
      {"dim: 32\n", "dim: 30\n", "heads", "30"},              /* 30 % 4 */
      {"kv_heads: 2\n", "kv_heads: 3\n", "kv_heads", "3"},    /* 4 % 3 */
      {"heads: 4\n", "heads: 32\n", "heads", "odd"},          /* head dim 1 */
      {"family: llama\n", "family: bert\n", "family", "'bert'"},
      {"tied: true\n", "tied: sometimes\n", "tied", "'sometimes'"},
      {"norm_eps: 1e-5\n", "norm_eps: 0\n", "norm_eps", "'0'"},
      {"init_std: 0.02\n", "init_std: -1\n", "init_std", "'-1'"},
      {"ffn: 64\n", "ffn: 64\nextra: 1\n", "unknown key 'extra'", "allowed"},
      {"ffn: 64\n", "", "missing key 'ffn'", NULL},
      {"rope_theta: 10000\n", "", "missing key 'rope_theta'", NULL},
      {"max_seq: 16\n", "max_seq: [16\n", "mbad.yaml", NULL},
      {"dim: 32\n", "dim: [32]\n", "dim: a list is not allowed", NULL}, /* not 32 */
      {"dim: 32\n", "dim:\n  - 32\n", "dim: a list is not allowed", NULL},
      {"vocab: 64\n", "vocab: {v: 64}\n", "vocab: a mapping is not allowed", NULL},
      {"family: llama\n", "family: [llama]\n", "family: a list", NULL},
      {"tied: true\n", "tied: [true]\n", "tied: a list", NULL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char text[1024];
    const char *at = strstr(base, bad[i].from);
    CHECK(at, "test table: '%s' not in base", bad[i].from);
    if (!at) continue;
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, bad[i].to,
             at + strlen(bad[i].from));
    const char *p = write_file("mbad.yaml", text);
    fb_status st = fb_model_spec_load(p, &s);
    const char *m = fb_error_msg();
    CHECK(st == FB_EUSAGE, "model case %zu -> %s: %s", i, fb_status_name(st), m);
    CHECK(strstr(m, "mbad.yaml") && strstr(m, bad[i].n1) && (!bad[i].n2 || strstr(m, bad[i].n2)),
          "model case %zu message: %s", i, m);
    CHECK(!strchr(m, '\n'), "one line: %s", m);
  }
  /* GPT-2 has no grouped-query attention and no RoPE: rope_theta may be left out. */
  const char *g = write_file("g.yaml", "name: g\nfamily: gpt2\nvocab: 64\ndim: 32\nlayers: 1\n"
                                       "heads: 4\nkv_heads: 2\nffn: 64\nmax_seq: 16\n"
                                       "norm_eps: 1e-5\ntied: true\ninit_std: 0.02\n");
  CHECK(fb_model_spec_load(g, &s) == FB_EUSAGE && strstr(fb_error_msg(), "kv_heads"),
        "gpt2 with gqa: %s", fb_error_msg());
}

static void test_resolve(void) {
  char out[1024];
  const char *root = fb_data_root();
  char probe[1024];
  snprintf(probe, sizeof probe, "%s/models/debug.yaml", root);
  CHECK(access(probe, R_OK) == 0, "data root %s holds models/debug.yaml", root);
  CHECK_OK(fb_resolve_yaml("models", "debug", out, sizeof out));
  CHECK(!strcmp(out, probe), "resolved %s", out);
  CHECK(fb_resolve_yaml("models", "nope", out, sizeof out) == FB_EUSAGE, "unknown model");
  const char *m = fb_error_msg();
  CHECK(strstr(m, "--model: unknown model 'nope' (available: ") && strstr(m, "debug-llama") &&
            strstr(m, "70B") && !strstr(m, "hardware"),
        "model list: %s", m);
  CHECK(fb_resolve_yaml("models/hardware", "nope", out, sizeof out) == FB_EUSAGE, "hardware");
  CHECK(strstr(fb_error_msg(), "--hardware") && strstr(fb_error_msg(), "'nope'"), "%s",
        fb_error_msg());
  CHECK(fb_resolve_yaml("models", "", out, sizeof out) == FB_EUSAGE, "empty name");
}

static void test_help(void) {
  FILE *f = tmpfile();
  fb_config_print_help(f, fb_strategy_names());
  long n = ftell(f);
  rewind(f);
  char *text = calloc(1, (size_t)n + 1);
  CHECK(fread(text, 1, (size_t)n, f) == (size_t)n, "read help");
  fclose(f);
  for (int i = 0; i < fb_config_option_count(); i++) {
    const fb_option *o = fb_config_option_at(i);
    char flag[80];
    snprintf(flag, sizeof flag, o->kind == FB_OPT_BOOL ? "--[no-]%s " : "--%s ", o->name);
    const char *at = strstr(text, flag);
    CHECK(at, "help lacks %s", flag);
    if (!at) continue;
    const char *eol = strchr(at, '\n');
    CHECK(eol && (o->kind >= FB_OPT_CONFIG || memmem(at, (size_t)(eol - at), "[default: ", 10)),
          "help line of %s has no default", o->name);
  }
  CHECK(strstr(text, "--batch N") && strstr(text, "[default: auto"), "batch default");
  CHECK(strstr(text, "[default: 0.0003]") && strstr(text, "[default: lr/10]"), "lr defaults");
  char listed[1100];
  snprintf(listed, sizeof listed, "{%s}", fb_strategy_names());
  CHECK(strstr(text, listed) && strstr(text, "single, ddp"), "strategies listed from the registry");
  CHECK(strstr(text, "{auto|cpu|cpu-opaque|") && strstr(text, "|sim}"), "backends listed");
  CHECK(strstr(text, "--recompute [MODE]") && strstr(text, "{off|full|selective|op}") &&
            strstr(text, "[default: off]") && strstr(text, "--recompute-layers K") &&
            strstr(text, "[default: 0 = all layers]"),
        "recompute flags in help");
  free(text);
}

int main(void) {
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  test_defaults();
  test_flags();
  test_yaml_and_override();
  test_bad_flags();
  test_bad_yaml();
  test_models();
  test_bounds();
  test_resolve();
  test_help();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (system(cmd)) fprintf(stderr, "could not remove %s\n", tmpdir);
  return fb_test_done("test_config");
}
