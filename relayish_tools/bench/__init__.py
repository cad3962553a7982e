"""Benchmarks and measurements of the machine: commands, not timed tests (`python -m relayish_tools.bench.NAME`).

    relayish bench MODEL [--compare-layouts]  compare.py, layout_bench.py: a model against onnxruntime
    peak                                      the fp32 FMA peak (llvmlite micro-kernel)
    bandwidth                                 read bandwidth per working-set size
    kernel_bench                              ResNet-18's kernels, hand / default / onnxruntime
    op_table                                  a kernel per op class (conv kinds, dense, matmul),
                                              default schedule / onnxruntime, % of the roofline's roof
    shapes, rnn                               random shapes per op class; LSTM/GRU layers, against onnxruntime
    suite                                     a folder of models against onnxruntime and OpenVINO
    cost_data                                 measured programs to judge the cost model on
    dispatch                                  the cost of one kernel call and of run()'s Python
                                              work, against onnxruntime's cost per op

hand_schedules.py holds the hand-written schedules the kernel benchmark measures the defaults against, and
native.py the library of loose kernels they are timed in. This package uses the compiler, the runtime and the
tuner through their public entry points only (tests/test_layering.py checks it); timing and output checks come
from runtime.timing and runtime.accuracy.
"""
