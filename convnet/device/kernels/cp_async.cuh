// cp.async copies (compute capability 8.0+) and the stage loop, shared by the products of
// gemm_async.cu and the tensor-core products (tensor_cores.cuh).

// ------------------------------------------------------------------------------ cp.async loads
// Variants of both products whose tiles travel straight from global to shared memory with
// cp.async, STAGES tiles deep: no staging registers, no separate shared-memory stores, and
// several tiles' loads in flight while one is multiplied. Padding reads (A_ZERO, rows or columns
// past the end) are zero-filled by the copy itself (source size 0); the bias input reads the
// constant below. The multiply-add loop and its order are those of the plain variants, so every
// variant gives the same bits.

__device__ const float k_one = 1.f;

__device__ __forceinline__ void cp_async4(float* smem, const float* gmem, bool valid)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int size = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(size));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// The stage loop of every product here: issue(s) starts the copies of step s into stage
// s % STAGES, STAGES - 1 steps ahead; multiply(stage) runs once step s has landed and every
// thread is done with step s - 1 (whose stage the copies of step s + STAGES - 1 then reuse).
// On return every copy has landed and every thread is done with the stages.
template <int STAGES, typename Issue, typename Multiply>
__device__ __forceinline__ void cp_async_stages(int steps, Issue&& issue, Multiply&& multiply)
{
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < steps) issue(s);
        cp_async_commit();
    }
    for (int s = 0; s < steps; ++s) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        if (s + STAGES - 1 < steps) issue(s + STAGES - 1);
        cp_async_commit();
        multiply(s % STAGES);
    }
    cp_async_wait<0>();
    __syncthreads();
}

__device__ __forceinline__ void cp_async16(float* smem, const float* gmem, int bytes)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}

// gemm_nn's B rows of gather step t into one [k][column] stage of row length LDB: this thread's
// B_PER rows, B_STEP apart from row b_k, column b_n (n in the product); B's row of k is kb *
// b_ld, or the table's offset where b_ld is 0. Rows past the group's K and columns past N are
// zero-filled. The gather products of gemm_async.cu and of the tensor cores share it.
template <int BK, int B_PER, int B_STEP, int LDB>
__device__ __forceinline__ void cp_async_gather_b(float (*stage)[LDB],
                                                  const float* __restrict__ B, int b_ld,
                                                  const int* __restrict__ tab, const GroupDesc& d,
                                                  int t, int b_k, int b_n, int n, int N)
{
#pragma unroll
    for (int i = 0; i < B_PER; ++i) {
        const int kb = t * BK + b_k + i * B_STEP;
        const bool ok = kb < d.K && n < N;
        const float* p = B;
        if (ok) p = B + (b_ld > 0 ? (i64)kb * b_ld : (i64)tab[d.b_start + kb]) + d.b_add + n;
        cp_async4(&stage[b_k + i * B_STEP][b_n], p, ok);
    }
}

// ------------------------------------------------------------- runs of four floats, 16 bytes
// The quad variants' loaders. In the depth-fastest layout a window's inputs come in runs of the
// prior layer's depth, so most groups of four consecutive table entries name four consecutive
// floats: those are copied 16 bytes at a time when they start on a 16-byte boundary, the others
// float by float as the gather loaders do. What lands in shared memory is the same either way.

// Whether the four offsets o name four consecutive floats from a 16-byte boundary of `base`
// (vec: every row of the source begins on one).
__device__ __forceinline__ bool run_of_four(const int (&o)[4], bool vec)
{
    return vec && o[0] >= 0 && (o[0] & 3) == 0 && o[1] == o[0] + 1 && o[2] == o[0] + 2 &&
           o[3] == o[0] + 3;
}

__device__ __forceinline__ void cp_async8(float* smem, const float* gmem)
{
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, 8;\n" ::"r"(s), "l"(gmem));
}

// Four floats of one source row into dst: row + o[e] for each offset o[e] >= 0, the bias input
// (1) for A_ONE, zero for A_ZERO; one 16-byte copy for a run of four, and with PAIRS 8 bytes for
// each half that is a run of two from an 8-byte boundary (depths of 2 mod 4: LeNet's 50 slices).
template <bool PAIRS = false>
__device__ __forceinline__ void cp_async_four(float* dst, const float* row, const int (&o)[4],
                                              bool vec)
{
    if (run_of_four(o, vec)) {
        cp_async16(dst, row + o[0], 16);
        return;
    }
#pragma unroll
    for (int h = 0; h < 4; h += 2) {
        if (PAIRS && vec && o[h] >= 0 && (o[h] & 1) == 0 && o[h + 1] == o[h] + 1) {
            cp_async8(dst + h, row + o[h]);
            continue;
        }
#pragma unroll
        for (int e = h; e < h + 2; ++e)
            cp_async4(dst + e, o[e] >= 0 ? row + o[e] : &k_one, o[e] != A_ZERO);
    }
}

// The table's four offsets from entry `first` (A_ZERO past `count` entries).
__device__ __forceinline__ void table_four(int (&o)[4], const int* __restrict__ tab, int start,
                                           int first, int count)
{
#pragma unroll
    for (int e = 0; e < 4; ++e) o[e] = first + e < count ? tab[start + first + e] : A_ZERO;
}

// a 16-byte-aligned source for copies that only zero-fill
__device__ __align__(16) const float k_zeros[4] = {0.f, 0.f, 0.f, 0.f};

// Up to four consecutive floats from p (cols of them; the rest zero-filled) into dst, 16 bytes
// at once where p lies on a 16-byte boundary.
__device__ __forceinline__ void cp_async_cols(float* dst, const float* p, int cols)
{
    if (cols == 0 || ((size_t)p & 15) == 0) {
        cp_async16(dst, cols ? p : k_zeros, 4 * cols);
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) cp_async4(dst + e, e < cols ? p + e : k_zeros, e < cols);
}

// gemm_nn's B rows of step t into one [k][column] stage (columns n0 ...), four columns a copy:
// B's row of k is k * b_ld, or the table's offset where b_ld is 0. Rows past the group's K and
// columns past N are zero-filled.
template <int BK, int BN, int NT, int LDB>
__device__ __forceinline__ void cp_async_rows_b(float (*stage)[LDB], const float* __restrict__ B,
                                                int b_ld, const int* __restrict__ tab,
                                                const GroupDesc& d, int t, int n0, int N, int tid)
{
    constexpr int CHUNKS = BK * BN / 4;
#pragma unroll
    for (int c0 = 0; c0 < CHUNKS; c0 += NT) {
        const int c = c0 + tid;
        if (CHUNKS % NT == 0 || c < CHUNKS) {
            const int r = c / (BN / 4), q = c % (BN / 4);
            const int k = t * BK + r, n = n0 + 4 * q;
            const int cols = k < d.K ? max(0, min(4, N - n)) : 0;
            const float* p = k_zeros;
            if (cols) p = B + (b_ld > 0 ? (i64)k * b_ld : (i64)tab[d.b_start + k]) + d.b_add + n;
            cp_async_cols(&stage[r][4 * q], p, cols);
        }
    }
}
