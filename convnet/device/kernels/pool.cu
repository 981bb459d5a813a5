// Average and max pooling layers: activation and delta backpropagation (Equations 1-7 and 1-19).
// Activations are (case, row, col, slice), slice fastest. Grid x covers the neurons of one case
// (one thread each, adjacent threads on adjacent slices; the _x4 kernels, four adjacent slices a
// thread, read and written 16 bytes at a time: the host launches them where the depth is a
// multiple of 4); each thread then walks through the cases grid y apart, so a neuron's position
// is worked out once for many cases. Each slice is computed as with one a thread: the same bits.
// The two widths are separate kernels so that each gets the registers it needs (one kernel
// holding both would give the one-slice loop the four-slice loop's count, and fewer blocks).

#include "common.cuh"

// The 16-byte vector of four floats or ints.
template <typename T> struct Quad;
template <> struct Quad<float> { using type = float4; };
template <> struct Quad<int> { using type = int4; };

// V consecutive floats (or ints) from p into v, and back: one 16-byte access for V = 4.
template <int V, typename T>
__device__ __forceinline__ void load_lanes(T (&v)[V], const T* p)
{
    if constexpr (V == 4) {
        const typename Quad<T>::type q = *reinterpret_cast<const typename Quad<T>::type*>(p);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
    } else {
        v[0] = *p;
    }
}

template <int V, typename T>
__device__ __forceinline__ void store_lanes(T* p, const T (&v)[V])
{
    if constexpr (V == 4)
        *reinterpret_cast<typename Quad<T>::type*>(p) = {v[0], v[1], v[2], v[3]};
    else
        *p = v[0];
}

// Neuron j of a pooled layer of one case (slice fastest): its slice d, column ow and row oh.
__device__ __forceinline__ void pooled_neuron(int j, int PD, int W, int& d, int& ow, int& oh)
{
    d = j % PD;
    const int q = j / PD;
    ow = q % W;
    oh = q / W;
}

// out: (cases, H, W, PD); ids (max pooling only, unless null): row * PW + col of the winner in
// the prior slice. The first maximum in row-then-column order wins.
template <int V>
__device__ __forceinline__ void pool_forward_body(
    const float* __restrict__ in, int PH, int PW, int PD, int H, int W, int wv, int wh, int sv,
    int sh, int is_max, float* __restrict__ out, int* __restrict__ ids, int nb)
{
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int nhid = H * W * PD;
    if (j >= nhid) return;
    int d, ow, oh;
    pooled_neuron(j, PD, W, d, ow, oh);
    const int r0 = oh * sv, c0 = ow * sh;
    const i64 prior_n = (i64)PH * PW * PD;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const float* x = in + cs * prior_n;
        const i64 o = (i64)cs * nhid + j;
        if (is_max) {
            float best[V], v[V];
            int id[V];
            load_lanes<V>(best, x + (r0 * PW + c0) * PD + d);
#pragma unroll
            for (int l = 0; l < V; ++l) id[l] = r0 * PW + c0;
            for (int r = r0; r < r0 + wv; ++r)
                for (int c = c0; c < c0 + wh; ++c) {
                    load_lanes<V>(v, x + (r * PW + c) * PD + d);
#pragma unroll
                    for (int l = 0; l < V; ++l)
                        if (v[l] > best[l]) {
                            best[l] = v[l];
                            id[l] = r * PW + c;
                        }
                }
            store_lanes<V>(out + o, best);
            if (ids) store_lanes<V>(ids + o, id);
        } else {
            float s[V], v[V];
#pragma unroll
            for (int l = 0; l < V; ++l) s[l] = 0.f;
            for (int r = r0; r < r0 + wv; ++r)
                for (int c = c0; c < c0 + wh; ++c) {
                    load_lanes<V>(v, x + (r * PW + c) * PD + d);
#pragma unroll
                    for (int l = 0; l < V; ++l) s[l] += v[l];
                }
#pragma unroll
            for (int l = 0; l < V; ++l) s[l] = s[l] / (float)(wv * wh);
            store_lanes<V>(out + o, s);
        }
    }
}

extern "C" __global__ void pool_forward(
    const float* __restrict__ in, int PH, int PW, int PD, int H, int W, int wv, int wh, int sv,
    int sh, int is_max, float* __restrict__ out, int* __restrict__ ids, int nb)
{
    pool_forward_body<1>(in, PH, PW, PD, H, W, wv, wh, sv, sh, is_max, out, ids, nb);
}

extern "C" __global__ void pool_forward_x4(
    const float* __restrict__ in, int PH, int PW, int PD, int H, int W, int wv, int wh, int sv,
    int sh, int is_max, float* __restrict__ out, int* __restrict__ ids, int nb)
{
    pool_forward_body<4>(in, PH, PW, PD, H, W, wv, wh, sv, sh, is_max, out, ids, nb);
}

// delta of the prior layer (cases, PH, PW, PD) from the pooled layer's delta (cases, H, W, PD);
// prior_act is the prior layer's activation when it has a tanh (NULL after another pooling layer).
template <int V>
__device__ __forceinline__ void pool_backward_body(
    const float* __restrict__ delta, const int* __restrict__ ids, int PH, int PW, int PD, int H,
    int W, int wv, int wh, int sv, int sh, int is_max, const float* __restrict__ prior_act,
    float* __restrict__ out, int nb)
{
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int nprior = PH * PW * PD;
    if (j >= nprior) return;
    const int s = j % PD;
    const int q = j / PD;
    const int c = q % PW;
    const int r = q / PW;
    // pooled rows whose window holds r: oh * sv <= r <= oh * sv + wv - 1
    const int rlo = r - wv + 1 <= 0 ? 0 : (r - wv + 1 + sv - 1) / sv;
    const int rhi = min(r / sv, H - 1);
    const int clo = c - wh + 1 <= 0 ? 0 : (c - wh + 1 + sh - 1) / sh;
    const int chi = min(c / sh, W - 1);
    const int me = r * PW + c;
    const int nhid = H * W * PD;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const i64 base = (i64)cs * nhid;
        const i64 o = (i64)cs * nprior + j;
        float a[V], sum[V], dv[V];
        int id[V];
        if (prior_act) load_lanes<V>(a, prior_act + o);     // issued before the window's loads
#pragma unroll
        for (int l = 0; l < V; ++l) sum[l] = 0.f;
        for (int oh = rlo; oh <= rhi; ++oh)
            for (int ow = clo; ow <= chi; ++ow) {
                const i64 k = base + (oh * W + ow) * PD + s;
                load_lanes<V>(dv, delta + k);
                if (is_max) {
                    load_lanes<V>(id, ids + k);
#pragma unroll
                    for (int l = 0; l < V; ++l)
                        if (id[l] == me) sum[l] += dv[l];
                } else {
#pragma unroll
                    for (int l = 0; l < V; ++l) sum[l] += dv[l];
                }
            }
#pragma unroll
        for (int l = 0; l < V; ++l) {
            if (!is_max) sum[l] /= (float)(wv * wh);
            if (prior_act) sum[l] *= 1.f - a[l] * a[l];
        }
        store_lanes<V>(out + o, sum);
    }
}

extern "C" __global__ void pool_backward(
    const float* __restrict__ delta, const int* __restrict__ ids, int PH, int PW, int PD, int H,
    int W, int wv, int wh, int sv, int sh, int is_max, const float* __restrict__ prior_act,
    float* __restrict__ out, int nb)
{
    pool_backward_body<1>(delta, ids, PH, PW, PD, H, W, wv, wh, sv, sh, is_max, prior_act, out, nb);
}

extern "C" __global__ void pool_backward_x4(
    const float* __restrict__ delta, const int* __restrict__ ids, int PH, int PW, int PD, int H,
    int W, int wv, int wh, int sv, int sh, int is_max, const float* __restrict__ prior_act,
    float* __restrict__ out, int nb)
{
    pool_backward_body<4>(delta, ids, PH, PW, PD, H, W, wv, wh, sv, sh, is_max, prior_act, out, nb);
}

// pool_backward for max pooling whose windows tile the prior layer exactly (strides equal to the
// widths, PH = H * wv, PW = W * wh), so every prior neuron lies in one window: one thread per
// pooled neuron reads its delta and winner once and writes its whole window (the winner's delta,
// zeros elsewhere), instead of one thread per prior neuron reading the window's delta and winner
// again. pooled is the pooling layer's activation when the prior layer has a tanh (NULL
// otherwise): the winner's activation is the pooled value itself, so tanh' = 1 - a^2 needs no read
// of the prior layer. Same bits as pool_backward: 0 + delta, times 1 - a^2, and +0 elsewhere
// (tanh values lie in [-1, 1], so pool_backward's 0 * (1 - a^2) is +0 there too).
template <int V>
__device__ __forceinline__ void pool_backward_tiles_body(
    const float* __restrict__ delta, const int* __restrict__ ids, const float* __restrict__ pooled,
    int PW, int PD, int H, int W, int wv, int wh, float* __restrict__ out, int nb)
{
    const int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int nhid = H * W * PD;
    if (j >= nhid) return;
    int d, ow, oh;
    pooled_neuron(j, PD, W, d, ow, oh);
    const int r0 = oh * wv, c0 = ow * wh;
    const i64 nprior = (i64)nhid * wv * wh;
    for (int cs = blockIdx.y; cs < nb; cs += gridDim.y) {
        const i64 k = (i64)cs * nhid + j;
        int id[V];
        float g[V], dv[V], a[V], w[V];
        load_lanes<V>(id, ids + k);
        load_lanes<V>(dv, delta + k);
        if (pooled) load_lanes<V>(a, pooled + k);
#pragma unroll
        for (int l = 0; l < V; ++l) {
            g[l] = 0.f;
            g[l] += dv[l];
            if (pooled) g[l] *= 1.f - a[l] * a[l];
        }
        float* o = out + cs * nprior + d;
        for (int r = r0; r < r0 + wv; ++r)
            for (int c = c0; c < c0 + wh; ++c) {
                const int me = r * PW + c;
#pragma unroll
                for (int l = 0; l < V; ++l) w[l] = me == id[l] ? g[l] : 0.f;
                store_lanes<V>(o + (i64)me * PD, w);
            }
    }
}

extern "C" __global__ void pool_backward_tiles(
    const float* __restrict__ delta, const int* __restrict__ ids, const float* __restrict__ pooled,
    int PW, int PD, int H, int W, int wv, int wh, float* __restrict__ out, int nb)
{
    pool_backward_tiles_body<1>(delta, ids, pooled, PW, PD, H, W, wv, wh, out, nb);
}

extern "C" __global__ void pool_backward_tiles_x4(
    const float* __restrict__ delta, const int* __restrict__ ids, const float* __restrict__ pooled,
    int PW, int PD, int H, int W, int wv, int wh, float* __restrict__ out, int nb)
{
    pool_backward_tiles_body<4>(delta, ids, pooled, PW, PD, H, W, wv, wh, out, nb);
}
