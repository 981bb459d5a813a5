// One wide fully connected layer holding most of the weights: its upload goes in pieces
MAKE IMAGE 28 28 1 10 10000
FULLY CONNECTED LAYER 1024
TRAIN
