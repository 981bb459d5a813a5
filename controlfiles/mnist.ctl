// Real handwritten digits on the CPU: the first 3,000 MNIST test digits (in ../data).
// Train on digits 1-2000, then test the trained model on digits 2001-3000, which it never saw.
READ MNIST IMAGE "../data/mnist-3000-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/mnist-3000-labels-idx1-ubyte.gz"
KEEP CASES 1 2000
CONVOLUTIONAL LAYER 8 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 32
WPEN = 0.0001
TRAIN
CLEAR
READ MNIST IMAGE "../data/mnist-3000-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/mnist-3000-labels-idx1-ubyte.gz"
KEEP CASES 2001 3000
TEST
