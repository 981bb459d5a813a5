// Quality run at TF32: lenet-mnist-split.ctl (the net of lenet-mnist.ctl, 8,000 digits to train,
// 2,000 to test) with the GPU's products as one TF32 product on the tensor cores: faster,
// operands rounded to 11 significant bits (the host path computes in float64 and ignores it).
CUDA PRECISION = TF32
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 1 8000
CONVOLUTIONAL LAYER 20 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 50 2 2 0 0 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 500
WPEN = 0.0001
TRAIN
CLEAR
READ MNIST IMAGE "../data/t10k-images-idx3-ubyte.gz"
READ MNIST LABELS "../data/t10k-labels-idx1-ubyte.gz"
KEEP CASES 8001 10000
TEST
