"""tuning: the auto-scheduler. Sketches and annotation (the search space), evolutionary search, the XGBoost cost
model on loop-IR features, measurement in worker processes, the task scheduler and `tuning.tune.tune_model`; it
writes compiler/records.py's records. The command line is in cli/, the benchmarks (and the cost model's dataset
harness) in bench/."""
