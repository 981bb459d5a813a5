// Suite: no convolution at all, two wide fully connected layers on real MNIST digits.
READ MNIST IMAGE "../../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../../data/t10k-labels-idx1-ubyte.gz"
FULLY CONNECTED LAYER 1024
FULLY CONNECTED LAYER 256
TRAIN
