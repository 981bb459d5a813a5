// The variants of gemm_split.cu with one TF32 product (tensor_cores.cuh, PASSES 1): operands
// rounded to 11 significant bits, for CUDA PRECISION = TF32 only; again the same bits for every
// variant.

#include "tensor_cores.cuh"

GEMM_TN_SPLIT(gemm_tn_tf64x64_w32x32_s3, 64, 64, 32, 32, 3, 1)
GEMM_TN_SPLIT(gemm_tn_tf128x32_w32x32_s3, 128, 32, 32, 32, 3, 1)
GEMM_TN_SPLIT(gemm_tn_tf64x32_w32x16_s4, 64, 32, 32, 16, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf32x32_w16x16_s4, 32, 32, 16, 16, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf64x16_w16x16_s4, 64, 16, 16, 16, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf32x16_w16x8_s4, 32, 16, 16, 8, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf128x16_w32x16_s4, 128, 16, 32, 16, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf64x16_w32x16_s4, 64, 16, 32, 16, 4, 1)
GEMM_TN_SPLIT(gemm_tn_tf64x48_w32x24_s3, 64, 48, 32, 24, 3, 1)
GEMM_TN_SPLIT(gemm_tn_tf128x64_w32x64_s3, 128, 64, 32, 64, 3, 1)

GEMM_NN_SPLIT(gemm_nn_tf128x64_w32x32_s3, gemm_nn_split_body, 128, 64, 32, 32, 3, 1)
GEMM_NN_SPLIT(gemm_nn_tf128x32_w32x32_s3, gemm_nn_split_body, 128, 32, 32, 32, 3, 1)
GEMM_NN_SPLIT(gemm_nn_tf128x16_w32x16_s4, gemm_nn_split_body, 128, 16, 32, 16, 4, 1)
GEMM_NN_SPLIT(gemm_nn_tf64x16_w16x16_s4, gemm_nn_split_body, 64, 16, 16, 16, 4, 1)
GEMM_NN_SPLIT(gemm_nn_tfd128x64_w32x32_s3, gemm_nn_dense_split_body, 128, 64, 32, 32, 3, 1)
GEMM_NN_SPLIT(gemm_nn_tfd64x64_w32x32_s3, gemm_nn_dense_split_body, 64, 64, 32, 32, 3, 1)
GEMM_NN_RUNS(gemm_nn_tfq64x64_w32x32_s3, 64, 64, 32, 32, 3, 1, 1, false)
GEMM_NN_RUNS(gemm_nn_tfq128x16_w32x16_s4, 128, 16, 32, 16, 4, 1, 1, false)
GEMM_NN_RUNS(gemm_nn_tfq64x16_w16x16_s4, 64, 16, 16, 16, 4, 1, 1, false)
GEMM_NN_RUNS(gemm_nn_tfq128x24_w32x24_s3, 128, 24, 32, 24, 3, 1, 1, false)
// copy stages of 32 k (two sums of 16 each)
GEMM_NN_RUNS(gemm_nn_tfq128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 1, 2, false)
GEMM_NN_RUNS(gemm_nn_tfq128x32_w32x32_k32_s2, 128, 32, 32, 32, 2, 1, 2, false)
GEMM_NN_RUNS(gemm_nn_tfq64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 1, 2, false)
GEMM_NN_RUNS(gemm_nn_tfq64x32_w32x16_k32_s3, 64, 32, 32, 16, 3, 1, 2, false)
// runs of two as well (gathered depths of 2 mod 4)
GEMM_NN_RUNS(gemm_nn_tfp64x64_w32x32_s3, 64, 64, 32, 32, 3, 1, 1, true)
GEMM_NN_RUNS(gemm_nn_tfp128x16_w32x16_s4, 128, 16, 32, 16, 4, 1, 1, true)
GEMM_NN_RUNS(gemm_nn_tfp64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 1, 2, true)
GEMM_NN_RUNS(gemm_nn_tfp128x32_w32x32_k32_s2, 128, 32, 32, 32, 2, 1, 2, true)
GEMM_NN_RUNS(gemm_nn_tfp128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 1, 2, true)
GEMM_NN_RUNS(gemm_nn_tfp64x32_w32x16_k32_s3, 64, 32, 32, 16, 3, 1, 2, true)
// copy stages of 32 cases (two sums of 16 each)
GEMM_TN_SPLIT_SUBS(gemm_tn_tf64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 1, 2)
GEMM_TN_SPLIT_SUBS(gemm_tn_tf128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 1, 2)
// 80 rows (warps of 16): a 5 x 5 window's 76 weight rows on three bands, which 128-row tiles
// leave two fifths idle
GEMM_TN_SPLIT_SUBS(gemm_tn_tf80x24_w16x24_k32_s2, 80, 24, 16, 24, 2, 1, 2)
GEMM_TN_SPLIT_SUBS(gemm_tn_tf64x16_w16x16_k32_s3, 64, 16, 16, 16, 3, 1, 2)
