// gemm_tn and gemm_nn on the tensor cores in split TF32 (tensor_cores.cuh, PASSES 3): float32
// accuracy, the same bits for every variant; the default wherever the kernel plan's rule puts a
// product on the tensor cores.

#include "tensor_cores.cuh"

GEMM_TN_SPLIT(gemm_tn_tc64x64_w32x32_s3, 64, 64, 32, 32, 3, 3)
GEMM_TN_SPLIT(gemm_tn_tc128x32_w32x32_s3, 128, 32, 32, 32, 3, 3)
GEMM_TN_SPLIT(gemm_tn_tc64x32_w32x16_s4, 64, 32, 32, 16, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc32x32_w16x16_s4, 32, 32, 16, 16, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc64x16_w16x16_s4, 64, 16, 16, 16, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc32x16_w16x8_s4, 32, 16, 16, 8, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc128x16_w32x16_s4, 128, 16, 32, 16, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc64x16_w32x16_s4, 64, 16, 32, 16, 4, 3)
GEMM_TN_SPLIT(gemm_tn_tc64x48_w32x24_s3, 64, 48, 32, 24, 3, 3)
GEMM_TN_SPLIT(gemm_tn_tc128x64_w32x64_s3, 128, 64, 32, 64, 3, 3)

GEMM_NN_SPLIT(gemm_nn_tc128x64_w32x32_s3, gemm_nn_split_body, 128, 64, 32, 32, 3, 3)
GEMM_NN_SPLIT(gemm_nn_tc128x32_w32x32_s3, gemm_nn_split_body, 128, 32, 32, 32, 3, 3)
GEMM_NN_SPLIT(gemm_nn_tc128x16_w32x16_s4, gemm_nn_split_body, 128, 16, 32, 16, 4, 3)
GEMM_NN_SPLIT(gemm_nn_tc64x16_w16x16_s4, gemm_nn_split_body, 64, 16, 16, 16, 4, 3)
GEMM_NN_SPLIT(gemm_nn_tcd128x64_w32x32_s3, gemm_nn_dense_split_body, 128, 64, 32, 32, 3, 3)
GEMM_NN_SPLIT(gemm_nn_tcd64x64_w32x32_s3, gemm_nn_dense_split_body, 64, 64, 32, 32, 3, 3)
GEMM_NN_RUNS(gemm_nn_tcq64x64_w32x32_s3, 64, 64, 32, 32, 3, 3, 1, false)
GEMM_NN_RUNS(gemm_nn_tcq128x16_w32x16_s4, 128, 16, 32, 16, 4, 3, 1, false)
GEMM_NN_RUNS(gemm_nn_tcq64x16_w16x16_s4, 64, 16, 16, 16, 4, 3, 1, false)
GEMM_NN_RUNS(gemm_nn_tcq128x24_w32x24_s3, 128, 24, 32, 24, 3, 3, 1, false)
// copy stages of 32 k (two sums of 16 each)
GEMM_NN_RUNS(gemm_nn_tcq128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 3, 2, false)
GEMM_NN_RUNS(gemm_nn_tcq128x32_w32x32_k32_s2, 128, 32, 32, 32, 2, 3, 2, false)
GEMM_NN_RUNS(gemm_nn_tcq64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 3, 2, false)
GEMM_NN_RUNS(gemm_nn_tcq64x32_w32x16_k32_s3, 64, 32, 32, 16, 3, 3, 2, false)
// runs of two as well (gathered depths of 2 mod 4)
GEMM_NN_RUNS(gemm_nn_tcp64x64_w32x32_s3, 64, 64, 32, 32, 3, 3, 1, true)
GEMM_NN_RUNS(gemm_nn_tcp128x16_w32x16_s4, 128, 16, 32, 16, 4, 3, 1, true)
GEMM_NN_RUNS(gemm_nn_tcp64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 3, 2, true)
GEMM_NN_RUNS(gemm_nn_tcp128x32_w32x32_k32_s2, 128, 32, 32, 32, 2, 3, 2, true)
GEMM_NN_RUNS(gemm_nn_tcp128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 3, 2, true)
GEMM_NN_RUNS(gemm_nn_tcp64x32_w32x16_k32_s3, 64, 32, 32, 16, 3, 3, 2, true)
// copy stages of 32 cases (two sums of 16 each)
GEMM_TN_SPLIT_SUBS(gemm_tn_tc64x64_w32x32_k32_s2, 64, 64, 32, 32, 2, 3, 2)
GEMM_TN_SPLIT_SUBS(gemm_tn_tc128x24_w32x24_k32_s2, 128, 24, 32, 24, 2, 3, 2)
// 80 rows (warps of 16): a 5 x 5 window's 76 weight rows on three bands, which 128-row tiles
// leave two fifths idle
GEMM_TN_SPLIT_SUBS(gemm_tn_tc80x24_w16x24_k32_s2, 80, 24, 16, 24, 2, 3, 2)
GEMM_TN_SPLIT_SUBS(gemm_tn_tc64x16_w16x16_k32_s3, 64, 16, 16, 16, 3, 3, 2)
