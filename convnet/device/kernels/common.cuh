// Shared definitions for the device kernels (included by every .cu file in this folder).
#pragma once

// Gather-table codes (see plan.py): an entry >= 0 is an offset into the source row,
// A_ZERO reads the zero padding around the prior layer, A_ONE the constant input of the bias.
#define A_ZERO (-1)
#define A_ONE (-2)

// Epilogues of gemm_nn.
#define EPI_NONE 0    // output logits
#define EPI_TANH 1    // hidden activation, tanh
#define EPI_DERIV 2   // backpropagated delta times the prior layer's tanh derivative 1 - a^2

typedef long long i64;
