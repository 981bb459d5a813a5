"""CONVNET.LOG and CUDA.LOG writers, the PRINT WEIGHTS format and the log reader."""
