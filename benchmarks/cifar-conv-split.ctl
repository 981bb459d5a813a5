// Quality run for the GPU method comparison (benchmarks/methods.py): the net of
// benchmarks/suite/cifar-conv.ctl (CIFAR-10-sized images, two padded 5x5 convolutions with max
// pooling, FC 96) trained on 5,000 generated images and tested on 1,000 others. MAKE IMAGE's
// classes are drawn apart from its tones, so a held-out test of it is at chance; these images
// are ten classes of shapes (tests/make_cifar_sample.py), made first with
//     python tests/make_cifar_sample.py data/cifar-shapes-6000.bin --images 6000
READ C10 IMAGE "../data/cifar-shapes-6000.bin"
KEEP CASES 1 5000
CONVOLUTIONAL LAYER 24 2 2 2 2 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 48 2 2 2 2 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 96
WPEN = 0.0001
MAXITERS = 300
TRAIN
CLEAR
READ C10 IMAGE "../data/cifar-shapes-6000.bin"
KEEP CASES 5001 6000
TEST
