// The products of gemm.cu (activation, delta backpropagation and weight-gradient partial sums of
// FC, LOCAL and CONV layers) on the tensor cores, for devices of compute capability 8.0 and up.
// Same arguments, tables, epilogues and partial-sum layout as gemm.cu; only the arithmetic
// differs: every float32 operand x is split into two TF32 numbers, big = tf32(x) and
// small = tf32(x - big), and a * b is formed as a_small*b_big + a_big*b_small + a_big*b_big with
// mma.sync m16n8k8 (float32 accumulation), which keeps float32 accuracy (the dropped
// a_small*b_small is below 2^-21 of the product).
//
// Each output's sum runs over k in blocks of 8, in order, three products per block in a fixed
// order, whatever the tile shape: every shape gives the same bits.
//
// Fragment layout of mma.m16n8k8 (tf32), lane = 4 * g + t:
//   A (16 x 8, row major): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8 x 8, column major): b0 (t, g), b1 (t + 4, g)
//   C (16 x 8): c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)

#include "common.cuh"

#define TC_BK 16

// A shared-memory row length that is 8 more than a multiple of 32 floats: the fragment reads
// (8 * t + g) then hit 32 different banks.
__host__ __device__ constexpr int tc_pad(int x) { return x + ((8 - x % 32) + 32) % 32; }

__device__ __forceinline__ unsigned tf32_bits(float x)
{
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void tf32_split(float x, unsigned& big, unsigned& small)
{
    big = tf32_bits(x);
    small = tf32_bits(x - __uint_as_float(big));
}

__device__ __forceinline__ void mma_tf32(float* c, const unsigned* a, const unsigned* b)
{
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// One TC_BK-deep step of a warp's WM x WN tile. As: [k][m] rows of LDA floats (m = output row);
// Bs: [k][n] rows of LDB floats. acc[mt][nt] is the m16n8 tile (wm0 + 16 mt, wn0 + 8 nt).
template <int MT, int NTL, int LDA, int LDB>
__device__ __forceinline__ void tc_warp_step(float (&acc)[MT][NTL][4], const float* As,
                                             const float* Bs, int wm0, int wn0, int g, int t)
{
#pragma unroll
    for (int k8 = 0; k8 < TC_BK; k8 += 8) {
        unsigned ab[MT][4], as[MT][4], bb[NTL][2], bs[NTL][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const float* p = As + (k8 + t) * LDA + wm0 + mt * 16 + g;
            tf32_split(p[0], ab[mt][0], as[mt][0]);
            tf32_split(p[8], ab[mt][1], as[mt][1]);
            tf32_split(p[4 * LDA], ab[mt][2], as[mt][2]);
            tf32_split(p[4 * LDA + 8], ab[mt][3], as[mt][3]);
        }
#pragma unroll
        for (int nt = 0; nt < NTL; ++nt) {
            const float* q = Bs + (k8 + t) * LDB + wn0 + nt * 8 + g;
            tf32_split(q[0], bb[nt][0], bs[nt][0]);
            tf32_split(q[4 * LDB], bb[nt][1], bs[nt][1]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTL; ++nt) {
                mma_tf32(acc[mt][nt], as[mt], bb[nt]);
                mma_tf32(acc[mt][nt], ab[mt], bs[nt]);
                mma_tf32(acc[mt][nt], ab[mt], bb[nt]);
            }
    }
}

// ------------------------------------------------------------------------------------ gemm_nn_tc
// BM cases x BN columns per block, warps of WM x WN; see gemm.cu's gemm_nn for the arguments.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void gemm_nn_tc_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int BK = TC_BK;
    constexpr int WARPS_N = BN / WN;
    constexpr int NT = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NTL = WN / 8;
    constexpr int LDA = tc_pad(BM), LDB = tc_pad(BN);
    constexpr int A_ROWS = NT / BK;                       // rows one pass of the A loader covers
    constexpr int A_PER = (BM + A_ROWS - 1) / A_ROWS;
    constexpr int B_PER = (BK * BN + NT - 1) / NT;
    static_assert(NT % BK == 0 && BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0,
                  "tile shape");
    __shared__ __align__(16) float As[2][BK * LDA];
    __shared__ __align__(16) float Bs[2][BK * LDB];

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;
    const int a_k = tid % BK;
    const int a_m = tid / BK;

    for (int g_ = blockIdx.x; g_ < G; g_ += gridDim.x) {
        const int a_start = desc[g_ * 5 + 0];
        const int b_start = desc[g_ * 5 + 1];
        const int K = desc[g_ * 5 + 2];
        const int b_add = desc[g_ * 5 + 3];
        const int o_add = desc[g_ * 5 + 4];

        float acc[MT][NTL][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NTL; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

        float ra[A_PER], rb[B_PER];
        const int nk = (K + BK - 1) / BK;
        auto load = [&](int k0) {
            const int k = k0 + a_k;
            int ao = A_ZERO;
            if (k < K) ao = tab[a_start + k];
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const int mm = a_m + i * A_ROWS;
                const int m = m0 + mm;
                float v = 0.f;
                if (mm < BM && m < M) {
                    if (ao >= 0) v = src[(i64)m * lda + ao];
                    else if (ao == A_ONE) v = 1.f;
                }
                ra[i] = v;
            }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int e = tid + i * NT;
                const int kk = e / BN, nn = e - kk * BN;
                const int kb = k0 + kk, n = n0 + nn;
                float v = 0.f;
                if (e < BK * BN && kb < K && n < N) {
                    const i64 bo = b_ld > 0 ? (i64)kb * b_ld : (i64)tab[b_start + kb];
                    v = B[bo + b_add + n];
                }
                rb[i] = v;
            }
        };
        auto store = [&](int buf) {
#pragma unroll
            for (int i = 0; i < A_PER; ++i) {
                const int mm = a_m + i * A_ROWS;
                if (mm < BM) As[buf][a_k * LDA + mm] = ra[i];
            }
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int e = tid + i * NT;
                const int kk = e / BN, nn = e - kk * BN;
                if (e < BK * BN) Bs[buf][kk * LDB + nn] = rb[i];
            }
        };

        if (nk > 0) {
            load(0);
            store(0);
        }
        __syncthreads();
        for (int s = 0; s < nk; ++s) {
            const int buf = s & 1;
            if (s + 1 < nk) load((s + 1) * BK);
            tc_warp_step<MT, NTL, LDA, LDB>(acc, As[buf], Bs[buf], wm0, wn0, g, t);
            if (s + 1 < nk) store(buf ^ 1);
            __syncthreads();
        }

#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int m = m0 + wm0 + mt * 16 + g + 8 * h;
                if (m >= M) continue;
#pragma unroll
                for (int nt = 0; nt < NTL; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int n = n0 + wn0 + nt * 8 + 2 * t + j;
                        if (n >= N) continue;
                        const i64 o = (i64)m * ldo + o_add + n;
                        float v = acc[mt][nt][2 * h + j];
                        if (epi == EPI_TANH) {
                            v = tanhf(v);
                        } else if (epi == EPI_DERIV) {
                            const float p = prior[o];
                            v *= 1.f - p * p;
                        }
                        out[o] = v;
                    }
            }
    }
}

#define GEMM_NN_TC(NAME, BM, BN, WM, WN)                                                          \
    extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)                      \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                     \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,       \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)       \
    {                                                                                              \
        gemm_nn_tc_body<BM, BN, WM, WN>(src, lda, tab, desc, B, b_ld, M, N, out, ldo, prior, epi, \
                                        G);                                                        \
    }

GEMM_NN_TC(gemm_nn_tc128x64, 128, 64, 64, 32)
GEMM_NN_TC(gemm_nn_tc64x64, 64, 64, 32, 32)
GEMM_NN_TC(gemm_nn_tc128x56, 128, 56, 32, 56)
GEMM_NN_TC(gemm_nn_tc128x32, 128, 32, 32, 32)
GEMM_NN_TC(gemm_nn_tc256x32, 256, 32, 64, 16)
GEMM_NN_TC(gemm_nn_tc128x24, 128, 24, 32, 24)
GEMM_NN_TC(gemm_nn_tc128x16, 128, 16, 32, 16)

// ------------------------------------------------------------------------------------ gemm_tn_tc
// BM weight rows x BN columns per block, the reduction over (group, case) in TC_BK steps; see
// gemm.cu's gemm_tn for the arguments and the partial-sum layout.
template <int BM, int BN, int WM, int WN>
__device__ __forceinline__ void gemm_tn_tc_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,
    int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,
    int local_cols, float* __restrict__ part, int nz)
{
    constexpr int BK = TC_BK;
    constexpr int WARPS_N = BN / WN;
    constexpr int NT = (BM / WM) * WARPS_N * 32;
    constexpr int MT = WM / 16, NTL = WN / 8;
    constexpr int LDA = tc_pad(BM), LDB = tc_pad(BN);
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = (BK * BN + NT - 1) / NT;
    static_assert(NT % BM == 0 && A_PER * NT == BM * BK, "loader shape");
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0, "tile shape");
    __shared__ __align__(16) float As[2][BK * LDA];
    __shared__ __align__(16) float Ds[2][BK * LDB];

    const int tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
    const int k0 = blockIdx.y * BM;
    const int NL = n_hi - n_lo;
    const int c0 = blockIdx.x * BN;
    const int a_k = tid % BM;
    const int a_r = tid / BM;
    const int pld = local_cols ? groups * NL : NL;

    for (int z = blockIdx.z; z < nz; z += gridDim.z) {
        const int ch = z / slots;
        const int slot = z - ch * slots;
        const int case_lo = ch * chunk;
        const int case_hi = min(n_cases, case_lo + chunk);
        const int g_lo = slot * gps;
        const int g_hi = min(groups, g_lo + gps);
        const int tiles = (case_hi - case_lo + BK - 1) / BK;
        const int steps = (g_hi - g_lo) * tiles;

        float acc[MT][NTL][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NTL; ++j)
#pragma unroll
                for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

        float ra[A_PER], rd[B_PER];
        auto load = [&](int s) {
            const int g = g_lo + s / tiles;
            const int cb = case_lo + (s % tiles) * BK;
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
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int e = tid + i * NT;
                const int rr = e / BN, nn = e - rr * BN;
                const int m = cb + rr;
                const int n = n_lo + c0 + nn;
                float v = 0.f;
                if (e < BK * BN && m < case_hi && n < n_hi)
                    v = delta[(i64)m * ldd + (i64)g * depth + n];
                rd[i] = v;
            }
        };
        auto store = [&](int buf) {
#pragma unroll
            for (int i = 0; i < A_PER; ++i) As[buf][(a_r + i * (NT / BM)) * LDA + a_k] = ra[i];
#pragma unroll
            for (int i = 0; i < B_PER; ++i) {
                const int e = tid + i * NT;
                const int rr = e / BN, nn = e - rr * BN;
                if (e < BK * BN) Ds[buf][rr * LDB + nn] = rd[i];
            }
        };

        if (steps > 0) {
            load(0);
            store(0);
        }
        __syncthreads();
        for (int s = 0; s < steps; ++s) {
            const int buf = s & 1;
            if (s + 1 < steps) load(s + 1);
            tc_warp_step<MT, NTL, LDA, LDB>(acc, As[buf], Ds[buf], wm0, wn0, g, t);
            if (s + 1 < steps) store(buf ^ 1);
            __syncthreads();
        }

        const i64 p = local_cols ? ch : z;
        const int col_base = local_cols ? slot * NL : 0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int k = k0 + wm0 + mt * 16 + g + 8 * h;
                if (k >= R) continue;
#pragma unroll
                for (int nt = 0; nt < NTL; ++nt)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const int c = c0 + wn0 + nt * 8 + 2 * t + j;
                        if (c >= NL) continue;
                        part[(p * R + k) * pld + col_base + c] = acc[mt][nt][2 * h + j];
                    }
            }
    }
}

#define GEMM_TN_TC(NAME, BM, BN, WM, WN)                                                          \
    extern "C" __global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)                      \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                     \
         const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,       \
         int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,       \
         int local_cols, float* __restrict__ part, int nz)                                        \
    {                                                                                              \
        gemm_tn_tc_body<BM, BN, WM, WN>(src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi,     \
                                        n_cases, chunk, groups, gps, slots, local_cols, part, nz); \
    }

GEMM_TN_TC(gemm_tn_tc128x64, 128, 64, 64, 32)
GEMM_TN_TC(gemm_tn_tc128x56, 128, 56, 32, 56)
GEMM_TN_TC(gemm_tn_tc64x64, 64, 64, 32, 32)
GEMM_TN_TC(gemm_tn_tc128x32, 128, 32, 32, 32)
GEMM_TN_TC(gemm_tn_tc64x32, 64, 32, 32, 32)
GEMM_TN_TC(gemm_tn_tc64x16, 64, 16, 32, 16)
GEMM_TN_TC(gemm_tn_tc32x32, 32, 32, 16, 32)
GEMM_TN_TC(gemm_tn_tc32x24, 32, 24, 16, 24)
