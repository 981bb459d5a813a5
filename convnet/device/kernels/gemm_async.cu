// The products of gemm.cu with asynchronous tile loads (cp.async, compute capability 8.0+).
//
// Same operands, tables and multiply-add order as gemm.cu (so every variant gives the same bits);
// only the way tiles reach shared memory differs: straight from global memory with cp.async,
// STAGES tiles deep, with no staging registers and no separate shared-memory stores.

#include "common.cuh"
#include "cp_async.cuh"

template <int BM, int BN, int BK, int TM, int TN, int STAGES>
__device__ __forceinline__ void gemm_nn_async_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    constexpr int A_STEP = NT / BK;          // rows between one thread's A elements
    constexpr int B_STEP = NT / BN;          // k between one thread's B elements
    static_assert(NT % BK == 0 && NT % BN == 0, "loader shape");
    static_assert(A_PER >= 1 && B_PER >= 1, "loader shape");
    __shared__ __align__(16) float As[STAGES][BK][BM + 4];
    __shared__ __align__(16) float Bs[STAGES][BK][BN];

    const int tid = threadIdx.x;
    const int tn = tid % (BN / TN);
    const int tm = tid / (BN / TN);
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;
    const int a_k = tid % BK;
    const int a_m = tid / BK;
    const int b_n = tid % BN;
    const int b_k = tid / BN;
    // the rows this thread loads are the same for every k: one base address, a validity mask
    const float* a_row = src + (i64)min(m0 + a_m, M - 1) * lda;
    const i64 a_stride = (i64)A_STEP * lda;
    unsigned a_valid = 0;
#pragma unroll
    for (int i = 0; i < A_PER; ++i)
        if (m0 + a_m + i * A_STEP < M) a_valid |= 1u << i;
    const int n = n0 + b_n;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        const GroupDesc d(desc, g);
        const int nk = (d.K + BK - 1) / BK;

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

        auto issue = [&](int t) {
            const int st = t % STAGES;
            const int k = t * BK + a_k;
            const int ao = k < d.K ? tab[d.a_start + k] : A_ZERO;
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const bool ok = ((a_valid >> i) & 1u) && ao != A_ZERO;
                const float* p = ok && ao >= 0 ? a_row + i * a_stride + ao : &k_one;
                cp_async4(&As[st][a_k][a_m + i * A_STEP], p, ok);
            }
            cp_async_gather_b<BK, B_PER, B_STEP, BN>(Bs[st], B, b_ld, tab, d, t, b_k, b_n, n, N);
        };

        cp_async_stages<STAGES>(nk, issue, [&](int st) {
            tile_multiply_add<BK, TM, TN, BM + 4, BN>(acc, &As[st][0][0], &Bs[st][0][0],
                                                tm * TM, tn * TN);
        });

        store_tile<TM, TN>(acc, out, prior, epi, m0 + tm * TM, n0 + tn * TN, M, N, ldo, d.o_add);
    }
}

#define GEMM_NN_ASYNC(NAME, BM, BN, BK, TM, TN, STAGES)                                          \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN))                           \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)      \
    {                                                                                             \
        gemm_nn_async_body<BM, BN, BK, TM, TN, STAGES>(src, lda, tab, desc, B, b_ld, M, N, out,  \
                                                       ldo, prior, epi, G);                       \
    }

GEMM_NN_ASYNC(gemm_nn_128x64_8x4_k16_s3, 128, 64, 16, 8, 4, 3)
GEMM_NN_ASYNC(gemm_nn_128x32_8x4_k16_s3, 128, 32, 16, 8, 4, 3)
GEMM_NN_ASYNC(gemm_nn_64x16_4x2_s4, 64, 16, 8, 4, 2, 4)

// ------------------------------------------------------------------ gemm_nn over dense rows
// The products of fully connected and output layers (one group) read whole rows: A's columns
// are consecutive floats of each case's row (table a0, a0 + 1, ...), perhaps followed by the
// bias (A_ONE, last), and B's rows are evenly spaced. These variants copy both operands 16 bytes
// at a time with cp.async. The A stage keeps the cases' rows as they are in memory ([case][k],
// a thread reads two k of a row in one load), so no register staging is needed to transpose it.
// A thread's TN = 8 columns are two runs of 4, half a tile apart, so that a warp's B loads cover
// 256 contiguous bytes. The host launches them only where the tables have that form (plan.py:
// GemmGroups.dense) and the rows are 16-byte aligned. Every output adds its products in k order,
// then the bias, as the other variants do, so the bits are the same.

template <int BM, int BN, int BK, int TM, int STAGES>
__device__ __forceinline__ void gemm_nn_dense_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int TN = 8;
    constexpr int TX = BN / TN;                  // threads across the columns
    constexpr int NT = (BM / TM) * TX;
    constexpr int AS = BK + 4;                   // floats from one A row to the next: 16-byte
                                                 // aligned, and a warp's two rows in other banks
    constexpr int A_CHUNKS = BM * BK / 4;
    constexpr int B_CHUNKS = BK * BN / 4;
    static_assert(BK % 4 == 0 && BN % 8 == 0, "dense tile shape");
    extern __shared__ __align__(16) float dense_stages[];
    float* As = dense_stages;                    // [STAGES][BM][AS]
    float* Bs = dense_stages + STAGES * BM * AS; // [STAGES][BK][BN]

    const int tid = threadIdx.x;
    const int tn = tid % TX;
    const int tm = tid / TX;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        // (DenseGroup's values, written out: through that struct, the 128 x 128 tile spills 8
        // bytes at its 128 registers)
        const GroupDesc d(desc, g);
        const int bias = d.K > 0 && tab[d.a_start + d.K - 1] == A_ONE;
        const int Kd = d.K - bias;               // the dense part of the table
        const float* a_rows = src + (Kd > 0 ? tab[d.a_start] : 0);
        const float* b_rows = B + (b_ld > 0 ? 0 : (d.K > 0 ? tab[d.b_start] : 0)) + d.b_add;
        const i64 b_step = b_ld > 0 ? b_ld : (d.K > 1 ? tab[d.b_start + 1] - tab[d.b_start] : 0);
        const int nk = (Kd + BK - 1) / BK;

        float acc[TM][TN];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;

        // rows past M read the last case (never stored); k past the dense part and columns past
        // N are zero-filled by the copy (source size below 16 bytes)
        auto issue = [&](int t) {
            float* as = As + (t % STAGES) * BM * AS;
            float* bs = Bs + (t % STAGES) * BK * BN;
            const int k0 = t * BK;
#pragma unroll
            for (int c0 = 0; c0 < A_CHUNKS; c0 += NT) {
                const int c = c0 + tid;
                if (A_CHUNKS % NT == 0 || c < A_CHUNKS) {
                    const int r = c / (BK / 4), q = c % (BK / 4);
                    const int k = k0 + 4 * q;
                    const int bytes = max(0, min(16, 4 * (Kd - k)));
                    const float* p = a_rows + (i64)min(m0 + r, M - 1) * lda + k;
                    cp_async16(as + r * AS + 4 * q, bytes ? p : src, bytes);
                }
            }
#pragma unroll
            for (int c0 = 0; c0 < B_CHUNKS; c0 += NT) {
                const int c = c0 + tid;
                if (B_CHUNKS % NT == 0 || c < B_CHUNKS) {
                    const int r = c / (BN / 4), q = c % (BN / 4);
                    const int k = k0 + r, n = n0 + 4 * q;
                    const int bytes = k < Kd ? max(0, min(16, 4 * (N - n))) : 0;
                    cp_async16(bs + r * BN + 4 * q, bytes ? b_rows + k * b_step + n : B, bytes);
                }
            }
        };

        auto multiply = [&](int st) {
            const float* as = As + st * BM * AS + tm * TM * AS;
            const float* bs = Bs + st * BK * BN + tn * 4;
            // not unrolled: unrolled, the compiler hoists the loads of later steps and needs
            // over 180 registers (two blocks a multiprocessor allow 128)
#pragma unroll 1
            for (int kk = 0; kk < BK; kk += 2) {
                float2 a[TM];
#pragma unroll
                for (int i = 0; i < TM; ++i)
                    a[i] = *reinterpret_cast<const float2*>(as + i * AS + kk);
#pragma unroll
                for (int s = 0; s < 2; ++s) {
                    const float4 lo = *reinterpret_cast<const float4*>(bs + (kk + s) * BN);
                    const float4 hi = *reinterpret_cast<const float4*>(bs + (kk + s) * BN + BN / 2);
                    const float b[TN] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
                        const float av = s ? a[i].y : a[i].x;
#pragma unroll
                        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av, b[j], acc[i][j]);
                    }
                }
            }
        };

        cp_async_stages<STAGES>(nk, issue, multiply);

#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + (j / 4) * (BN / 2) + tn * 4 + j % 4;
            if (!bias || n >= N) continue;
            const float bv = b_rows[(i64)Kd * b_step + n];      // the bias row: A = 1, last
#pragma unroll
            for (int i = 0; i < TM; ++i) acc[i][j] = fmaf(1.f, bv, acc[i][j]);
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + tm * TM + i;
            if (m >= M) continue;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                const int n = n0 + (j / 4) * (BN / 2) + tn * 4 + j % 4;
                if (n >= N) continue;
                const i64 o = (i64)m * ldo + d.o_add + n;
                out[o] = nn_epilogue(acc[i][j], epi, prior, o);
            }
        }
    }
}

// name: gemm_nn_dense_BMxBN_TMx8_kBK_sSTAGES; shared memory STAGES * (BM * (BK + 4) + BK * BN)
// floats (tuning.NN_SHARED); at most 128 registers, so that two blocks share a multiprocessor
#define GEMM_NN_DENSE(NAME, BM, BN, BK, TM, STAGES)                                               \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / 8), 2)                         \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)      \
    {                                                                                             \
        gemm_nn_dense_body<BM, BN, BK, TM, STAGES>(src, lda, tab, desc, B, b_ld, M, N, out, ldo, \
                                                   prior, epi, G);                                \
    }

// 160 x 128: 63 x 4 blocks for 10,000 cases and 500 columns, one round of two blocks on 132
// multiprocessors
GEMM_NN_DENSE(gemm_nn_dense_160x128_10x8_k16_s3, 160, 128, 16, 10, 3)
GEMM_NN_DENSE(gemm_nn_dense_128x128_8x8_k16_s3, 128, 128, 16, 8, 3)
GEMM_NN_DENSE(gemm_nn_dense_160x128_10x8_k16_s4, 160, 128, 16, 10, 4)

template <int BM, int BN, int BK, int TM, int TN, int STAGES>
__device__ __forceinline__ void gemm_tn_async_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,
    int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,
    int local_cols, float* __restrict__ part, int nz)
{
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    constexpr int A_STEP = NT / BM;
    constexpr int D_STEP = NT / BN;
    static_assert(NT % BM == 0 && NT % BN == 0, "loader shape");
    static_assert(A_PER >= 1 && B_PER >= 1, "loader shape");
    __shared__ __align__(16) float As[STAGES][BK][BM];
    __shared__ __align__(16) float Ds[STAGES][BK][BN];

    const int tid = threadIdx.x;
    const int tn = tid % (BN / TN);
    const int tm = tid / (BN / TN);
    const int k0 = blockIdx.y * BM;
    const int NL = n_hi - n_lo;
    const int c0 = blockIdx.x * BN;
    const int a_k = tid % BM;
    const int a_r = tid / BM;
    const int d_n = tid % BN;
    const int d_r = tid / BN;
    const int pld = local_cols ? groups * NL : NL;
    const int k = k0 + a_k;
    const int n = n_lo + c0 + d_n;

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

        StageWalk walk(g_lo, tiles);            // cp_async_stages issues the steps in order
        auto issue = [&](int s) {
            const int st = s % STAGES;
            int g, tile;
            walk.next(g, tile);
            const int cb = case_lo + tile * BK;
            const int ao = k < R ? tab[desc[g * 5] + k] : A_ZERO;
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const int m = cb + a_r + i * A_STEP;
                const bool ok = m < case_hi && ao != A_ZERO;
                const float* p = ok && ao >= 0 ? src + (i64)m * lda + ao : &k_one;
                cp_async4(&As[st][a_r + i * A_STEP][a_k], p, ok);
            }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int m = cb + d_r + i * D_STEP;
                const bool ok = m < case_hi && n < n_hi;
                const float* p = ok ? delta + (i64)m * ldd + (i64)g * depth + n : delta;
                cp_async4(&Ds[st][d_r + i * D_STEP][d_n], p, ok);
            }
        };

        cp_async_stages<STAGES>(steps, issue, [&](int st) {
            tile_multiply_add<BK, TM, TN, BM, BN>(acc, &As[st][0][0], &Ds[st][0][0],
                                                tm * TM, tn * TN);
        });

        const i64 p = local_cols ? ch : z;
        const int col_base = local_cols ? slot * NL : 0;
        store_partial_tile<TM, TN>(acc, part, p, k0 + tm * TM, c0 + tn * TN, R, NL, pld, col_base);
    }
}

#define GEMM_TN_ASYNC(NAME, BM, BN, BK, TM, TN, STAGES)                                          \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN))                           \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,      \
         int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,      \
         int local_cols, float* __restrict__ part, int nz)                                       \
    {                                                                                             \
        gemm_tn_async_body<BM, BN, BK, TM, TN, STAGES>(src, lda, tab, desc, delta, ldd, depth, R, \
                                                       n_lo, n_hi, n_cases, chunk, groups, gps,   \
                                                       slots, local_cols, part, nz);              \
    }

GEMM_TN_ASYNC(gemm_tn_128x64_8x4_k16_s3, 128, 64, 16, 8, 4, 3)
GEMM_TN_ASYNC(gemm_tn_128x32_8x4_k16_s3, 128, 32, 16, 8, 4, 3)
GEMM_TN_ASYNC(gemm_tn_32x32_4x4_k16_s4, 32, 32, 16, 4, 4, 4)
GEMM_TN_ASYNC(gemm_tn_32x32_2x4_s4, 32, 32, 8, 2, 4, 4)
GEMM_TN_ASYNC(gemm_tn_64x16_4x2_s4, 64, 16, 8, 4, 2, 4)

// ---------------------------------------------------------- gemm_tn, every column in one block
// gemm_tn's partial sums with a block that holds all the columns of a launch (up to TN_COLS_MAX),
// padded only to the next multiple of 4, and RG groups of TM weight rows: for layers of few
// slices (a first convolutional layer of 26 weight rows and 8 slices is one block of 52 threads,
// where the tile shapes pad it to 32 x 32, three quarters of it padding). The launch sets
// the shape (launches.py, tuning.tn_cols_shape): blockDim.x = RG * NC threads, NC = columns / 4,
// grid y over blocks of RG * TM rows, grid x over blocks of TN_COLS_MAX columns. Each thread
// holds TM rows x 4 columns; CB cases of one group per stage, STAGES stages in flight (cp.async),
// the terms added in gemm_tn's order (groups, then cases), so every variant gives the same bits.
#define TN_COLS_MAX 64

template <int TM, int CB, int STAGES>
__device__ __forceinline__ void gemm_tn_cols_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,
    int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,
    int local_cols, float* __restrict__ part, int nz)
{
    extern __shared__ __align__(16) float smem[];
    const int NL = n_hi - n_lo;
    const int BNW = min((NL + 3) & ~3, TN_COLS_MAX);     // columns per block
    const int NC = BNW >> 2;
    const int NT = blockDim.x;
    const int BR = NT / NC * TM;                         // rows per block
    const int LDA = (BR + 3) & ~3;
    float* As = smem;                                    // [STAGES][CB][LDA]
    float* Ds = smem + STAGES * CB * LDA;                // [STAGES][CB][BNW]

    const int tid = threadIdx.x;
    const int rg = tid / NC;
    const int cq = tid - rg * NC;
    const int k0 = blockIdx.y * BR;
    const int c0 = blockIdx.x * BNW;
    const int pld = local_cols ? groups * NL : NL;
    // loaders: row a_k of A for cases a_r, a_r + a_step, ...; column d_n of the deltas likewise
    // (the launch keeps BR <= NT and BNW <= NT)
    const int a_k = tid % BR, a_r = tid / BR, a_step = NT / BR;
    const int d_n = tid % BNW, d_r = tid / BNW, d_step = NT / BNW;
    const int k = k0 + a_k;
    const int n = n_lo + c0 + d_n;
    const bool n_ok = c0 + d_n < NL;

    for (int z = blockIdx.z; z < nz; z += gridDim.z) {
        const PartialShare sh(z, slots, chunk, n_cases, gps, groups);
        const int ch = sh.ch, slot = sh.slot, case_lo = sh.case_lo, case_hi = sh.case_hi;
        const int g_lo = sh.g_lo;
        const int tiles = sh.tiles(CB);
        const int steps = (sh.g_hi - g_lo) * tiles;

        float acc[TM][4];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

        StageWalk walk(g_lo, tiles);            // cp_async_stages issues the steps in order
        auto issue = [&](int s) {
            const int st = s % STAGES;
            int g, tile;
            walk.next(g, tile);
            const int cb = case_lo + tile * CB;
            if (a_r < a_step) {
                const int ao = k < R ? tab[desc[g * 5] + k] : A_ZERO;
                float* as = As + st * CB * LDA + a_k;
                for (int r = a_r; r < CB; r += a_step) {
                    const int m = cb + r;
                    const bool ok = m < case_hi && ao != A_ZERO;
                    const float* p = ok && ao >= 0 ? src + (i64)m * lda + ao : &k_one;
                    cp_async4(as + r * LDA, p, ok);
                }
            }
            if (d_r < d_step) {
                float* ds = Ds + st * CB * BNW + d_n;
                const float* dg = delta + (i64)g * depth + n;
                for (int r = d_r; r < CB; r += d_step) {
                    const int m = cb + r;
                    const bool ok = m < case_hi && n_ok;
                    cp_async4(ds + r * BNW, ok ? dg + (i64)m * ldd : delta, ok);
                }
            }
        };

        cp_async_stages<STAGES>(steps, issue, [&](int st) {
            const float* as = As + st * CB * LDA + rg * TM;
            const float* ds = Ds + st * CB * BNW + cq * 4;
#pragma unroll
            for (int r = 0; r < CB; ++r) {
                float a[TM], b[4];
                load_frag<TM>(a, as + r * LDA);
                load_frag<4>(b, ds + r * BNW);
#pragma unroll
                for (int i = 0; i < TM; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
        });

        const i64 p = local_cols ? ch : z;
        const int col_base = local_cols ? slot * NL : 0;
        store_partial_tile<TM, 4>(acc, part, p, k0 + rg * TM, c0 + cq * 4, R, NL, pld, col_base);
    }
}

#define GEMM_TN_COLS(NAME, TM, CB, STAGES)                                                       \
    extern "C" __global__ void __launch_bounds__(256)                                             \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,      \
         int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,      \
         int local_cols, float* __restrict__ part, int nz)                                       \
    {                                                                                             \
        gemm_tn_cols_body<TM, CB, STAGES>(src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi, \
                                          n_cases, chunk, groups, gps, slots, local_cols, part,  \
                                          nz);                                                    \
    }

GEMM_TN_COLS(gemm_tn_cols_1x4_c32_s3, 1, 32, 3)
