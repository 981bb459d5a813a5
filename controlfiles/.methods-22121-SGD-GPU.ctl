// Quality run: LeNet-style net trained on the first 8,000 MNIST test digits, tested on the last 2,000.
// The net of lenet-mnist.ctl (the speed run on all 10,000 digits) with a held-out test set.
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 1 8000
CONVOLUTIONAL LAYER 20 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 50 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 500
WPEN = 0.0001
TRAIN METHOD = SGD
ANNEAL ITERS = 0
BATCH SIZE = 128
EPOCHS = 16
LEARNING RATE = 1
NESTEROV = YES
LR SCHEDULE = ONE CYCLE
EPOCHS = 22
AUGMENT SHIFT = 1
TRAIN
CLEAR
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 8001 10000
TEST
