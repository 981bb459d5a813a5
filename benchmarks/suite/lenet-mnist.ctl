// Speed run: LeNet-style net on all 10,000 real MNIST test digits (full-batch gradient benchmark).
READ MNIST IMAGE "../../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../../data/t10k-labels-idx1-ubyte.gz"
CONVOLUTIONAL LAYER 20 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 50 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 500
TRAIN
