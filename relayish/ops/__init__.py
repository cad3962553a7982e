"""Registers every op. The table below is the contract between the frontend, the passes and the compiler.

Layouts: activations NCHW, conv weights OIHW. Every float op works on float32 (other dtypes may be accepted where
noted). `padding` is always 4 ints (top, left, bottom, right). Broadcasting is numpy's.

| op                  | inputs                          | attrs (default)                                            | pattern |
|---------------------|---------------------------------|------------------------------------------------------------|---------|
| nn.relu             | x                               |                                                            | ELEMWISE |
| nn.leaky_relu       | x                               | alpha (0.01)                                               | ELEMWISE |
| clip                | x                               | a_min (-inf), a_max (inf)                                  | ELEMWISE |
| sigmoid, tanh, exp, sqrt, negative, copy | x          |                                                            | ELEMWISE |
| add, subtract, multiply, divide, maximum, minimum | a, b (broadcast) |                                    | BROADCAST |
| nn.batch_norm       | x, gamma, beta, mean, var       | axis (1), epsilon (1e-5)     inference form               | BROADCAST |
| nn.conv2d           | x NCHW, w OIHW                  | strides (1,1), padding (0,0,0,0), dilation (1,1), groups (1) | OUT_ELEMWISE_FUSABLE |
| nn.conv2d_nchwc     | x N,C/ib,H,W,ib; w O/ob,C/ib,KH,KW,ib,ob | strides, padding, dilation                        | OUT_ELEMWISE_FUSABLE |
| layout_transform    | x                               | src_layout, dst_layout ("NCHW", "NCHW16c")                 | INJECTIVE |
| nn.max_pool2d       | x NCHW                          | pool_size, strides (1,1), padding (0,0,0,0), dilation (1,1), ceil_mode (False) | OUT_ELEMWISE_FUSABLE |
| nn.avg_pool2d       | x NCHW                          | as max_pool2d + count_include_pad (False)                  | OUT_ELEMWISE_FUSABLE |
| nn.global_avg_pool2d| x NCHW                          |                                                            | OUT_ELEMWISE_FUSABLE |
| reshape             | x                               | newshape (fully resolved, no 0/-1)                         | INJECTIVE |
| transpose           | x                               | axes                                                       | INJECTIVE |
| concatenate         | x0, x1, ... (variadic)          | axis                                                       | INJECTIVE |
| nn.dense            | x [M,K], w [N,K]                | (y = x @ w.T)                                              | OUT_ELEMWISE_FUSABLE |
| nn.matmul           | a [...,M,K], b [...,K,N]        | (numpy matmul, batch dims broadcast)                       | OUT_ELEMWISE_FUSABLE |
| nn.softmax          | x                               | axis (-1)                                                  | OPAQUE |
| nn.lrn              | x NCHW                          | size, alpha (1e-4), beta (0.75), bias (1.0)                | OPAQUE |
"""
from . import elemwise, layout, nn, transform, winograd  # noqa: F401
