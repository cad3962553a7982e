"""AutoTVM-style tuning (Chen et al., NeurIPS'18): templates define knob spaces, tuners search them.

    @template("conv2d_nchwc", matches=...)   def conv2d_nchwc(cfg, sch): cfg.define_split(...); ...
    tuner = XGBTuner(task)                   # or RandomTuner, GridSearchTuner, GATuner; the task's template
    tuner.load_history("other.db")           # transfer learning from other workloads' records
    tuner.tune(200, measure_option(), callbacks=[progress(200), log_to_records("tuning.db")])
"""
from .space import ConfigEntity, ConfigSpace
from .templates import TEMPLATES, Template, find_template, template
from .tuner import (GATuner, GridSearchTuner, RandomTuner, Tuner, log_to_records, measure_option,
                    progress)
from .xgb_tuner import XGBTuner, diversity_objective, select_diverse

TUNERS = {"random": RandomTuner, "grid": GridSearchTuner, "ga": GATuner, "xgb": XGBTuner}
