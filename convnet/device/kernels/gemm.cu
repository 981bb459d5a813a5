// Activation, delta backpropagation and weight gradient of FC, LOCAL and CONV layers (and of
// the output layer), as "gather" matrix products with shared-memory tiles.
//
// gemm_nn: for each group g (grid x, fastest, so the blocks running together share their cases'
// rows in the L2 cache), case m and column n
//     out[m*ldo + o_add + n] = epilogue( sum_k A(m, k) * B[boff(k) + b_add + n] )
//     A(m, k) = src[m*lda + tab[a_start + k]]  (or 1 for the bias, 0 for padding)
//     boff(k) = k * b_ld when b_ld > 0 (activation: rows of the forward layout), else tab[b_start + k]
// gemm_tn: weight-gradient partial sums
//     part[p][k][c] = sum over (group g, case m) of A_g(m, k) * delta[m*ldd + g*depth + n]
// The sums over k (gemm_nn) and over (g, m) (gemm_tn) always run in the same sequential order,
// whatever the tile shape, so every launch configuration gives the same bits.

#include "common.cuh"

// ------------------------------------------------------------------------------------ gemm_nn
// BM x BN outputs per block, BK-deep steps, TM x TN outputs per thread.

template <int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void gemm_nn_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    static_assert(NT % BK == 0 && NT % BN == 0, "loader shape");
    static_assert(A_PER >= 1 && B_PER >= 1, "loader shape");
    __shared__ __align__(16) float As[2][BK][BM + 4];
    __shared__ __align__(16) float Bs[2][BK][BN];

    const int tid = threadIdx.x;
    const int tn = tid % (BN / TN);
    const int tm = tid / (BN / TN);
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;
    // loader coordinates: A column (k) and B column (n) are fixed per thread
    const int a_k = tid % BK;
    const int a_m = tid / BK;
    const int b_n = tid % BN;
    const int b_k = tid / BN;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        const GroupDesc d(desc, g);

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

        float ra[A_PER], rb[B_PER];
        const int nk = (d.K + BK - 1) / BK;

        auto load = [&](int k0) {
            const int k = k0 + a_k;
            int ao = A_ZERO;
            if (k < d.K) ao = tab[d.a_start + k];
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const int m = m0 + a_m + i * (NT / BK);
                float v = 0.f;
                if (m < M) {
                    if (ao >= 0) v = src[(i64)m * lda + ao];
                    else if (ao == A_ONE) v = 1.f;
                }
                ra[i] = v;
            }
            const int n = n0 + b_n;
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int kb = k0 + b_k + i * (NT / BN);
                float v = 0.f;
                if (kb < d.K && n < N) {
                    const i64 bo = b_ld > 0 ? (i64)kb * b_ld : (i64)tab[d.b_start + kb];
                    v = B[bo + d.b_add + n];
                }
                rb[i] = v;
            }
        };
        auto store = [&](int buf) {
#pragma unroll
            for (int i = 0; i < A_PER; ++i) As[buf][a_k][a_m + i * (NT / BK)] = ra[i];
#pragma unroll
            for (int i = 0; i < B_PER; ++i) Bs[buf][b_k + i * (NT / BN)][b_n] = rb[i];
        };

        if (nk > 0) {
            load(0);
            store(0);
        }
        __syncthreads();
        for (int t = 0; t < nk; ++t) {
            const int buf = t & 1;
            if (t + 1 < nk) load((t + 1) * BK);
            tile_multiply_add<BK, TM, TN, BM + 4, BN>(acc, &As[buf][0][0], &Bs[buf][0][0],
                                                tm * TM, tn * TN);
            if (t + 1 < nk) store(buf ^ 1);
            __syncthreads();
        }

        store_tile<TM, TN>(acc, out, prior, epi, m0 + tm * TM, n0 + tn * TN, M, N, ldo, d.o_add);
    }
}

// Tile shapes (BM x BN per block, TM x TN per thread); the backend times the candidates for each
// launch once, on the real data, and keeps the fastest (they all give the same bits).
#define GEMM_NN(NAME, BM, BN, BK, TM, TN)                                                        \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN))                           \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)      \
    {                                                                                             \
        gemm_nn_body<BM, BN, BK, TM, TN>(src, lda, tab, desc, B, b_ld, M, N, out, ldo, prior,    \
                                         epi, G);                                                 \
    }

GEMM_NN(gemm_nn_128x64_8x4, 128, 64, 8, 8, 4)
GEMM_NN(gemm_nn_256x32_8x8, 256, 32, 8, 8, 8)
GEMM_NN(gemm_nn_128x32_4x4, 128, 32, 8, 4, 4)
GEMM_NN(gemm_nn_128x32_8x4, 128, 32, 8, 8, 4)
GEMM_NN(gemm_nn_64x16_4x2, 64, 16, 8, 4, 2)
GEMM_NN(gemm_nn_128x16_8x2, 128, 16, 8, 8, 2)
GEMM_NN(gemm_nn_128x64_8x4_k16, 128, 64, 16, 8, 4)
GEMM_NN(gemm_nn_256x32_8x4_k16, 256, 32, 16, 8, 4)
GEMM_NN(gemm_nn_128x32_8x4_k16, 128, 32, 16, 8, 4)
// 160 cases a block, 320 threads, BK 20: 63 x 8 blocks for 10,000 cases and 500 columns fill two
// rounds of two blocks per multiprocessor on 132 multiprocessors (128 rows: 79 x 8, 2.4 rounds)
GEMM_NN(gemm_nn_160x64_8x4_k20, 160, 64, 20, 8, 4)

// ----------------------------------------------------------------- gemm_nn for a few columns
// The output layer's product: one group of dense rows (plan.DenseRows; A's columns a0, a0 + 1,
// ..., then perhaps the bias; B's rows evenly spaced, 16-byte aligned) and N <= 16 columns. A
// thread per output: 32 / N cases a warp, N lanes a case, so that 10 classes keep 30 lanes of a
// warp busy and 10,000 cases make over 3,000 warps. Each thread reads its case's row 16 bytes
// at a time and the B rows from the L1 cache (the lanes of a warp share them), and adds its
// products in k order, then the bias, as the tiles do: the same bits.
template <int WARPS>
__device__ __forceinline__ void gemm_nn_narrow_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    const int lane = threadIdx.x % 32;
    const int per_warp = 32 / N;                         // cases a warp
    const int m = (blockIdx.y * WARPS + threadIdx.x / 32) * per_warp + lane / N;
    const int n = lane % N;
    if (lane >= per_warp * N || m >= M) return;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        const DenseGroup dg(src, tab, desc, g, B, b_ld);
        const int Kd = dg.K_dense;
        const i64 b_step = dg.b_step;
        const float* a = dg.a_rows + (i64)m * lda;
        const float* b = dg.b_rows + n;                             // row k of column n

        float acc = 0.f;
        int k = 0;
        // 8 of the case's 16-byte loads in flight at once: the rows come from L2 or memory
#pragma unroll 8
        for (; k + 4 <= Kd; k += 4) {
            const float4 av = *reinterpret_cast<const float4*>(a + k);
            acc = fmaf(av.x, b[0], acc);
            acc = fmaf(av.y, b[b_step], acc);
            acc = fmaf(av.z, b[2 * b_step], acc);
            acc = fmaf(av.w, b[3 * b_step], acc);
            b += 4 * b_step;
        }
        for (; k < Kd; ++k, b += b_step) acc = fmaf(a[k], b[0], acc);
        if (dg.bias) acc = fmaf(1.f, b[0], acc);                    // the bias row, last

        const i64 o = (i64)m * ldo + dg.o_add + n;
        out[o] = nn_epilogue(acc, epi, prior, o);
    }
}

// name: gemm_nn_narrow_wWARPS; a block of WARPS warps takes WARPS * (32 / N) cases
// (tuning.nn_rows)
#define GEMM_NN_NARROW(NAME, WARPS)                                                               \
    extern "C" __global__ void __launch_bounds__(WARPS * 32)                                      \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)      \
    {                                                                                             \
        gemm_nn_narrow_body<WARPS>(src, lda, tab, desc, B, b_ld, M, N, out, ldo, prior, epi, G); \
    }

GEMM_NN_NARROW(gemm_nn_narrow_w8, 8)
GEMM_NN_NARROW(gemm_nn_narrow_w4, 4)

// ------------------------------------------------------------------------------------ gemm_tn
// Tile: BM weight rows (k) x BN columns (n); the reduction runs over (group, case) in BK steps.
// Grid z enumerates partials: z = chunk * slots + slot; a slot is a range of gps groups.
// LOCAL layers (local_cols = 1) have one group per slot and keep every group's columns apart:
// partial p = chunk, column = slot * NL + n - n_lo; otherwise p = z, column = n - n_lo.
template <int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void gemm_tn_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,
    int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,
    int local_cols, float* __restrict__ part, int nz)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    static_assert(NT % BM == 0 && NT % BN == 0, "loader shape");
    static_assert(A_PER >= 1 && B_PER >= 1, "loader shape");
    __shared__ __align__(16) float As[2][BK][BM];
    __shared__ __align__(16) float Ds[2][BK][BN];

    const int tid = threadIdx.x;
    const int tn = tid % (BN / TN);
    const int tm = tid / (BN / TN);
    const int k0 = blockIdx.y * BM;
    const int NL = n_hi - n_lo;
    const int c0 = blockIdx.x * BN;          // column within [0, NL)
    const int a_k = tid % BM;                // loader: weight row
    const int a_r = tid / BM;                // loader: case within the step
    const int d_n = tid % BN;
    const int d_r = tid / BN;
    const int pld = local_cols ? groups * NL : NL;

    for (int z = blockIdx.z; z < nz; z += gridDim.z) {
        const PartialShare sh(z, slots, chunk, n_cases, gps, groups);
        const int ch = sh.ch, slot = sh.slot, case_lo = sh.case_lo, case_hi = sh.case_hi;
        const int g_lo = sh.g_lo;
        const int tiles = sh.tiles(BK);
        const int steps = (sh.g_hi - g_lo) * tiles;

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

        float ra[A_PER], rd[B_PER];
        StageWalk walk(g_lo, tiles);            // load() takes the steps in order
        auto load = [&](int) {
            int g, tile;
            walk.next(g, tile);
            const int cb = case_lo + tile * BK;
            const int k = k0 + a_k;
            int ao = A_ZERO;
            if (k < R) ao = tab[desc[g * 5] + k];
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const int m = cb + a_r + i * (NT / BM);
                float v = 0.f;
                if (m < case_hi) {
                    if (ao >= 0) v = src[(i64)m * lda + ao];
                    else if (ao == A_ONE) v = 1.f;
                }
                ra[i] = v;
            }
            const int n = n_lo + c0 + d_n;
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int m = cb + d_r + i * (NT / BN);
                float v = 0.f;
                if (m < case_hi && n < n_hi) v = delta[(i64)m * ldd + (i64)g * depth + n];
                rd[i] = v;
            }
        };
        auto store = [&](int buf) {
#pragma unroll
            for (int i = 0; i < A_PER; ++i) As[buf][a_r + i * (NT / BM)][a_k] = ra[i];
#pragma unroll
            for (int i = 0; i < B_PER; ++i) Ds[buf][d_r + i * (NT / BN)][d_n] = rd[i];
        };

        if (steps > 0) {
            load(0);
            store(0);
        }
        __syncthreads();
        for (int s = 0; s < steps; ++s) {
            const int buf = s & 1;
            if (s + 1 < steps) load(s + 1);
            tile_multiply_add<BK, TM, TN, BM, BN>(acc, &As[buf][0][0], &Ds[buf][0][0],
                                                tm * TM, tn * TN);
            if (s + 1 < steps) store(buf ^ 1);
            __syncthreads();
        }

        const i64 p = local_cols ? ch : z;
        const int col_base = local_cols ? slot * NL : 0;
        store_partial_tile<TM, TN>(acc, part, p, k0 + tm * TM, c0 + tn * TN, R, NL, pld, col_base);
    }
}

#define GEMM_TN(NAME, BM, BN, BK, TM, TN)                                                        \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN))                           \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,      \
         int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,      \
         int local_cols, float* __restrict__ part, int nz)                                       \
    {                                                                                             \
        gemm_tn_body<BM, BN, BK, TM, TN>(src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi,   \
                                         n_cases, chunk, groups, gps, slots, local_cols, part,   \
                                         nz);                                                     \
    }

GEMM_TN(gemm_tn_128x64_8x4, 128, 64, 8, 8, 4)
GEMM_TN(gemm_tn_128x64_8x8, 128, 64, 8, 8, 8)
GEMM_TN(gemm_tn_128x32_4x4, 128, 32, 8, 4, 4)
GEMM_TN(gemm_tn_128x32_8x4, 128, 32, 8, 8, 4)
GEMM_TN(gemm_tn_64x32_4x4, 64, 32, 8, 4, 4)
GEMM_TN(gemm_tn_64x16_4x2, 64, 16, 8, 4, 2)
GEMM_TN(gemm_tn_32x32_2x4, 32, 32, 8, 2, 4)
GEMM_TN(gemm_tn_32x32_4x4, 32, 32, 8, 4, 4)
GEMM_TN(gemm_tn_128x64_8x4_k16, 128, 64, 16, 8, 4)
GEMM_TN(gemm_tn_32x32_4x4_k16, 32, 32, 16, 4, 4)
