// The products on the tensor cores (mma.sync m16n8k8): the bodies and the macros that
// instantiate them; gemm_split.cu instantiates split TF32 (PASSES 3, float32 accuracy) and
// gemm_tf32.cu one TF32 product (PASSES 1, CUDA PRECISION = TF32), each file built only for
// the nets whose kernel plan takes it.

#include "common.cuh"
#include "cp_async.cuh"

// ------------------------------------------------------------ gemm_tn on tensor cores (split TF32)
// gemm_tn's partial sums with the multiply-adds on the tensor cores (mma.sync m16n8k8, TF32
// inputs, float32 sums), at float32 accuracy: each operand x is split into hi = x rounded to TF32
// (11 significant bits) and lo = x - hi, and a product is taken as lo_a hi_d + hi_a lo_d +
// hi_a hi_d; lo_a lo_d, dropped, is about 2^-22 of it. The tensor cores' own sums
// truncate rather than round, so they never run long: each stage's 16 cases (of one group) are
// summed from zero on the tensor cores, and that stage sum is added to the thread's accumulator
// with an ordinary float32 add. Every output thus takes the same sums in the same order whatever
// the tile shape: every variant of this family gives the same bits (not those of the float32
// family, which adds one case at a time).
//
// Tile: BM weight rows x BN columns, warps of WM x WN outputs; shared-memory rows padded by 8
// floats so that a warp's fragment loads (8 rows x 4 k) fall in 32 different banks.
#define TN_SPLIT_BK 16

__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo)
{
    // hi: x rounded to 11 significant bits (half-way cases away from zero, as cvt.rna.tf32, but
    // in two integer operations: the operands are finite); lo = x - hi exactly, whose own low 13
    // bits the tensor cores ignore (so lo_a hi_d is off by at most 2^-21 of a hi_d)
    hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    lo = __float_as_uint(x - __uint_as_float(hi));
}

// PASSES 3: split TF32 (hi and lo, three products: float32 accuracy); PASSES 1: one TF32
// product of the rounded operands (CUDA PRECISION = TF32; lo is not formed)
template <int PASSES>
__device__ __forceinline__ void tf32_operand(float x, unsigned& hi, unsigned& lo)
{
    static_assert(PASSES == 1 || PASSES == 3, "one TF32 product or split TF32");
    if (PASSES == 3)
        split_tf32(x, hi, lo);
    else
        hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

// Row length of a [k][column] stage of BN columns: padded by 8 floats, or 16 where 8 would leave
// the rows a multiple of 16 floats apart, so that a warp's fragment loads (4 rows x 8 columns)
// fall in 32 different banks (BN 24: 40, not 32).
__host__ __device__ constexpr int stage_row(int bn) { return (bn + 8) % 16 == 0 ? bn + 16 : bn + 8; }

__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// sum[i][j] += a[i] b[j] for every m16n8 fragment of a warp's tile
template <int MT, int NT8>
__device__ __forceinline__ void mma_fragments(float (&sum)[MT][NT8][4], const unsigned (&a)[MT][4],
                                              const unsigned (&b)[NT8][2])
{
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j) mma_tf32(sum[i][j], a[i], b[j]);
}

// A block of BM x BN outputs in warps of WM x WN, each warp MT x NT8 m16n8 fragments: the shape
// every tensor-core body takes, and where this thread's warp starts in the block (the warps go
// down the block's rows first).
template <int BM, int BN, int WM, int WN>
struct WarpTiling {
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 8 == 0, "warp tiles");
    static constexpr int WARPS_M = BM / WM;
    static constexpr int NT = 32 * WARPS_M * (BN / WN);      // threads
    static constexpr int MT = WM / 16, NT8 = WN / 8;

    int lane, m0, n0;
    __device__ __forceinline__ explicit WarpTiling(int tid)
        : lane(tid & 31), m0(((tid >> 5) % WARPS_M) * WM), n0(((tid >> 5) / WARPS_M) * WN)
    {
    }
};

// The elements of a warp's m16n8 accumulator fragments: f(i, j, e, row, col) for each, row and
// column counted from the warp's first output (g = lane / 4 gives rows g and g + 8, t = lane % 4
// columns 2t and 2t + 1 of each 16 x 8 fragment).
template <int MT, int NT8, typename F>
__device__ __forceinline__ void for_each_fragment_element(int lane, F&& f)
{
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                f(i, j, e, i * 16 + g + (e >> 1) * 8, j * 8 + 2 * t + (e & 1));
}

template <int MT, int NT8>
__device__ __forceinline__ void zero_fragments(float (&acc)[MT][NT8][4])
{
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// The products of 8 k of a stage in the order that fixes the family's bits: lo_a hi_b, hi_a
// lo_b, then hi_a hi_b (PASSES 1: hi_a hi_b alone), each one pass over every fragment before
// the next, so that a fragment's dependent products lie MT x NT8 products apart.
template <int PASSES, int MT, int NT8>
__device__ __forceinline__ void split_products(float (&sum)[MT][NT8][4],
                                               const unsigned (&ah)[MT][4],
                                               const unsigned (&al)[MT][4],
                                               const unsigned (&bh)[NT8][2],
                                               const unsigned (&bl)[NT8][2])
{
    if (PASSES == 3) {
        mma_fragments(sum, al, bh);
        mma_fragments(sum, ah, bl);
    }
    mma_fragments(sum, ah, bh);
}

// acc += a stage's sum, in float32, element by element
template <int MT, int NT8>
__device__ __forceinline__ void add_fragments(float (&acc)[MT][NT8][4],
                                              const float (&sum)[MT][NT8][4])
{
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] += sum[i][j][e];
}

// gemm_nn's outputs from the fragments of a warp whose first output is (m_first, n_first).
template <int MT, int NT8>
__device__ __forceinline__ void store_nn_fragments(const float (&acc)[MT][NT8][4], int lane,
                                                   int m_first, int n_first, int M, int N,
                                                   float* __restrict__ out, int ldo, int o_add,
                                                   const float* __restrict__ prior, int epi)
{
    for_each_fragment_element<MT, NT8>(lane, [&](int i, int j, int e, int r, int c) {
        const int m = m_first + r, n = n_first + c;
        if (m < M && n < N) {
            const i64 o = (i64)m * ldo + o_add + n;
            out[o] = nn_epilogue(acc[i][j][e], epi, prior, o);
        }
    });
}

// The raw bits of a warp's m16n8k8 A fragment at rows row0.. and k k0.. of a stage stored
// [row][k] (rows A_M floats apart, A_M a multiple of 4) by one ldmatrix.x4 of four 8 x 4 blocks
// (rows 0-7, 8-15 at k 0-3, then at k 4-7): lane l names row l % 8 (+ 8 for lanes 8-15, 24-31)
// of block l / 8 and gets A(g, t), A(g + 8, t), A(g, t + 4), A(g + 8, t + 4), as 4-byte loads.
template <int A_M>
__device__ __forceinline__ void ldmatrix_a(unsigned (&a)[4], const float* As, int row0, int k0,
                                           int lane)
{
    static_assert(A_M % 4 == 0, "16-byte rows");
    const float* p = As + (row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * A_M + k0 + (lane >> 4) * 4;
    const unsigned address = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(address));
}

// One stage of TN_SPLIT_BK cases: A's element (row m, k) at As[m * A_M + k * A_K], Ds[k][LDD];
// the warp's outputs start at row m0 and column n0. acc[mt][nt][i] is the fragment layout of
// m16n8: rows g and g + 8, columns 2t and 2t + 1 (g = lane / 4, t = lane % 4).
template <int WM, int WN, int A_M, int A_K, int LDD, int PASSES, bool A_LDSM = false>
__device__ __forceinline__ void split_tf32_stage(float (&acc)[WM / 16][WN / 8][4],
                                                 const float* As, const float* Ds, int m0, int n0,
                                                 int lane)
{
    constexpr int MT = WM / 16, NT8 = WN / 8;
    const int g = lane >> 2, t = lane & 3;
    float sum[MT][NT8][4];
    zero_fragments(sum);
#pragma unroll
    for (int kk = 0; kk < TN_SPLIT_BK; kk += 8) {
        unsigned ah[MT][4], al[MT][4], dh[NT8][2], dl[NT8][2];
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            if constexpr (A_LDSM) {
                unsigned raw[4];
                ldmatrix_a<A_M>(raw, As, m0 + i * 16, kk, lane);
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    tf32_operand<PASSES>(__uint_as_float(raw[e]), ah[i][e], al[i][e]);
                continue;
            }
            const float* p = As + (kk + t) * A_K + (m0 + i * 16 + g) * A_M;
            tf32_operand<PASSES>(p[0], ah[i][0], al[i][0]);
            tf32_operand<PASSES>(p[8 * A_M], ah[i][1], al[i][1]);
            tf32_operand<PASSES>(p[4 * A_K], ah[i][2], al[i][2]);
            tf32_operand<PASSES>(p[4 * A_K + 8 * A_M], ah[i][3], al[i][3]);
        }
#pragma unroll
        for (int j = 0; j < NT8; ++j) {
            const float* q = Ds + (kk + t) * LDD + n0 + j * 8 + g;
            tf32_operand<PASSES>(q[0], dh[j][0], dl[j][0]);
            tf32_operand<PASSES>(q[4 * LDD], dh[j][1], dl[j][1]);
        }
        split_products<PASSES>(sum, ah, al, dh, dl);
    }
    add_fragments(acc, sum);
}

// A copy stage's SUBS stages of 16 k (or cases), none past the `left` it holds: the same sums.
template <int WM, int WN, int A_M, int A_K, int LDD, int PASSES, int SUBS, bool A_LDSM = false>
__device__ __forceinline__ void split_tf32_stages(float (&acc)[WM / 16][WN / 8][4],
                                                  const float* As, const float* Ds, int left,
                                                  int m0, int n0, int lane)
{
#pragma unroll
    for (int sub = 0; sub < SUBS; ++sub)
        if (sub == 0 || sub * TN_SPLIT_BK < left)
            split_tf32_stage<WM, WN, A_M, A_K, LDD, PASSES, A_LDSM>(
                acc, As + sub * TN_SPLIT_BK * A_K, Ds + sub * TN_SPLIT_BK * LDD, m0, n0, lane);
}

// Blocks a multiprocessor must hold (__launch_bounds__): where a warp's tile is at most 32 x 32
// outputs, as many as 128 registers a thread would allow, rounded up (left alone, ptxas took
// 135-168 for some: the dense 128 x 64 products held one block of 8 warps a multiprocessor;
// capped, none spills); for warps of 32 x 64, which keep twice the sums, those 168 allow.
__host__ __device__ constexpr int split_min_blocks(int threads, int wm, int wn)
{
    return wm * wn > 32 * 32 ? 65536 / (168 * threads)
                             : (65536 + 128 * threads - 1) / (128 * threads);
}

template <int BM, int BN, int WM, int WN, int STAGES, int PASSES, int SUBS>
__device__ __forceinline__ void gemm_tn_split_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,
    int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,
    int local_cols, float* __restrict__ part, int nz)
{
    constexpr int BK = TN_SPLIT_BK * SUBS;
    using Tiling = WarpTiling<BM, BN, WM, WN>;
    constexpr int NT = Tiling::NT, MT = Tiling::MT, NT8 = Tiling::NT8;
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    constexpr int A_STEP = NT / BM;
    constexpr int D_STEP = NT / BN;
    constexpr int LDA = BM + 8, LDD = stage_row(BN);
    // columns that do not divide the threads (BN 24, 48), or a stage of deltas that the threads
    // do not divide: the deltas' loader goes element by element over the stage instead of a
    // fixed column per thread
    constexpr bool D_FIXED = NT % BN == 0 && BK * BN % NT == 0;
    static_assert(NT % BM == 0, "loader shape");
    static_assert(A_PER >= 1 && BK * BN >= NT, "loader shape");
    __shared__ __align__(16) float As[STAGES][BK][LDA];
    __shared__ __align__(16) float Ds[STAGES][BK][LDD];

    const int tid = threadIdx.x;
    const Tiling warp(tid);
    const int lane = warp.lane, wm0 = warp.m0, wn0 = warp.n0;
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
    const i64 a_stride = (i64)A_STEP * lda;
    const i64 d_stride = (i64)D_STEP * ldd;

    for (int z = blockIdx.z; z < nz; z += gridDim.z) {
        const PartialShare sh(z, slots, chunk, n_cases, gps, groups);
        const int case_lo = sh.case_lo, case_hi = sh.case_hi, g_lo = sh.g_lo;
        const int tiles = sh.tiles(BK);
        const int steps = (sh.g_hi - g_lo) * tiles;

        float acc[MT][NT8][4];
        zero_fragments(acc);

        // Row k's offset in a group's table, read one group ahead (steps go through a group's
        // tiles, then the next group's) so that no copy waits for the table.
        auto row_offset = [&](int g) {
            return k < R && g < sh.g_hi ? tab[desc[g * 5] + k] : A_ZERO;
        };
        int group = g_lo - 1, ao = A_ZERO, ao_next = row_offset(g_lo);
        StageWalk walk(g_lo, tiles);            // cp_async_stages issues the steps in order
        // A stage wholly inside the chunk (all but its last) needs no per-case checks; the
        // addresses advance by a fixed stride from one copy to the next.
        auto issue = [&](int s) {
            const int st = s % STAGES;
            int g, tile;
            walk.next(g, tile);
            const int cb = case_lo + tile * BK;
            if (g != group) {
                group = g;
                ao = ao_next;
                ao_next = row_offset(g + 1);
            }
            const bool full = cb + BK <= case_hi;
            const float* pa = ao >= 0 ? src + (i64)(cb + a_r) * lda + ao : &k_one;
            const i64 a_step = ao >= 0 ? a_stride : 0;
            // (two loops, so that a full stage's copies carry no per-case test)
            if (full) {
#pragma unroll
                for (int i = 0; i < A_PER; ++i, pa += a_step)
                    cp_async4(&As[st][a_r + i * A_STEP][a_k], pa, ao != A_ZERO);
            } else {
#pragma unroll
                for (int i = 0; i < A_PER; ++i, pa += a_step)
                    cp_async4(&As[st][a_r + i * A_STEP][a_k], pa,
                              ao != A_ZERO && cb + a_r + i * A_STEP < case_hi);
            }
            if constexpr (!D_FIXED) {
#pragma unroll
                for (int e0 = 0; e0 < BK * BN; e0 += NT) {
                    const int e = e0 + tid, r = e / BN, col = e % BN;
                    const int ne = n_lo + c0 + col;
                    if (BK * BN % NT == 0 || e < BK * BN)
                        cp_async4(&Ds[st][r][col],
                                  delta + (i64)(cb + r) * ldd + (i64)g * depth + ne,
                                  ne < n_hi && cb + r < case_hi);
                }
                return;
            }
            const float* pd = delta + (i64)(cb + d_r) * ldd + (i64)g * depth + n;
            if (full) {
#pragma unroll
                for (int i = 0; i < B_PER; ++i, pd += d_stride)
                    cp_async4(&Ds[st][d_r + i * D_STEP][d_n], pd, n < n_hi);
            } else {
#pragma unroll
                for (int i = 0; i < B_PER; ++i, pd += d_stride)
                    cp_async4(&Ds[st][d_r + i * D_STEP][d_n], pd,
                              n < n_hi && cb + d_r + i * D_STEP < case_hi);
            }
        };

        int tile_next = 0;                          // of the copy stage multiplied next
        cp_async_stages<STAGES>(steps, issue, [&](int st) {
            split_tf32_stages<WM, WN, 1, LDA, LDD, PASSES, SUBS>(
                acc, &As[st][0][0], &Ds[st][0][0], case_hi - case_lo - tile_next * BK, wm0, wn0,
                lane);
            if (++tile_next == tiles) tile_next = 0;
        });

        const i64 p = local_cols ? sh.ch : z;
        const int col_base = local_cols ? sh.slot * NL : 0;
        for_each_fragment_element<MT, NT8>(lane, [&](int i, int j, int e, int r, int c) {
            const int row = k0 + wm0 + r, col = c0 + wn0 + c;
            if (row < R && col < NL) part[(p * R + row) * pld + col_base + col] = acc[i][j][e];
        });
    }
}

#define GEMM_TN_SPLIT_SUBS(NAME, BM, BN, WM, WN, STAGES, PASSES, SUBS)                         \
    extern "C" __global__ void __launch_bounds__(                                                \
        32 * (BM / WM) * (BN / WN), split_min_blocks(32 * (BM / WM) * (BN / WN), WM, WN))        \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ delta, int ldd, int depth,      \
         int R, int n_lo, int n_hi, int n_cases, int chunk, int groups, int gps, int slots,      \
         int local_cols, float* __restrict__ part, int nz)                                       \
    {                                                                                             \
        gemm_tn_split_body<BM, BN, WM, WN, STAGES, PASSES, SUBS>(                                 \
            src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi, n_cases, chunk, groups, gps,   \
            slots, local_cols, part, nz);                                                         \
    }
#define GEMM_TN_SPLIT(NAME, BM, BN, WM, WN, STAGES, PASSES) /* copy stages of 16 cases */      \
    GEMM_TN_SPLIT_SUBS(NAME, BM, BN, WM, WN, STAGES, PASSES, 1)

// ------------------------------------------------------------ gemm_nn on tensor cores (split TF32)
// gemm_nn's gather product with gemm_tn_split's arithmetic: the same operands and tables as
// gemm_nn_async_body, A staged as [k][case] and B as [k][column] (rows padded by 8 floats), each
// stage of 16 k summed from zero on the tensor cores and then added in float32, the epilogue
// element by element. The same bits for every variant of this family.
template <int BM, int BN, int WM, int WN, int STAGES, int PASSES>
__device__ __forceinline__ void gemm_nn_split_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int BK = TN_SPLIT_BK;
    using Tiling = WarpTiling<BM, BN, WM, WN>;
    constexpr int NT = Tiling::NT, MT = Tiling::MT, NT8 = Tiling::NT8;
    constexpr int A_PER = BM * BK / NT;
    constexpr int B_PER = BK * BN / NT;
    constexpr int A_STEP = NT / BK;          // cases between one thread's A elements
    constexpr int B_STEP = NT / BN;          // k between one thread's B elements
    constexpr int LDA = BM + 8, LDB = BN + 8;
    static_assert(NT % BK == 0 && NT % BN == 0, "loader shape");
    static_assert(A_PER >= 1 && B_PER >= 1, "loader shape");
    __shared__ __align__(16) float As[STAGES][BK][LDA];
    __shared__ __align__(16) float Bs[STAGES][BK][LDB];

    const int tid = threadIdx.x;
    const Tiling warp(tid);
    const int lane = warp.lane, wm0 = warp.m0, wn0 = warp.n0;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;
    const int a_k = tid % BK;
    const int a_m = tid / BK;
    const int b_n = tid % BN;
    const int b_k = tid / BN;
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

        float acc[MT][NT8][4];
        zero_fragments(acc);

        // the table's entry is read one step ahead, so that no copy waits for it
        auto entry = [&](int t) {
            const int k = t * BK + a_k;
            return k < d.K ? tab[d.a_start + k] : A_ZERO;
        };
        int ao_next = entry(0);
        auto issue = [&](int t) {
            const int st = t % STAGES;
            const int ao = ao_next;
            ao_next = entry(t + 1);
            const float* pa = ao >= 0 ? a_row + ao : &k_one;
            const i64 a_step = ao >= 0 ? a_stride : 0;
#pragma unroll
            for (int i = 0; i < A_PER; ++i, pa += a_step)
                cp_async4(&As[st][a_k][a_m + i * A_STEP], pa,
                          ((a_valid >> i) & 1u) && ao != A_ZERO);
            cp_async_gather_b<BK, B_PER, B_STEP, LDB>(Bs[st], B, b_ld, tab, d, t, b_k, b_n, n, N);
        };

        cp_async_stages<STAGES>(nk, issue, [&](int st) {
            split_tf32_stage<WM, WN, 1, LDA, LDB, PASSES>(acc, &As[st][0][0], &Bs[st][0][0], wm0,
                                                          wn0, lane);
        });

        store_nn_fragments(acc, lane, m0 + wm0, n0 + wn0, M, N, out, ldo, d.o_add, prior, epi);
    }
}

// BODY: gemm_nn_split_body, gemm_nn_dense_split_body (dense rows only), or tensor_runs.cuh's
// gemm_nn_quad_split_body, whose further template arguments follow PASSES (instantiated by
// GEMM_NN_RUNS only)
#define GEMM_NN_SPLIT(NAME, BODY, BM, BN, WM, WN, STAGES, PASSES, ...)                           \
    extern "C" __global__ void __launch_bounds__(                                                \
        32 * (BM / WM) * (BN / WN), split_min_blocks(32 * (BM / WM) * (BN / WN), WM, WN))        \
    NAME(const float* __restrict__ src, int lda, const int* __restrict__ tab,                    \
         const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,      \
         float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)      \
    {                                                                                             \
        BODY<BM, BN, WM, WN, STAGES, PASSES, ##__VA_ARGS__>(src, lda, tab, desc, B, b_ld, M, N,  \
                                                            out, ldo, prior, epi, G);             \
    }

// gemm_nn_split over dense rows (plan.DenseRows, as gemm_nn_dense_body): A staged as the cases'
// rows ([case][k], 16-byte copies, rows 20 floats apart so that a warp's fragment loads fall in 32
// banks), B as [k][column]; the bias (A = 1, B's bias row) is the k after the dense part, as in
// the gather tables, so every stage holds the same operands as gemm_nn_split's and the bits are
// the same.
template <int BM, int BN, int WM, int WN, int STAGES, int PASSES>
__device__ __forceinline__ void gemm_nn_dense_split_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int BK = TN_SPLIT_BK;
    using Tiling = WarpTiling<BM, BN, WM, WN>;
    constexpr int NT = Tiling::NT, MT = Tiling::MT, NT8 = Tiling::NT8;
    constexpr int AS = BK + 4, LDB = BN + 8;
    constexpr int A_CHUNKS = BM * BK / 4;
    constexpr int B_CHUNKS = BK * BN / 4;
    __shared__ __align__(16) float As[STAGES][BM][AS];
    __shared__ __align__(16) float Bs[STAGES][BK][LDB];

    const int tid = threadIdx.x;
    const Tiling warp(tid);
    const int lane = warp.lane, wm0 = warp.m0, wn0 = warp.n0;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        const GroupDesc d(desc, g);
        const int bias = d.K > 0 && tab[d.a_start + d.K - 1] == A_ONE;
        const int Kd = d.K - bias;
        const float* a_rows = src + (Kd > 0 ? tab[d.a_start] : 0);
        const float* b_rows = B + (b_ld > 0 ? 0 : (d.K > 0 ? tab[d.b_start] : 0)) + d.b_add;
        const i64 b_step = b_ld > 0 ? b_ld : (d.K > 1 ? tab[d.b_start + 1] - tab[d.b_start] : 0);
        const int nk = (d.K + BK - 1) / BK;

        float acc[MT][NT8][4];
        zero_fragments(acc);

        // rows past M read the last case (never stored); past the dense part, a 4-float chunk
        // is copied a float at a time: the dense floats, then the bias input (1), then zeros
        auto issue = [&](int t) {
            const int st = t % STAGES;
            const int k0 = t * BK;
#pragma unroll
            for (int c0 = 0; c0 < A_CHUNKS; c0 += NT) {
                const int c = c0 + tid;
                if (A_CHUNKS % NT == 0 || c < A_CHUNKS) {
                    const int r = c / (BK / 4), q = c % (BK / 4);
                    const int k = k0 + 4 * q;
                    const float* p = a_rows + (i64)min(m0 + r, M - 1) * lda + k;
                    if (k + 4 <= Kd) {
                        cp_async16(&As[st][r][4 * q], p, 16);
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const int ke = k + e;
                            cp_async4(&As[st][r][4 * q + e], ke < Kd ? p + e : &k_one,
                                      ke < Kd || (bias && ke == Kd));
                        }
                    }
                }
            }
#pragma unroll
            for (int c0 = 0; c0 < B_CHUNKS; c0 += NT) {
                const int c = c0 + tid;
                if (B_CHUNKS % NT == 0 || c < B_CHUNKS) {
                    const int r = c / (BN / 4), q = c % (BN / 4);
                    const int k = k0 + r, n = n0 + 4 * q;
                    const int bytes = k < d.K ? max(0, min(16, 4 * (N - n))) : 0;
                    cp_async16(&Bs[st][r][4 * q], bytes ? b_rows + k * b_step + n : B, bytes);
                }
            }
        };

        cp_async_stages<STAGES>(nk, issue, [&](int st) {
            // (A's fragments by 4-byte loads: with ldmatrix the dense bodies spilled 8-24 bytes
            // at 128 registers and were slower)
            split_tf32_stage<WM, WN, AS, 1, LDB, PASSES>(acc, &As[st][0][0], &Bs[st][0][0], wm0,
                                                         wn0, lane);
        });

        store_nn_fragments(acc, lane, m0 + wm0, n0 + wn0, M, N, out, ldo, d.o_add, prior, epi);
    }
}

#include "tensor_runs.cuh"
