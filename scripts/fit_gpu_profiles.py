#!/usr/bin/env python3
"""Fits the few GPU cost-model parameters that no datasheet gives, through fsdpbench itself.

Each fit changes some keys of copies of models/hardware/*.yaml (in a temporary FSDPBENCH_HOME),
runs `fsdpbench validate --dataset FILE` and minimises the RMS of log(predicted / published)
over the rows named below, by coordinate search (multiplicative steps, halved when no step
helps). It prints, per fit, the parameters, the rows it used and the residual (median and
worst |error|), which docs/simulator.md reports. With --write it stores the values in the
committed profiles (the line's comment is kept).

Fits (one global parameter set each; never per row):
  gemm      h100 (PyTorch's cuBLAS on Hopper): gemm_max_efficiency, gemm_k_half, gemm_launch_us,
            gemm_stream_k, gemm_align4_factor, gemm_align2_factor  on h100-torch-gemm.csv (the
            lent H100, torch 2.11); objective: the mean of |log error|^4, which weighs the worst
            rows most. docs/h200/gemm.csv (the lent H200, same library) checks it
  gemm-xla  h100-xla (XLA's own GEMMs): gemm_max_efficiency, gemm_k_half, gemm_launch_us  on
            gemm.csv's XLA bf16 rows
  flash     h100: flash_{fwd,bwd}_efficiency, flash_half_seq; a100: flash_bwd_efficiency and
            flash_half_seq (A100 has fwd+bwd rows only: its forward is set to the FA2 paper's
            ~72% of peak) on attention.csv FA2 rows
  cudnn     h100: cudnn_ratio, cudnn_half_seq  on docs/h200/attention.csv (torch SDPA on the lent
            H200: cuDNN's fused SDPA); h100-torch-attention.csv and attention.csv's cuDNN rows
            check it
  nccl      coll_overhead_us  on collectives.csv A100 single-node rows up to 1 MiB
  sustained sustained_compute of a100 and h100, eager_mem_factor and triton_ratio (shared by
            all profiles) on train-runs.csv (all expressible rows)
  host      host_op_us  on train-runs.csv (all expressible rows, both GPUs). Not used for the
            shipped profiles: their 10 us is an estimate from a public measurement, and the
            development set (GPU-bound runs) cannot tell 5 from 20 us apart

--leave-one-source-out: out-of-sample by construction. For every source of the training-run
files (the source_id column of train-runs.csv, train-runs-llama.csv and strategy-runs.csv) it
refits every parameter fitted on training rows (the `sustained` fit) without that source's rows
and scores that source's rows with the refit values; a parameter no remaining row informs (its
residual does not move either way) goes back to its unfitted prior (PRIOR: 1, the factor off),
never keeping a value fitted with the source. Sources of files no parameter is fitted on
(train-runs-llama.csv, strategy-runs.csv) are scored with the shipped values, which never saw
them. The op-level fits (gemm, flash, cudnn, nccl) each rest on one microbenchmark source, with
no second source of the same kind to refit on; their out-of-sample checks are the other files
docs/simulator.md's trust table names. Cheaper than the full fit: a warm start at the shipped
values, 10 % steps, two rounds, on every 3rd row of each kept source of more than 50 rows
(--stride) and every row of the smaller ones. Closes with:
  leave-one-source-out: S sources, median M %, worst source W %
(M: the median over sources of each source's median |error|; W: the largest such median).
Python is tooling only: the model it fits is the C cost model, run as a user runs it.
"""
import argparse
import concurrent.futures
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HW = os.path.join(ROOT, "models", "hardware")

# profile -> profiles that copy a fitted key from it (same silicon, same software stack)
SHARED = {"h100": ["h100-96gb", "h200", "h100-nvl"], "a100": ["a100-40gb"], "h100-xla": []}
# keys one value serves for every GPU (software, not silicon): fitted on a100, copied to h100
ALSO = {"launch_us": ["a100"], "coll_overhead_us": ["h100"], "host_op_us": ["h100"],
        "eager_mem_factor": ["h100"], "triton_ratio": ["h100"]}


def targets(profile, key):
    out = []
    for q in [profile] + ALSO.get(key, []):
        out += [q] + SHARED.get(q, [])
    return out


def read_key(profile, key):
    for line in open(os.path.join(HW, profile + ".yaml")):
        m = re.match(r"^%s:\s*([^\s#]+)" % re.escape(key), line)
        if m:
            return float(m.group(1))
    raise KeyError("%s: no key %s" % (profile, key))


def set_key(path, key, value):
    lines = open(path).read().split("\n")
    for i, line in enumerate(lines):
        m = re.match(r"^(%s:\s*)([^\s#]+)(.*)$" % re.escape(key), line)
        if m:
            val = "%.4g" % value
            lines[i] = (m.group(1) + val).ljust(len(m.group(1)) + len(m.group(2))) + m.group(3)
            open(path, "w").write("\n".join(lines))
            return
    raise KeyError("%s: no key %s" % (path, key))


class Home:
    """A temporary FSDPBENCH_HOME with copies of the profiles."""

    def __init__(self, binary):
        self.dir = tempfile.mkdtemp(prefix="fsdpbench-fit-")
        shutil.copytree(os.path.join(ROOT, "models"), os.path.join(self.dir, "models"))
        self.binary = binary

    def set(self, profile, key, value):
        for p in targets(profile, key):
            path = os.path.join(self.dir, "models", "hardware", p + ".yaml")
            try:
                set_key(path, key, value)
            except KeyError:
                pass

    def validate(self, dataset):
        env = dict(os.environ, FSDPBENCH_HOME=self.dir)
        out = subprocess.run([self.binary, "validate", "--dataset", dataset, "--out", self.dir],
                             env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("validate failed: " + out.stderr.strip())
        rows = list(csv.DictReader(open(os.path.join(self.dir, "dataset.csv"))))
        return [r for r in rows if not r["not_expressible"]]


def residual(rows, keep, power=2):
    errs = [math.log(float(r["predicted"]) / float(r["published"])) for r in rows if keep(r)]
    return (sum(abs(e) ** power for e in errs) / len(errs)) ** (1.0 / power), errs


def summary(errs):
    a = sorted(abs(math.exp(e) - 1) * 100 for e in errs)
    n = len(a)
    med = a[n // 2] if n % 2 else 0.5 * (a[n // 2 - 1] + a[n // 2])
    return "%d rows, median |err| %.1f%%, worst %.1f%%" % (n, med, a[-1])


# the value a fitted key takes when no row informs it: the mechanism's factor switched off
PRIOR = {"sustained_compute": 1.0, "eager_mem_factor": 1.0, "triton_ratio": 1.0}


def fit(home, dataset, params, keep, rounds=6, power=2, step=1.5, prior=False):
    """params: list of (profile, key, lo, hi). Coordinate search in log space. prior: a key
    whose residual moves neither way in the first round goes back to PRIOR (not identified)."""
    vals = {(p, k): read_key(p, k) for p, k, lo, hi in params}
    for (p, k), v in vals.items():
        home.set(p, k, v)
    best, _ = residual(home.validate(dataset), keep, power)
    first = True
    for _ in range(rounds):
        improved = False
        for p, k, lo, hi in params:
            moved = False
            for f in (step, 1 / step):
                v = min(hi, max(lo, vals[(p, k)] * f))
                home.set(p, k, v)
                r, _ = residual(home.validate(dataset), keep, power)
                moved = moved or abs(r - best) > 1e-12
                if r < best - 1e-9:
                    best, vals[(p, k)], improved = r, v, True
                    break
                home.set(p, k, vals[(p, k)])
            if prior and first and not moved and k in PRIOR:
                vals[(p, k)] = PRIOR[k]
                home.set(p, k, PRIOR[k])
                best, _ = residual(home.validate(dataset), keep, power)
        first = False
        if not improved:
            step = math.sqrt(step)
            if step < 1.01:
                break
    _, errs = residual(home.validate(dataset), keep)
    return vals, best, errs


def sources_of(dataset):
    """row number (as validate prints it: 1-based data rows) -> source_id"""
    return {i + 1: r["source_id"] for i, r in enumerate(csv.DictReader(open(dataset)))}


def median(xs):
    a = sorted(xs)
    n = len(a)
    return a[n // 2] if n % 2 else 0.5 * (a[n // 2 - 1] + a[n // 2])


def score(rows, src, source):
    return [abs(float(r["err_pct"])) for r in rows if src[int(r["row"])] == source]


def subset_csv(dataset, pick, path):
    """Writes the rows of `dataset` for which pick(i, row) holds (i: 0-based) to `path`."""
    with open(dataset) as f:
        rd = csv.DictReader(f)
        rows = [r for i, r in enumerate(rd) if pick(i, r)]
        fields = rd.fieldnames
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return path


def leave_one_source_out(a, d, fits):
    """Per source: its median |error| with parameters that never saw it. The refit runs on every
    a.stride-th row of each remaining source of more than 50 rows and on every row of the
    others (the cheaper mode: the fit's cost is one validate of those rows per step), then the
    left-out source's rows are scored alone."""
    dataset, params = fits["sustained"][:2]
    src = sources_of(dataset)

    def one(source):
        home = Home(a.bin)
        try:
            seen = {}
            size = {}
            for v in src.values():
                size[v] = size.get(v, 0) + 1

            def pick(i, r, s=source):
                if r["source_id"] == s:
                    return False
                seen[r["source_id"]] = seen.get(r["source_id"], -1) + 1
                return size[r["source_id"]] <= 50 or seen[r["source_id"]] % a.stride == 0
            fit_file = subset_csv(dataset, pick, os.path.join(home.dir, "fit.csv"))
            vals, _, _ = fit(home, fit_file, params, lambda r: True, rounds=2, step=1.1, prior=True)
            out_file = subset_csv(dataset, lambda i, r, s=source: r["source_id"] == s,
                                  os.path.join(home.dir, "out.csv"))
            errs = [abs(float(r["err_pct"])) for r in home.validate(out_file)]
        finally:
            shutil.rmtree(home.dir)
        return source, vals, errs

    per = []
    # the sources' refits are independent: run them side by side (--jobs)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        done = list(pool.map(one, sorted(set(src.values()))))
    for source, vals, errs in done:
        if not errs:
            continue
        refit = ", ".join("%s %s %.4g" % (p, k, v) for (p, k), v in vals.items())
        per.append((source, os.path.basename(dataset), median(errs), max(errs)))
        print("  %-26s %-20s %3d rows, median %5.1f%%, worst %6.1f%%  refit without it: %s"
              % (source, os.path.basename(dataset), len(errs), median(errs), max(errs), refit),
              flush=True)
    home = Home(a.bin)
    try:
        for f in ("train-runs-llama.csv", "strategy-runs.csv"):
            if not os.path.exists(d(f)):
                continue
            s2 = sources_of(d(f))
            rows = home.validate(d(f))
            for source in sorted(set(s2.values())):
                errs = score(rows, s2, source)
                if not errs:
                    print("  %-26s %-20s   0 rows expressed" % (source, f))
                    continue
                per.append((source, f, median(errs), max(errs)))
                print("  %-26s %-20s %3d rows, median %5.1f%%, worst %6.1f%%  (shipped values: never fitted on it)"
                      % (source, f, len(errs), median(errs), max(errs)), flush=True)
    finally:
        shutil.rmtree(home.dir)
    meds = [p[2] for p in per]
    worst = max(per, key=lambda p: p[2])
    print("# worst source: %s (%s)" % (worst[0], worst[1]))
    print("leave-one-source-out: %d sources, median %.1f %%, worst source %.1f %%"
          % (len(per), median(meds), worst[2]))


def find_data():
    """The public data directory when --data is not given: $FSDPBENCH_GPU_DATA, else
    shared/gpu-data beside this checkout, the working directory or $OLDPWD (the directory a
    shell left for a copy of the tree, as the acceptance checks build one). Exits 2 naming
    every place it looked when none holds train-runs.csv."""
    tried = []
    if os.environ.get("FSDPBENCH_GPU_DATA"):
        tried.append(os.environ["FSDPBENCH_GPU_DATA"])
    for base in (ROOT, os.getcwd(), os.environ.get("OLDPWD", "")):
        if base:
            tried += [os.path.join(os.path.dirname(base), "shared", "gpu-data"),
                      os.path.join(base, "shared", "gpu-data")]
    for t in tried:
        if os.path.isfile(os.path.join(t, "train-runs.csv")):
            return t
    print("fit_gpu_profiles.py: --data not given and no train-runs.csv in %s; pass --data DIR"
          % ", ".join(dict.fromkeys(tried)), file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "fsdpbench"))
    ap.add_argument("--data", default=None,
                    help="the public data (train-runs.csv, ...); default: the first of "
                         "$FSDPBENCH_GPU_DATA and shared/gpu-data beside this checkout, the "
                         "working directory or the one it was entered from ($OLDPWD: a copied "
                         "tree run from its checkout)")
    ap.add_argument("--only", choices=["gemm", "gemm-xla", "flash", "cudnn", "nccl", "sustained", "host"],
                    action="append")
    ap.add_argument("--write", action="store_true", help="store the fitted values in models/hardware")
    ap.add_argument("--leave-one-source-out", action="store_true",
                    help="refit without each training-run source and score it (see above)")
    ap.add_argument("--jobs", type=int, default=4,
                    help="--leave-one-source-out: sources refitted side by side (default 4)")
    ap.add_argument("--stride", type=int, default=3,
                    help="--leave-one-source-out refits on every N-th row of each kept source (default 3)")
    a = ap.parse_args()
    a.data = a.data or find_data()
    if not os.path.exists(a.bin) and os.path.exists(os.path.join(ROOT, "build", "fsdpbench")):
        a.bin = os.path.join(ROOT, "build", "fsdpbench")
    d = lambda f: os.path.join(a.data, f)
    h200 = os.path.join(ROOT, "docs", "h200")
    fits = {
        "gemm": (d("h100-torch-gemm.csv"),
                 [("h100", "gemm_max_efficiency", 0.5, 1.0), ("h100", "gemm_k_half", 16, 4096),
                  ("h100", "gemm_launch_us", 0.5, 40), ("h100", "gemm_stream_k", 0.5, 1.0),
                  ("h100", "gemm_align4_factor", 0.1, 1.0), ("h100", "gemm_align2_factor", 0.05, 1.0)],
                 lambda r: True, 4),
        "gemm-xla": (d("gemm.csv"), [("h100-xla", "gemm_max_efficiency", 0.5, 1.0),
                                     ("h100-xla", "gemm_k_half", 16, 4096), ("h100-xla", "gemm_launch_us", 0.5, 20)],
                     # XLA's bf16 rows; its f32 rows run on TF32 and are reported apart
                     lambda r: r["profile"] == "h100-xla" and " bf16" in r["configuration"]),
        "cudnn": (os.path.join(h200, "attention.csv"), [("h100", "cudnn_ratio", 0.2, 4), ("h100", "cudnn_half_seq", 16, 8192)],
                  lambda r: True),
        "flash": (d("attention.csv"), [("a100", "flash_bwd_efficiency", 0.2, 1),
                                       ("a100", "flash_half_seq", 16, 8192), ("h100", "flash_fwd_efficiency", 0.1, 1),
                                       ("h100", "flash_bwd_efficiency", 0.1, 1), ("h100", "flash_half_seq", 16, 8192),
                                       ("a100", "flash1_ratio", 0.1, 1), ("a100", "flash1_half_seq", 16, 8192),
                                       ("h100", "flash1_ratio", 0.1, 1), ("h100", "flash1_half_seq", 16, 8192)],
                  lambda r: "FlashAttention" in r["configuration"]),
        "nccl": (d("collectives.csv"), [("a100", "coll_overhead_us", 0.1, 200)],
                 lambda r: r["profile"] == "a100" and float(r["configuration"].split()[-2]) <= 1 << 20),
        "sustained": (d("train-runs.csv"), [("a100", "sustained_compute", 0.3, 1), ("h100", "sustained_compute", 0.3, 1),
                                            ("a100", "eager_mem_factor", 1, 10), ("a100", "triton_ratio", 0.2, 1)],
                      lambda r: True),
        "host": (d("train-runs.csv"), [("a100", "host_op_us", 0.01, 200)], lambda r: True),
    }
    if a.leave_one_source_out:
        leave_one_source_out(a, d, fits)
        return
    home = Home(a.bin)
    for name in a.only or ["gemm", "gemm-xla", "flash", "cudnn", "nccl", "sustained"]:
        dataset, params, keep = fits[name][:3]
        power = fits[name][3] if len(fits[name]) > 3 else 2
        vals, best, errs = fit(home, dataset, params, keep, power=power)
        print("fit %-8s on %s: %s; %s log error %.3f" % (name, os.path.basename(dataset), summary(errs),
                                                        "RMS" if power == 2 else "L%d" % power, best))
        for (p, k), v in vals.items():
            print("    %-10s %-22s %.4g" % (p, k, v))
            if a.write:
                for q in targets(p, k):
                    try:
                        set_key(os.path.join(HW, q + ".yaml"), k, v)
                    except KeyError:
                        pass
    shutil.rmtree(home.dir)


if __name__ == "__main__":
    main()
