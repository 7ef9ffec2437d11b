/* worker/cpu/ops_cpu.c — the CPU backend table and its thread count.
 *
 * The ops themselves live in one file per op (worker/cpu/<op>.c, the stems
 * the CUDA backend shares); this file only gathers them into the constant
 * table that ops_cpu_backend() hands out.
 */
#include "worker/ops.h"

#include "common/status.h"
#include "worker/cpu/ops_cpu_impl.h"

#include <cblas.h>
#include <omp.h>

static const struct ops_backend CPU_OPS = {
    .name = "cpu",
    .encoder_forward = cpu_encoder_forward,
    .encoder_backward = cpu_encoder_backward,
    .encoder_forward_vocab = cpu_encoder_forward_vocab,
    .encoder_backward_vocab = cpu_encoder_backward_vocab,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .fp8_quantize = cpu_fp8_quantize,
    .fp8_dequantize = cpu_fp8_dequantize,
    .lora_forward = cpu_lora_forward,
    .lora_backward = cpu_lora_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .mul_forward = cpu_mul_forward,
    .mul_backward = cpu_mul_backward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .crossentropy_vocab_max = cpu_crossentropy_vocab_max,
    .crossentropy_vocab_exp = cpu_crossentropy_vocab_exp,
    .crossentropy_vocab_finish = cpu_crossentropy_vocab_finish,
    .crossentropy_vocab_backward = cpu_crossentropy_vocab_backward,
    .to_f32 = cpu_to_f32,
    .from_f32 = cpu_from_f32,
    .add_into = cpu_add_into,
    .sum_squares = cpu_sum_squares,
    .scale = cpu_scale,
    .memset_zero = cpu_memset_zero,
    .adamw_update = cpu_adamw_update,
    .adam_update = cpu_adam_update,
    .sgd_update = cpu_sgd_update,
    .lion_update = cpu_lion_update,
    .adafactor_round = cpu_adafactor_round,
    .adafactor_apply = cpu_adafactor_apply,
    .adamw8bit_round = cpu_adamw8bit_round,
    .adamw8bit_apply = cpu_adamw8bit_apply,
};

const struct ops_backend *ops_cpu_backend(void)
{
    return &CPU_OPS;
}

/* OpenMP's count is a per-thread setting: it holds for the parallel regions
 * that the calling thread opens, which is the thread that runs the ops. */
void ops_cpu_set_threads(int n)
{
    ZT_ASSERT(n >= 1);
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
}
