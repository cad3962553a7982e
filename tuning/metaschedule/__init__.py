"""MetaSchedule-style tuning (Shao et al., NeurIPS'22): schedules as probabilistic programs over our steps.

    sch = Schedule(task); c = sch.get_block("C"); tiles = sch.sample_perfect_tile(loop, n=4); sch.split(loop, tiles)
    MultiLevelTiling("SSRSRS").apply(sch, c)      # rules: by hand, or design_spaces(task) applies them all
    replay(sch.trace, task, decisions={})         # the same program with new decisions
    MetaScheduleSearch(task, model, strategy="evolutionary" | "replay")  # batches of programs to measure
    Database("tuning.db")                         # commit_workload / commit_tuning_record / get_top_k
"""
