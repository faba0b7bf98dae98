#!/usr/bin/env bash
# scripts/deepspeed_host_cost.py, the host-time measurement docs/simulator.md reports for the
# ZeRO++ blog's ZeRO-3 rows: the buffer its rank loops build is the one DeepSpeed 0.9's
# reduce_scatter_coalesced hands the collective (chunk r of the interleaved buffer holds every
# tensor's rank-r slice, each padded to the same ceil(numel / world); a lone tensor that divides
# is its own buffer), and its gather loops cut each parameter whole and in order out of the
# buffer all_gather_coalesced fills, at world sizes that do and do not divide the tensors; a
# run prints its 'gather waits:' and 'rank loops:' lines and exits 0; bad flags exit 2. No
# timing is asserted (figures belong in the script's output, not in a test).
# The Python with torch: $FB_VENV if set, else the venv tests/test_mem_snapshot_torch.sh caches;
# skips (77) when neither has torch (this test installs nothing).
set -u
: "${FB_SRC:?FB_SRC must point at the source tree}"
venv=${FB_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/fsdpbench/venv}
py=$venv/bin/python
[ -x "$py" ] && "$py" -c 'import torch' 2>/dev/null || { echo "SKIP: no torch at $venv"; exit 77; }
S="$FB_SRC/scripts/deepspeed_host_cost.py"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

chk=$("$py" - "$S" 2>&1 <<'PY'
import importlib.util, math, sys, torch
spec = importlib.util.spec_from_file_location("dhc", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
for world in (2, 3, 7, 16):
    for sizes in ([12], [13], [5, 9, 4], [world * 3, 1]):
        ts = [torch.arange(n, dtype=torch.float32) + 1000 * i for i, n in enumerate(sizes)]
        chunks = m.one_bucket(torch, ts, world)
        assert len(chunks) == world, (world, sizes, len(chunks))
        pad = [math.ceil(n / world) for n in sizes]
        for r in range(world):
            assert chunks[r].numel() == sum(pad), (world, sizes, r)
            off = 0
            for t, p in zip(ts, pad):
                want = t[r * p:r * p + p]
                got = chunks[r][off:off + want.numel()]
                assert torch.equal(got, want), (world, sizes, r)
                off += p
        if len(sizes) == 1 and sizes[0] % world == 0:
            assert chunks[0].data_ptr() == ts[0].data_ptr(), "a lone dividing tensor is copied"
for world in (2, 3, 7, 16):  # the gather's handle: each parameter back out of the buffer
    for sizes in ([world * 2 + 1, world * 3], [world, world * 5 - 1, world + 2]):
        ps = [torch.arange(n, dtype=torch.float32) + 1000 * i for i, n in enumerate(sizes)]
        pad = [math.ceil(n / world) for n in sizes]
        shards = [torch.nn.functional.pad(p, (0, q * world - p.numel())).view(world, q)
                  for p, q in zip(ps, pad)]
        flat = torch.cat([torch.cat([s[r] for s in shards]) for r in range(world)])
        got = m.coalesced_fetch(torch, sizes, world, flat)
        assert len(got) == len(ps) and all(torch.equal(g, p) for g, p in zip(got, ps)), \
            ("gather", world, sizes)
print("ok")
PY
)
[ $? -eq 0 ] || bad "the interleaved buffer is not what the collective expects: $(echo "$chk" | tail -3)"

out=$("$py" "$S" --world 16 --steps 1 2>&1)
[ $? -eq 0 ] || bad "--world 16 --steps 1 failed: $(echo "$out" | tail -1)"
echo "$out" | grep -q '^gather waits: one coalesced fetch of 2 weights at 16 ranks: [0-9.]* ms; at most 2' ||
  bad "no gather waits line: $(echo "$out" | tail -2)"
echo "$out" | grep -q '^rank loops: one block.s backward at 16 ranks: [0-9.]* ms; 40 blocks' ||
  bad "no rank loops line: $(echo "$out" | tail -2)"
"$py" "$S" --world 1 >/dev/null 2>&1
[ $? -eq 2 ] || bad "--world 1 does not exit 2"
"$py" "$S" --steps >/dev/null 2>&1
[ $? -eq 2 ] || bad "a flag without its value does not exit 2"
[ $fail -eq 0 ] && echo "ok: the rank loops build the collective's buffer; usage errors exit 2"
exit $fail
