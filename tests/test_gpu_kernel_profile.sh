#!/usr/bin/env bash
# scripts/gpu_kernel_profile.py on a trace in the layout a cuda run writes (a rank's process with
# ProfilerStep# slices, a "rank N GPU (CUPTI)" process with kernel, memcpy and API records):
# per-step milliseconds per kernel stem over the records inside the ProfilerStep# windows only
# (a warm-up GEMM before step 1 and a kernel after the last step must not count), API records
# left out wherever they sit (the host's track or the GPU's), cuBLAS kernels grouped, the
# shares over the GPU-busy time; a trace without CUPTI records exits 1, a missing one 2.
set -u
: "${FB_SRC:?}"
S=$FB_SRC/scripts/gpu_kernel_profile.py
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
fail() { echo "test_gpu_kernel_profile: $*" >&2; exit 1; }
cat >"$W/t.json" <<'J'
{"displayTimeUnit":"ms","traceEvents":[
{"name":"process_name","ph":"M","pid":0,"tid":0,"args":{"name":"rank 0"}},
{"name":"ProfilerStep#1","cat":"step","ph":"X","pid":0,"tid":3,"ts":0,"dur":1000},
{"name":"ProfilerStep#2","cat":"step","ph":"X","pid":0,"tid":3,"ts":1000,"dur":1000},
{"name":"process_name","ph":"M","pid":1000,"tid":0,"args":{"name":"rank 0 GPU (CUPTI)"}},
{"name":"void fa::flash_attn_fwd_k<64, 4>(fa::args)","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":10,"dur":300},
{"name":"void fa::flash_attn_fwd_k<64, 4>(fa::args)","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":1010,"dur":300},
{"name":"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":400,"dur":200},
{"name":"sm90_xmma_gemm_bf16bf16_bf16f32","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":1400,"dur":200},
{"name":"Memcpy DtoD (Device -> Device)","cat":"cuda memcpy","ph":"X","pid":1000,"tid":100007,"ts":700,"dur":100},
{"name":"nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":-900,"dur":800},
{"name":"void fa::flash_attn_fwd_k<64, 4>(fa::args)","cat":"cuda kernel","ph":"X","pid":1000,"tid":100007,"ts":2100,"dur":300},
{"name":"cudaLaunchKernel","cat":"cuda api","ph":"X","pid":0,"tid":200001,"ts":5,"dur":900},
{"name":"cudaLaunchKernel","cat":"cuda api","ph":"X","pid":1000,"tid":200001,"ts":5,"dur":5000}
]}
J
out=$(python3 "$S" "$W/t.json") || fail "exit $? on a valid trace"
echo "$out"
grep -q "over 2 traced step(s)" <<<"$out" || fail "did not count 2 steps"
grep -q "GPU-busy 0.55 ms/step" <<<"$out" || fail "GPU-busy time is not 0.55 ms/step (API records or records outside the steps counted?)"
grep -Eq "^fa::flash_attn_fwd_k<64, 4> +0\.30 +54\.5%" <<<"$out" || fail "attention row wrong"
grep -Eq "^cuBLAS GEMMs +0\.20 +36\.4%" <<<"$out" || fail "cuBLAS kernels not grouped"
grep -Eq "^Memcpy DtoD +0\.05" <<<"$out" || fail "memcpy row wrong"
grep -q cudaLaunchKernel <<<"$out" && fail "an API record was counted"
echo '{"traceEvents":[]}' >"$W/e.json"
python3 "$S" "$W/e.json" >/dev/null 2>&1; [ $? = 1 ] || fail "no CUPTI records: want exit 1"
python3 "$S" "$W/missing.json" >/dev/null 2>&1; [ $? = 2 ] || fail "missing trace: want exit 2"
echo "test_gpu_kernel_profile: ok"
