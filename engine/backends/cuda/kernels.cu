/* The cuda device's kernel table: every entry of engine/device/kernels.h, each implemented in
 * the kernel file of its family (kernels_*.cu; the list, the helpers they share and their
 * common conventions are in kernels.cuh). It holds nothing but the table. */
#include "kernels.cuh"

extern "C" const fb_kernels fb_cuda_kernels = {
    .encoder_fwd = fb_cuda_encoder_fwd,
    .encoder_bwd = fb_cuda_encoder_bwd,
    .layernorm_fwd = fb_cuda_layernorm_fwd,
    .layernorm_bwd = fb_cuda_layernorm_bwd,
    .rmsnorm_fwd = fb_cuda_rmsnorm_fwd,
    .rmsnorm_bwd = fb_cuda_rmsnorm_bwd,
    .matmul_fwd = fb_cuda_matmul_fwd,
    .matmul_bwd = fb_cuda_matmul_bwd,
    .matmul_gelu_fwd = fb_cuda_matmul_gelu_fwd,
    .matmul_bwd_gelu = fb_cuda_matmul_bwd_gelu,
    .attention_fwd = fb_cuda_attention_fwd,
    .attention_bwd = fb_cuda_attention_bwd,
    .rope_fwd = fb_cuda_rope_fwd,
    .rope_bwd = fb_cuda_rope_bwd,
    .gelu_fwd = fb_cuda_gelu_fwd,
    .gelu_bwd = fb_cuda_gelu_bwd,
    .swiglu_fwd = fb_cuda_swiglu_fwd,
    .swiglu_bwd = fb_cuda_swiglu_bwd,
    .add = fb_cuda_add,
    .xent_fwd_bwd = fb_cuda_xent_fwd_bwd,
    .acc_f32 = fb_cuda_acc_f32,
    .scale = fb_cuda_scale,
    .adamw = fb_cuda_adamw,
    .adamw_cast = fb_cuda_adamw_cast,
    .sgd = fb_cuda_sgd,
    .sumsq_bins = fb_cuda_sumsq_bins,
    .sum_f64 = fb_cuda_sum_f64,
    .cast = fb_cuda_cast,
    .quantize = fb_cuda_quantize,
    .dequant_sum = fb_cuda_dequant_sum,
};
