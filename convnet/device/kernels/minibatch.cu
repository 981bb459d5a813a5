// Mini-batch gradient descent on the device (device/minibatch.py): a step gathers its batch's
// cases from those already on the device, takes the gradient (the evaluator's launches), then
// updates the weights and the rule's state here, with no host work between steps. Where a step
// is in the run and in its epoch is read from the device (counters), so that one captured graph
// serves every step.

#include "common.cuh"

// counters[0]: steps taken in the run; counters[1]: steps taken in the epoch.
// xb[i][k] = x[c][k] and cb[i] = classes[c] for c = order[counters[1] * batch + i].
extern "C" __global__ void minibatch_gather(
    const float* __restrict__ x, const int* __restrict__ classes, const int* __restrict__ order,
    const int* __restrict__ counters, int batch, int n_inputs, float* __restrict__ xb,
    int* __restrict__ cb)
{
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)batch * n_inputs) return;
    const int i = (int)(idx / n_inputs);
    const int k = (int)(idx - (i64)i * n_inputs);
    const int c = order[(i64)counters[1] * batch + i];
    xb[idx] = x[(i64)c * n_inputs + k];
    if (k == 0) cb[i] = classes[c];
}

// minibatch_gather with every case moved (AUGMENT SHIFT): position p = counters[1] * batch + i
// of the epoch moves its case down by shifts[2p] and across by shifts[2p + 1] pixels; a pixel
// shifted in from outside repeats the nearest edge pixel (convnet/minibatch.py, shift_cases).
// x and xb in the device's layout: row, column, band fastest.
extern "C" __global__ void minibatch_gather_shifted(
    const float* __restrict__ x, const int* __restrict__ classes, const int* __restrict__ order,
    const int* __restrict__ shifts, const int* __restrict__ counters, int batch, int rows,
    int cols, int bands, float* __restrict__ xb, int* __restrict__ cb)
{
    const int n_inputs = rows * cols * bands;
    const i64 idx = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (i64)batch * n_inputs) return;
    const int i = (int)(idx / n_inputs);
    const int k = (int)(idx - (i64)i * n_inputs);
    const i64 p = (i64)counters[1] * batch + i;
    const int c = order[p];
    const int band = k % bands;
    const int pixel = k / bands;
    const int row = pixel / cols;
    const int col = pixel - row * cols;
    const int from_row = min(max(row - shifts[2 * p], 0), rows - 1);
    const int from_col = min(max(col - shifts[2 * p + 1], 0), cols - 1);
    xb[idx] = x[(i64)c * n_inputs + ((i64)from_row * cols + from_col) * bands + band];
    if (k == 0) cb[i] = classes[c];
}

// One step of the update rule (convnet/minibatch.py, update_weights; each product and sum
// rounded on its own) at the rate rates[counters[0]], step number t = counters[0] + 1; the new
// weights also rounded to float32 for the layouts (w32).
extern "C" __global__ void minibatch_update(
    double* __restrict__ w, const double* __restrict__ grad, double* __restrict__ first,
    double* __restrict__ second, const double* __restrict__ rates,
    const int* __restrict__ counters, int n, int adam, double momentum, int nesterov,
    double beta1, double beta2, double epsilon, float* __restrict__ w32)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int step = counters[0];
    const double rate = rates[step];
    const double g = grad[i];
    double wi = w[i];
    if (adam) {
        const double t = (double)(step + 1);
        const double m = __dadd_rn(__dmul_rn(beta1, first[i]), __dmul_rn(1.0 - beta1, g));
        const double s = __dadd_rn(__dmul_rn(beta2, second[i]),
                                   __dmul_rn(1.0 - beta2, __dmul_rn(g, g)));
        first[i] = m;
        second[i] = s;
        const double mean = __ddiv_rn(m, 1.0 - pow(beta1, t));
        const double spread = __dadd_rn(__dsqrt_rn(__ddiv_rn(s, 1.0 - pow(beta2, t))), epsilon);
        wi = __dsub_rn(wi, __dmul_rn(rate, __ddiv_rn(mean, spread)));
    } else {
        const double v = __dadd_rn(__dmul_rn(momentum, first[i]), g);
        first[i] = v;
        const double along = nesterov ? __dadd_rn(g, __dmul_rn(momentum, v)) : v;
        wi = __dsub_rn(wi, __dmul_rn(rate, along));
    }
    w[i] = wi;
    w32[i] = __double2float_rn(wi);
}

// After a step: both counters advance, and the batch's summed log likelihood joins the epoch's.
extern "C" __global__ void minibatch_advance(int* __restrict__ counters,
                                             const double* __restrict__ ll,
                                             double* __restrict__ epoch_ll)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    counters[0] += 1;
    counters[1] += 1;
    epoch_ll[0] += ll[0];
}
