// Shared definitions for the device kernels (included once by every .cu file in this folder; the
// runtime pastes it in place of the #include line).

// Gather-table codes (see plan.py): an entry >= 0 is an offset into the source row,
// A_ZERO reads the zero padding around the prior layer, A_ONE the constant input of the bias.
#define A_ZERO (-1)
#define A_ONE (-2)

// Epilogues of gemm_nn.
#define EPI_NONE 0    // output logits
#define EPI_TANH 1    // hidden activation, tanh
#define EPI_DERIV 2   // backpropagated delta times the prior layer's tanh derivative 1 - a^2

typedef long long i64;

// tanhf (as these kernels are built: -O3, no fast math) rises with its argument everywhere except
// in a few floats around 0.6, where it changes formula: tanhf(0x3f199999) > tanhf(0x3f19999a),
// and the mirror image below zero. Outside TANH_DIP_LO..TANH_DIP_HI (magnitudes, as bits) it never
// falls, and every tanhf inside lies between those of the two ends, so the largest of a set of
// net inputs has the largest tanhf unless it is near_tanh_dip (tests/test_device_backend.py checks
// this over every float).
#define TANH_DIP_LO 0x3f199989u
#define TANH_DIP_HI 0x3f1999aau

__device__ __forceinline__ bool near_tanh_dip(float z)
{
    const unsigned u = __float_as_uint(z) & 0x7fffffffu;
    return u >= TANH_DIP_LO && u <= TANH_DIP_HI;
}

// T consecutive floats from shared memory into registers, 16 bytes at a time where T allows
// (the caller keeps the address aligned to the access width).
template <int T>
__device__ __forceinline__ void load_frag(float* r, const float* p)
{
    if (T % 4 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            r[i] = v.x; r[i + 1] = v.y; r[i + 2] = v.z; r[i + 3] = v.w;
        }
    } else if (T % 2 == 0) {
#pragma unroll
        for (int i = 0; i < T; i += 2) {
            const float2 v = *reinterpret_cast<const float2*>(p + i);
            r[i] = v.x; r[i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < T; ++i) r[i] = p[i];
    }
}

// One shared-memory stage of a product: BK rank-one updates of the TM x TN accumulator, in k order
// (every product variant calls this, so all of them add in the same order and give the same bits).
// a_stage and b_stage are the stage's [BK][LDA] and [BK][LDB] tiles.
template <int BK, int TM, int TN, int LDA, int LDB>
__device__ __forceinline__ void tile_multiply_add(float (&acc)[TM][TN], const float* a_stage,
                                                  const float* b_stage, int a_col, int b_col)
{
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
        float a[TM], b[TN];
        load_frag<TM>(a, a_stage + kk * LDA + a_col);
        load_frag<TN>(b, b_stage + kk * LDB + b_col);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// The NN products' epilogue of the output at out[o]: v, tanh(v), or v times the prior layer's
// tanh derivative 1 - p^2.
__device__ __forceinline__ float nn_epilogue(float v, int epi, const float* __restrict__ prior, i64 o)
{
    if (epi == EPI_TANH) return tanhf(v);
    if (epi == EPI_DERIV) {
        const float p = prior[o];
        return v * (1.f - p * p);
    }
    return v;
}

// A product group's descriptor (plan.py: five ints a group): where its A and B tables start,
// their length K, and the offsets added to B's and the output's columns.
struct GroupDesc {
    int a_start, b_start, K, b_add, o_add;

    __device__ __forceinline__ GroupDesc(const int* __restrict__ desc, int g)
        : a_start(desc[g * 5 + 0]), b_start(desc[g * 5 + 1]), K(desc[g * 5 + 2]),
          b_add(desc[g * 5 + 3]), o_add(desc[g * 5 + 4])
    {
    }
};

// One group of a gemm_nn launch whose tables are dense rows (plan.DenseRows): A's columns
// a0, a0 + 1, ... of each case's row (K_dense of them), then the bias when `bias` (A_ONE, last);
// B's rows b_step floats apart from b_rows (b_ld > 0: the activation's rows; else the table's
// first offset and its step).
struct DenseGroup {
    int K_dense, bias, o_add;
    const float* a_rows;
    const float* b_rows;
    i64 b_step;

    __device__ __forceinline__ DenseGroup(const float* src, const int* __restrict__ tab,
                                          const int* __restrict__ desc, int g, const float* B,
                                          int b_ld)
    {
        const GroupDesc d(desc, g);
        o_add = d.o_add;
        bias = d.K > 0 && tab[d.a_start + d.K - 1] == A_ONE;
        K_dense = d.K - bias;
        a_rows = src + (K_dense > 0 ? tab[d.a_start] : 0);
        b_rows = B + (b_ld > 0 ? 0 : (d.K > 0 ? tab[d.b_start] : 0)) + d.b_add;
        b_step = b_ld > 0 ? b_ld : (d.K > 1 ? tab[d.b_start + 1] - tab[d.b_start] : 0);
    }
};

// The NN products' epilogue: out[m*ldo + o_add + n] = epi(acc) for the thread's rows and columns
// inside M x N.
template <int TM, int TN>
__device__ __forceinline__ void store_tile(const float (&acc)[TM][TN], float* __restrict__ out,
                                           const float* __restrict__ prior, int epi, int m_first,
                                           int n_first, int M, int N, int ldo, int o_add)
{
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m_first + i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n_first + j;
            if (n >= N) continue;
            const i64 o = (i64)m * ldo + o_add + n;
            out[o] = nn_epilogue(acc[i][j], epi, prior, o);
        }
    }
}

// What partial sum z of a weight-gradient product covers (the TN products, gemm.cu and
// gemm_async.cu): grid z enumerates chunk * slots + slot; the partial adds the cases
// [case_lo, case_hi) of its chunk over the groups [g_lo, g_hi) of its slot.
struct PartialShare {
    int ch, slot, case_lo, case_hi, g_lo, g_hi;
    __device__ __forceinline__ PartialShare(int z, int slots, int chunk, int n_cases, int gps,
                                            int groups)
    {
        ch = z / slots;
        slot = z - ch * slots;
        case_lo = ch * chunk;
        case_hi = min(n_cases, case_lo + chunk);
        g_lo = slot * gps;
        g_hi = min(groups, g_lo + gps);
    }
    // steps of `cases` cases per group
    __device__ __forceinline__ int tiles(int cases) const
    {
        return (case_hi - case_lo + cases - 1) / cases;
    }
};

// The group and the tile (of `tiles` a group) of each stage of a partial sum, for stages taken in
// order (0, 1, 2, ...): counted, not divided out of the stage's number (an integer division by a
// variable is some 30 instructions a stage, in loops where a stage is a few hundred).
struct StageWalk {
    int group, tile;
    const int tiles;
    __device__ __forceinline__ StageWalk(int g_lo, int tiles_) : group(g_lo), tile(0), tiles(tiles_)
    {
    }
    // the next stage's group and tile, then one stage on
    __device__ __forceinline__ void next(int& g, int& t)
    {
        g = group;
        t = tile;
        if (++tile == tiles) tile = 0, ++group;
    }
};

// The TN products' partial gradients: part[(p*R + k)*pld + col_base + c] for the thread's rows
// k < R and columns c < NL.
template <int TM, int TN>
__device__ __forceinline__ void store_partial_tile(const float (&acc)[TM][TN], float* __restrict__ part,
                                                   i64 p, int k_first, int c_first, int R, int NL,
                                                   i64 pld, int col_base)
{
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int k = k_first + i;
        if (k >= R) continue;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int c = c_first + j;
            if (c >= NL) continue;
            part[(p * R + k) * pld + col_base + c] = acc[i][j];
        }
    }
}
