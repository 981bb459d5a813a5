// SoftMax output, log likelihood and the output layer's delta (Equations 1-10 to 1-13).

#include "common.cuh"

// One thread per case of the batch. logits: (nb, ncls). classes, probs and ll point at the
// batch's first case of the whole data set. delta (nb, ncls) = p - target, NOT yet divided by
// (cases * classes): the gradient is scaled once at the end.
extern "C" __global__ void softmax_ll(
    const float* __restrict__ logits, int ncls, int nb, const int* __restrict__ classes,
    double* __restrict__ probs, double* __restrict__ ll, float* __restrict__ delta)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nb) return;
    const float* z = logits + (i64)i * ncls;
    double mx = z[0];
    for (int j = 1; j < ncls; ++j) mx = fmax(mx, (double)z[j]);
    double sum = 0.0;
    for (int j = 0; j < ncls; ++j) sum += exp((double)z[j] - mx);
    const int cls = classes[i];
    double* p = probs + (i64)i * ncls;
    for (int j = 0; j < ncls; ++j) {
        const double pj = exp((double)z[j] - mx) / sum;
        p[j] = pj;
        if (delta) delta[(i64)i * ncls + j] = (float)(pj - (j == cls ? 1.0 : 0.0));
    }
    ll[i] = -log(p[cls] + 1e-30);
}

// Sum of n doubles in a fixed order (one block of LL_THREADS threads), written to *out.
#define LL_THREADS 256
extern "C" __global__ void __launch_bounds__(LL_THREADS) ll_sum(
    const double* __restrict__ ll, int n, double* __restrict__ out)
{
    __shared__ double part[LL_THREADS];
    double s = 0.0;
    for (int i = threadIdx.x; i < n; i += LL_THREADS) s += ll[i];
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = LL_THREADS / 2; h > 0; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}
