// The manual's example (manual_example.ctl) as a sweep: 3 weight penalties x 2 widths of the
// fully connected layer x 3 seeds = 18 short runs (60 iterations each, a few seconds). `convnet batch` runs them all:
//   convnet batch controlfiles/sweep-manual.ctl --out sweep --jobs 2
SWEEP WPEN = 0, 0.0001, 0.001
SWEEP WIDTH = 4, 8
SWEEP SEEDS = 3
MAKE IMAGE 12 12 1 6 512
CONVOLUTIONAL LAYER 6 1 1 1 1 1 1
POOLED MAX LAYER 3 3 2 2
LOCAL LAYER 3 1 1 1 1 1 1
POOLED AVERAGE LAYER 3 3 2 2
FULLY CONNECTED LAYER $WIDTH
MAXITERS = 60
TRAIN
