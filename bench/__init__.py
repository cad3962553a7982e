"""Benchmarks and measurements of the machine: commands, not timed tests.

    relayish bench MODEL [--compare-layouts]      compare.py, layout_bench.py: a model against onnxruntime
    python -m bench.peak                          peak.py: the fp32 FMA peak (llvmlite micro-kernel)
    python -m bench.bandwidth                     bandwidth.py: read bandwidth per working-set size
    python -m bench.kernel_bench                  kernel_bench.py: ResNet-18's kernels, hand / default / onnxruntime
    python -m bench.op_table                      op_table.py: a kernel per op class (conv kinds, dense, matmul),
                                                  default schedule / onnxruntime, % of the roofline's roof
    python -m bench.cost_data                     cost_data.py: measured programs to judge the cost model on
    python -m bench.dispatch                      dispatch.py: the cost of one kernel call and of run()'s Python
                                                  work, against onnxruntime's cost per op

hand_schedules.py holds the hand-written schedules the kernel benchmark measures the defaults against, and
native.py the library of loose kernels they are timed in. This package uses the compiler, the runtime and the
tuner through their public entry points only (tests/test_layering.py checks it); timing and output checks come
from runtime.timing and runtime.accuracy.
"""
