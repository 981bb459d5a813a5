"""The CUDA sources of the device path (*.cu and the headers they include, *.cuh) and, beside
each, its numpy reference (*_reference.py): what every kernel of a family computes, in float64, on
the device memory as host arrays (host_memory.py), with the checks of what the kernel takes for
granted about its launch (grid, block, shared memory).

    gemm_reference.py        gemm.cu, gemm_async.cu, gemm_split.cu, gemm_tf32.cu: gemm_nn, gemm_tn,
                             grad_slot_sum, grad_flatten
    pool_reference.py        pool.cu: pool_forward, pool_backward, pool_backward_tiles
    conv_small_reference.py  conv_small.cu: conv_small, conv_small_pool (generic, fixed, values),
                             conv_grad_pooled
    conv_tiled_reference.py  conv_tiled.cu: conv_fwd, conv_fwd_pool, conv_bwd, conv_grad
    conv_patch_reference.py  conv_patch.cu: conv_patch(_delta)_weights, conv_patch(_delta)
    output_reference.py      output.cu: softmax_ll, ll_sum, grad_finish
    weights_reference.py     weights.cu: weights_scatter, line_point, the vector operations
    minibatch_reference.py   minibatch.cu: minibatch_gather(_shifted), minibatch_update, minibatch_advance
    reference.py             every family together, and a launch by function name (launch)

The tests run the whole device path on them (tests/test_device_emulated.py), and
benchmarks/kernel.py holds every variant of a family to them on a GPU.
"""
