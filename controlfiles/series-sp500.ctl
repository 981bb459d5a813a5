// A real price series as images: S&P 500 daily closes, log differences, up/down classes.
// The benchmark net (benchmarks/ time it), trained on every case with no test; the same net with a
// train period and a later test period is series-sp500-split.ctl.
SERIES HEADER
SERIES COLUMN = 5
SERIES DIFFLOG
SERIES WINDOW = 16
SERIES RESOLUTION = 16
SERIES CLASS ZERO
READ SERIES "../data/sp500-daily-1927-2020.csv"
CONVOLUTIONAL LAYER 8 2 2 2 2 1 1
POOLED AVERAGE LAYER 2 2 2 2
FULLY CONNECTED LAYER 8
TRAIN
