// Small net on real digits, CPU-sized: train on MNIST test digits 1-2000, test on 2001-3000.
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 1 2000
CONVOLUTIONAL LAYER 8 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 32
WPEN = 0.0001
TRAIN
CLEAR
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 2001 3000
TEST
