#!/usr/bin/env bash
# scripts/gpu_op_gaps.py on a trace in the layout a cuda run writes (the rank's compute track
# with each op's family in args.op, a "(predicted)" process beside it as validate writes, a
# "rank N GPU (CUPTI)" process with kernels on the compute stream and on a comm stream): the
# clock offset taken from the ops one long kernel fills (-2 us here), each family's kernel time
# inside its marks and the idle left, the comm stream's kernel and the predicted ops not
# counted; a trace without CUPTI records exits 1, a missing one 2.
set -u
: "${FB_SRC:?}"
S=$FB_SRC/scripts/gpu_op_gaps.py
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "test_gpu_op_gaps: $*" >&2; exit 1; }
cat >"$W/t.json" <<'J'
{"traceEvents":[
{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0 (measured)"}},
{"name":"process_name","ph":"M","pid":100,"tid":0,"args":{"name":"rank 0 (predicted)"}},
{"name":"process_name","ph":"M","pid":1000,"tid":0,"args":{"name":"rank 0 GPU (CUPTI) (measured)"}},
{"name":"h.0.fc","cat":"gemm","ph":"X","pid":0,"tid":1,"ts":100,"dur":100,"args":{"op":"matmul_fwd"}},
{"name":"h.0.proj","cat":"gemm","ph":"X","pid":0,"tid":1,"ts":200,"dur":100,"args":{"op":"matmul_fwd"}},
{"name":"h.0.ln_1","cat":"mem","ph":"X","pid":0,"tid":1,"ts":300,"dur":30,"args":{"op":"layernorm_fwd"}},
{"name":"h.0.ln_2","cat":"mem","ph":"X","pid":0,"tid":1,"ts":330,"dur":20,"args":{"op":"layernorm_fwd"}},
{"name":"h.0.ln_2","cat":"mem","ph":"X","pid":100,"tid":1,"ts":330,"dur":900,"args":{"op":"layernorm_fwd"}},
{"name":"nvjet_a","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":98,"dur":100,"args":{"stream":7}},
{"name":"nvjet_b","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":198,"dur":100,"args":{"stream":7}},
{"name":"layernorm_fwd_k","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":318,"dur":8,"args":{"stream":7}},
{"name":"layernorm_fwd_k","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":338,"dur":8,"args":{"stream":7}},
{"name":"copy_k","cat":"cuda kernel","ph":"X","pid":1000,"tid":100009,"ts":300,"dur":40,"args":{"stream":9}}
]}
J
out=$(python3 "$S" "$W/t.json") || fail "exit $? on a valid trace"
echo "$out"
grep -q "compute stream 7, CUPTI clock -2.00 us" <<<"$out" || fail "stream or clock offset wrong"
grep -Eq "^matmul_fwd +2 +0\.200 +0\.200 +0\.000 +0\.0% +0\.00$" <<<"$out" || fail "matmul_fwd row wrong"
grep -Eq "^layernorm_fwd +2 +0\.050 +0\.016 +0\.034 +68\.0% +15\.00$" <<<"$out" ||
  fail "layernorm_fwd row wrong (the comm stream's kernel or the predicted op counted?)"
grep -Eq "^all ops +0\.250 +0\.216 +0\.034 +13\.6%$" <<<"$out" || fail "total wrong"
out=$(python3 "$S" "$W/t.json" --min-ms 0.1) || fail "--min-ms: exit $?"
grep -q "^layernorm_fwd" <<<"$out" && fail "--min-ms 0.1 kept a 0.05 ms family"
echo '{"traceEvents":[]}' >"$W/e.json"
python3 "$S" "$W/e.json" >/dev/null 2>&1; [ $? = 1 ] || fail "no CUPTI records: want exit 1"
python3 "$S" "$W/missing.json" >/dev/null 2>&1; [ $? = 2 ] || fail "missing trace: want exit 2"
echo "test_gpu_op_gaps: ok"
