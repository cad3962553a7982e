"""Neural-network ops: convolution, pooling, dense, matmul, softmax, LRN, batch norm (to be filled)."""
