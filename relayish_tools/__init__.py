"""The tools around the compiler, gathered under one name so that installing relayish adds no generic top-level
package (`cli`, `bench`, ...) to site-packages:

- `relayish_tools.cli`: the `relayish` command (`python -m relayish_tools.cli`);
- `relayish_tools.bench`: machine peak and bandwidth, kernel and model benchmarks, the generated docs;
- `relayish_tools.conformance`: onnx's node cases run on relayish or onnxruntime;
- `relayish_tools.fuzz`: differential fuzzing against onnxruntime.

The compiler's public API lives in the five packages of the design: `compiler.compile_model`, `runtime.load_module`,
`tuning.tune_model`, `frontends.onnx`, `relayish` (the IR)."""
