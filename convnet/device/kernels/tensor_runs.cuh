// The gather products on the tensor cores that copy the runs their tables give (included by
// tensor_cores.cuh, whose GEMM_NN_SPLIT instantiates them): runs of four floats 16 bytes at a
// time (the quad variants, tcq), and runs of two 8 bytes at a time where runs of four fail (the
// pair variants, tcp: gathered depths of 2 mod 4).

// gemm_nn_split over the gather tables in runs of four (cp_async.cuh): A staged as the cases'
// rows ([case][k], rows BK + 4 floats apart as in gemm_nn_dense_split_body), each four k of a
// case copied 16 bytes at a time where the table names four consecutive floats on a 16-byte
// boundary, else float by float, and A's fragments read by ldmatrix; B's rows four columns a
// copy; SUBS stages of 16 k a copy stage (split_tf32_stages); PAIRS: runs of two that are not
// runs of four copied 8 bytes at a time (cp_async_four). Any table: runs found as read.
template <int BM, int BN, int WM, int WN, int STAGES, int PASSES, int SUBS = 1,
          bool PAIRS = false>
__device__ __forceinline__ void gemm_nn_quad_split_body(
    const float* __restrict__ src, int lda, const int* __restrict__ tab,
    const int* __restrict__ desc, const float* __restrict__ B, int b_ld, int M, int N,
    float* __restrict__ out, int ldo, const float* __restrict__ prior, int epi, int G)
{
    constexpr int BK = TN_SPLIT_BK * SUBS;
    using Tiling = WarpTiling<BM, BN, WM, WN>;
    constexpr int NT = Tiling::NT, MT = Tiling::MT, NT8 = Tiling::NT8;
    constexpr int AS = BK + 4, LDB = stage_row(BN);
    constexpr int QUADS = BK / 4;                 // runs of four in a case's stage row
    static_assert(NT % QUADS == 0 && BM * QUADS % NT == 0, "loader shape");
    __shared__ __align__(16) float As[STAGES][BM][AS];
    __shared__ __align__(16) float Bs[STAGES][BK][LDB];

    const int tid = threadIdx.x;
    const Tiling warp(tid);
    const int lane = warp.lane, wm0 = warp.m0, wn0 = warp.n0;
    const int m0 = blockIdx.y * BM;
    const int n0 = blockIdx.z * BN;
    const int a_q = tid % QUADS;                  // this thread's run: k = 4 a_q ... of a stage
    const int a_r = tid / QUADS;                  // its first case; then every NT / QUADS
    const bool a_vec = ((size_t)src & 15) == 0 && (lda & 3) == 0;

    for (int g = blockIdx.x; g < G; g += gridDim.x) {
        const GroupDesc d(desc, g);
        const int nk = (d.K + BK - 1) / BK;

        float acc[MT][NT8][4];
        zero_fragments(acc);

        // rows past M read the last case (never stored)
        auto issue = [&](int t) {
            const int st = t % STAGES;
            int o[4];
            table_four(o, tab, d.a_start, t * BK + 4 * a_q, d.K);
#pragma unroll
            for (int i = 0; i < BM * QUADS / NT; ++i) {
                const int r = a_r + i * (NT / QUADS);
                cp_async_four<PAIRS>(&As[st][r][4 * a_q], src + (i64)min(m0 + r, M - 1) * lda, o,
                                    a_vec);
            }
            cp_async_rows_b<BK, BN, NT, LDB>(Bs[st], B, b_ld, tab, d, t, n0, N, tid);
        };

        int k_first = 0;                            // of the copy stage multiplied next
        cp_async_stages<STAGES>(nk, issue, [&](int st) {
            split_tf32_stages<WM, WN, AS, 1, LDB, PASSES, SUBS, true>(
                acc, &As[st][0][0], &Bs[st][0][0], d.K - k_first, wm0, wn0, lane);
            k_first += BK;
        });

        store_nn_fragments(acc, lane, m0 + wm0, n0 + wn0, M, N, out, ldo, d.o_add, prior, epi);
    }
}

// SUBS stages of 16 k a copy stage; PAIRS: runs of two as well
#define GEMM_NN_RUNS(NAME, BM, BN, WM, WN, STAGES, PASSES, SUBS, PAIRS)                          \
    GEMM_NN_SPLIT(NAME, gemm_nn_quad_split_body, BM, BN, WM, WN, STAGES, PASSES, SUBS, PAIRS)
