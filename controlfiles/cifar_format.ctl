// Colour images in the CIFAR-10 binary format. ../data/cifar-format-sample.bin is a small GENERATED
// file (200 images of ten shapes, written by tests/make_cifar_sample.py), not real CIFAR-10 data;
// point READ C10 IMAGE at the real data_batch_*.bin files (repeat the line to concatenate them).
READ C10 IMAGE "../data/cifar-format-sample.bin"
KEEP CASES 1 150
DISPLAY TRAINING IMAGES 1 2 10 "cifar-format-sample.png"
CONVOLUTIONAL LAYER 8 2 2 2 2 1 1
POOLED MAX LAYER 2 2 2 2
CONVOLUTIONAL LAYER 8 1 1 1 1 1 1
POOLED MAX LAYER 2 2 2 2
FULLY CONNECTED LAYER 16
WPEN = 0.0001
TRAIN
CLEAR
READ C10 IMAGE "../data/cifar-format-sample.bin"
KEEP CASES 151 200
TEST
