// S&P 500 daily closes 1927-2020 as 16 x 16 images of log changes; class: does the next day go up?
// The net of series-sp500.ctl (the benchmark copy, which trains on every case), here trained on the
// windows whose next day falls up to the end of 1989 and tested on the later ones.
//
// Case numbers, from the dates in the csv (column 1): the file has a header line and 23,279 daily
// rows. DIFFLOG turns them into 23,278 log changes; a window of 16 changes plus the change after it
// gives 23,262 cases, and case k's target is the change into data row k + 16 (rows counted from 0).
// The last 1989 row is row 15549 (12/29/1989), so cases 1-15533 have targets up to the end of 1989
// and cases 15534-23262 have targets from 1/2/1990 on.
SERIES HEADER
SERIES COLUMN = 5
SERIES DIFFLOG
SERIES WINDOW = 16
SERIES RESOLUTION = 16
SERIES CLASS ZERO
READ SERIES "../data/sp500-daily-1927-2020.csv"
KEEP CASES 1 15533
CONVOLUTIONAL LAYER 8 2 2 2 2 1 1
POOLED AVERAGE LAYER 2 2 2 2
FULLY CONNECTED LAYER 8
MAXITERS = 200
TRAIN
CLEAR
// The test part is imaged and classed with the training part's scale and thresholds.
READ SERIES "../data/sp500-daily-1927-2020.csv"
KEEP CASES 15534 23262
TEST
