// Suite: two locally connected layers (5x5 stride 2, then 3x3) on real MNIST digits.
READ MNIST IMAGE "../../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../../data/t10k-labels-idx1-ubyte.gz"
LOCAL LAYER 8 2 2 0 0 2 2
LOCAL LAYER 16 1 1 0 0 1 1
FULLY CONNECTED LAYER 32
TRAIN
