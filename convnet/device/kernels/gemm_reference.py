"""The numpy reference of gemm.cu, gemm_async.cu, gemm_split.cu and gemm_tf32.cu: the gather
products (gemm_nn, every tile variant), the weight-gradient partial sums (gemm_tn) and their sums (grad_slot_sum, grad_flatten)."""

import numpy as np

from .. import launches, tuning
from .host_memory import ReferenceBase, covered


def round_tf32(x):
    """float32 values rounded to TF32 (11 significant bits, half-way cases away from zero) as
    tensor_cores.cuh's tf32_operand does; the one-product TF32 variants multiply these exactly."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xffffe000)).view(np.float32)


def _operand(values, tf32):
    return (round_tf32(values) if tf32 else values).astype(np.float64)


class GemmReference(ReferenceBase):
    """The numpy reference of gemm_reference.py (see the package docstring)."""

    # gemm_nn(src, lda, tab, desc, B, b_ld, M, N, out, ldo, prior, epi, G); grid (groups, m, n)
    def gemm_nn(self, tile, grid, block, src, lda, tab, desc, B, b_ld, M, N, out, ldo, prior, epi, G):
        _, BN, nt = tuning.nn_shape(tile)
        assert block[0] == nt
        if tile in tuning.NN_NARROW:
            # a thread an output, 32 // N cases a warp (gemm.cu, gemm_nn_narrow_body)
            assert N <= tuning.NARROW_MAX_COLS
            BM = nt // 32 * (32 // N)
        else:
            BM = tuning.nn_shape(tile)[0]
        assert tuning.nn_rows(tile, N) == BM
        covered((grid[2], grid[1]), BM, BN, M, N)
        assert 1 <= grid[0] <= G
        d = self.mem.view(desc, np.int32, 5 * G).reshape(G, 5).astype(np.int64)
        if tile in (*tuning.NN_DENSE, *tuning.NN_NARROW, *tuning.NN_SPLIT_DENSE,
                    *tuning.NN_TF32_DENSE):
            self.check_dense(tab, d, src, lda, B, b_ld)
        tf32 = tile in tuning.NN_TF32
        m = np.arange(M)
        n = np.arange(N)
        for a_start, b_start, K, b_add, o_add in d:
            if K:
                ao = self.gather(tab, np.int32, a_start + np.arange(K)).astype(np.int64)
                if b_ld > 0:
                    bo = np.arange(K, dtype=np.int64) * b_ld
                else:
                    bo = self.gather(tab, np.int32, b_start + np.arange(K)).astype(np.int64)
                idx = m[:, None] * lda + np.maximum(ao, 0)[None, :]
                A = _operand(self.gather(src, np.float32, idx), tf32)
                A = np.where(ao[None, :] >= 0, A, np.where(ao == -2, 1.0, 0.0)[None, :])
                Bm = _operand(self.gather(B, np.float32, bo[:, None] + b_add + n[None, :]), tf32)
                C = A @ Bm
            else:
                C = np.zeros((M, N))
            oidx = m[:, None] * ldo + o_add + n[None, :]
            self.store_epilogue(C, oidx, out, prior, epi)

    def store_epilogue(self, C, oidx, out, prior, epi):
        """out[oidx] = epi(C) as float32: C, tanh(C), or C times the prior layer's tanh
        derivative 1 - p^2 at the same places (the NN products' epilogue, nn_epilogue)."""
        if epi == launches.EPI_TANH:
            C = np.tanh(C)
        elif epi == launches.EPI_DERIV:
            p = self.gather(prior, np.float32, oidx).astype(np.float64)
            C = C * (1 - p * p)
        o = self.mem.view(out, np.float32, int(oidx.max()) + 1)
        o[oidx] = C.astype(np.float32)

    def check_dense(self, tab, d, src, lda, B, b_ld):
        """What gemm_nn's dense variants take for granted: one group, its A columns a0, a0 + 1,
        ... (then perhaps the bias, A_ONE), its B rows evenly spaced, every row 16-byte aligned."""
        assert len(d) == 1
        a_start, b_start, K, b_add, _ = (int(v) for v in d[0])
        ao = self.gather(tab, np.int32, a_start + np.arange(K)).astype(np.int64)
        kd = K - int(K > 0 and ao[-1] == -2)
        assert np.array_equal(ao[:kd], ao[0] + np.arange(kd)) and (ao[:kd] >= 0).all()
        if b_ld > 0:
            step, first = b_ld, 0
        else:
            bo = self.gather(tab, np.int32, b_start + np.arange(K)).astype(np.int64)
            step, first = (int(bo[1] - bo[0]) if K > 1 else 0), int(bo[0])
            assert np.array_equal(bo, first + step * np.arange(K))
        assert lda % 4 == 0 and (kd == 0 or ao[0] % 4 == 0) and step % 4 == 0
        assert (first + b_add) % 4 == 0 and int(src) % 16 == 0 and int(B) % 16 == 0

    # gemm_tn(src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi, n_cases, chunk, groups,
    #         gps, slots, local_cols, part, nz)
    def gemm_tn(self, tile, grid, block, src, lda, tab, desc, delta, ldd, depth, R, n_lo, n_hi,
                n_cases, chunk, groups, gps, slots, local_cols, part, nz, shared=0):
        NL = n_hi - n_lo
        if tile in tuning.TN_COLS:
            # the kernel derives its rows and columns per block from blockDim.x alone
            tm, cb, stages = tuning.TN_COLS[tile]
            width = min(-(-NL // 4) * 4, tuning.TN_COLS_MAX)
            nc = width // 4
            assert block[0] % nc == 0 and block[0] <= tuning.TN_COLS_THREADS
            BM, BN = block[0] // nc * tm, width
            assert 4 * BN <= 4 * block[0] and BM <= block[0], "a loader would miss rows"
            assert shared == 4 * stages * cb * (-(-BM // 4) * 4 + BN) <= tuning.SHARED_BYTES
        else:
            BM, BN, nt = tuning.TN_TENSOR.get(tile) or tuning.TN_TILES[tile]
            assert block[0] == nt and shared == 0
        covered(grid, BM, BN, R, NL)
        assert nz == -(-n_cases // chunk) * slots
        d = self.mem.view(desc, np.int32, 5 * groups).reshape(groups, 5).astype(np.int64)
        pld = groups * NL if local_cols else NL
        n = n_lo + np.arange(NL)
        tf32 = tile in tuning.TN_TF32
        for z in range(nz):
            ch, slot = divmod(z, slots)
            lo, hi = ch * chunk, min(n_cases, ch * chunk + chunk)
            m = np.arange(lo, hi)
            acc = np.zeros((R, NL))
            for g in range(slot * gps, min(groups, slot * gps + gps)):
                ao = self.gather(tab, np.int32, d[g, 0] + np.arange(R)).astype(np.int64)
                A = _operand(self.gather(src, np.float32, m[:, None] * lda
                                         + np.maximum(ao, 0)[None, :]), tf32)
                A = np.where(ao[None, :] >= 0, A, np.where(ao == -2, 1.0, 0.0)[None, :])
                D = _operand(self.gather(delta, np.float32, m[:, None] * ldd + g * depth
                                         + n[None, :]), tf32)
                acc += A.T @ D
            p = ch if local_cols else z
            col = (slot * NL if local_cols else 0) + np.arange(NL)
            idx = (p * R + np.arange(R))[:, None] * pld + col[None, :]
            self.mem.view(part, np.float32, int(idx.max()) + 1)[idx] = acc.astype(np.float32)

    def grad_slot_sum(self, grid, block, part, slots, chunks, pstride, tot):
        assert grid[0] * block[0] >= chunks * pstride
        P = self.mem.view(part, np.float32, chunks * slots * pstride).reshape(chunks, slots, pstride)
        self.mem.view(tot, np.float64, chunks * pstride)[:] = P.astype(np.float64).sum(axis=1).ravel()

    def grad_flatten_d(self, grid, block, *args):
        self.grad_flatten(grid, block, *args, dtype=np.float64)

    def grad_flatten(self, grid, block, part, n_part, R, pld, NL, n_lo, depth, local_cols, ldw,
                     dev2host, acc, dtype=np.float32):
        total = R * pld
        assert grid[0] * block[0] >= total
        idx = np.arange(total)
        k, c = idx // pld, idx % pld
        col = (c // NL) * depth + n_lo + c % NL if local_cols else n_lo + c
        h = self.gather(dev2host, np.int32, k * ldw + col).astype(np.int64)
        assert h.min() >= 0, "flatten reached a padding column"
        P = self.mem.view(part, dtype, n_part * total).reshape(n_part, total).astype(np.float64)
        a = self.mem.view(acc, np.float64, int(h.max()) + 1)
        a[h] += P.sum(axis=0)
