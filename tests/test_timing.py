"""The timing loops of runtime/timing.py with fake engines: who runs when, how many samples, which statistics. No
assertion on how long anything takes."""
import os

import numpy as np
import pytest

from runtime import timing


def recording_engines(names, log):
    """Engines whose run() and after() append to `log`."""
    return [timing.Engine(n, lambda n=n: log.append(n), after=lambda n=n: log.append(f"{n}.after")) for n in names]


def test_steady_blocks_alternate_engines_with_a_gap_before_each_block():
    log = []
    stats = timing.time_blocks(recording_engines("ab", log), repeat=25, warmup=3, block=10,
                               sleep=lambda s: log.append(f"sleep {s}"), idle_gap_s=0.05)
    turns = []  # (engine, calls) between consecutive sleeps
    for item in log:
        if item.startswith("sleep"):
            turns.append([])
        else:
            turns[-1].append(item)
    expected_calls = [3, 11, 11, 6]  # warm-up, then 1 untimed lead + 10, 10 and 5 timed
    assert [t[-1] for t in turns] == ["a.after", "b.after"] * 4
    assert [len(t) - 1 for t in turns] == [c for c in expected_calls for _ in "ab"]
    assert all(set(t[:-1]) == {t[-1][0]} for t in turns)  # a block runs one engine only
    assert log.count("sleep 0.05") == 8
    assert list(stats) == ["a", "b"] and all(s["repeat"] == 25 for s in stats.values())


def test_steady_without_warmup_or_lead_and_with_bursts():
    calls = []
    engine = timing.Engine("k", lambda: calls.append(1), calls=3)
    stats = timing.time_blocks([engine], repeat=4, warmup=0, block=3, lead=0, sleep=lambda s: None)
    assert len(calls) == 4 * 3 and stats["k"]["repeat"] == 4


def test_steady_keeps_each_blocks_median_as_a_round(monkeypatch):
    durations = iter([3.0, 1.0, 2.0, 10.0, 30.0, 20.0, 7.0, 5.0, 9.0])  # seconds, in the order the samples are taken
    monkeypatch.setattr(timing, "time_burst", lambda run, calls: next(durations))
    stats = timing.time_blocks([("a", lambda: None)], repeat=9, warmup=0, block=3, lead=0, sleep=lambda s: None)
    assert stats["a"]["rounds_ms"] == [2000.0, 20000.0, 7000.0]
    strict = iter([4.0, 1.0, 2.0])
    monkeypatch.setattr(timing, "time_burst", lambda run, calls: next(strict))
    stats = timing.time_alternating([("a", lambda: None)], repeat=3, warmup=0, idle_gap_s=0)
    assert stats["a"]["rounds_ms"] == [4000.0, 1000.0, 2000.0]


def test_paired_ratio_cancels_a_machine_whose_speed_drifts_between_rounds():
    """Both engines of a round share the machine's speed of the moment (here anywhere in 1x-2x), b takes 0.95 of
    a's time plus 1% noise of its own: round by round the drift cancels; the interval holds the true ratio."""
    rng = np.random.default_rng(0)
    speed = rng.uniform(1.0, 2.0, size=12)
    a = {"rounds_ms": list(10.0 * speed * rng.normal(1.0, 0.01, 12))}
    b = {"rounds_ms": list(9.5 * speed * rng.normal(1.0, 0.01, 12))}
    p = timing.paired_ratio(b, a)
    assert p["rounds"] == 12 and p["low"] <= 0.95 <= p["high"] and abs(p["ratio"] - 0.95) < 0.01
    assert p["high"] - p["low"] < 0.03
    assert timing.paired_ratio(a, a) == {"ratio": 1.0, "low": 1.0, "high": 1.0, "rounds": 12}
    with pytest.raises(ValueError, match="same number of rounds"):
        timing.paired_ratio(a, {"rounds_ms": [1.0]})


@pytest.mark.parametrize("kwargs", [dict(repeat=0, warmup=0), dict(repeat=1, warmup=-1), dict(repeat=1, warmup=0,
                                                                                              block=0)])
def test_steady_rejects_bad_counts(kwargs):
    with pytest.raises(ValueError):
        timing.time_blocks([("a", lambda: None)], sleep=lambda s: None, **kwargs)


def test_time_engines_dispatches_on_the_mode(monkeypatch):
    seen = []
    monkeypatch.setattr(timing, "time_blocks", lambda *a, **k: seen.append("steady"))
    monkeypatch.setattr(timing, "time_alternating", lambda *a, **k: seen.append("strict"))
    timing.time_engines([], "steady", 1, 0)
    timing.time_engines([], "strict", 1, 0)
    assert seen == ["steady", "strict"]
    with pytest.raises(ValueError, match="timing mode must be one of"):
        timing.time_engines([], "fast", 1, 0)
    assert "steady" in timing.describe_timing("steady", 30, 5) and "strict" in timing.describe_timing("strict", 30, 5)


def test_latency_stats_has_percentiles():
    ns = np.arange(1, 101) * 1e6  # 1..100 ms
    s = timing.latency_stats(ns)
    assert s["median_ms"] == s["p50_ms"] == pytest.approx(50.5)
    assert s["p90_ms"] == pytest.approx(90.1) and s["p95_ms"] == pytest.approx(95.05)
    assert s["p99_ms"] == pytest.approx(99.01) and s["min_ms"] == 1 and s["max_ms"] == 100 and s["repeat"] == 100


def test_time_repeats_means_number_calls_per_repeat():
    calls = []
    means = timing.time_repeats(lambda: calls.append(1), repeat=3, number=4,
                                clock=lambda: float(len(calls)))  # the clock counts calls: 4 per repeat
    assert means == [1.0, 1.0, 1.0] and len(calls) == 12
    with pytest.raises(ValueError, match="number >= 1"):
        timing.time_repeats(lambda: None, repeat=1, number=0)


def test_a_spinning_thread_counts_as_runnable_however_little_cpu_it_gets():
    """idle_wait's second test of quiet: another thread of the process in state R (running, or waiting for a core
    other processes hold) is seen; once it has ended the process settles to none."""
    import threading
    import time
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc on this host: idle_wait judges by the CPU clock alone")
    stop = threading.Event()
    spinner = threading.Thread(target=lambda: [None for _ in iter(stop.is_set, True)])
    spinner.start()
    try:
        assert timing._others_runnable()
    finally:
        stop.set()
        spinner.join()
    deadline = time.perf_counter() + 2.0
    while timing._others_runnable() and time.perf_counter() < deadline:  # (a library's workers settling)
        time.sleep(0.01)
    assert not timing._others_runnable()


def test_idle_wait_outlasts_a_thread_that_still_spins():
    """An engine's workers spinning after its run (onnxruntime's, ~60 ms) must not overlap the next sample:
    idle_wait returns only once no thread of the process uses the CPU. The spinner runs 0.4 s, far longer than
    the 0.01 s gap; the bounds are loose (this checks who waits for whom, not how fast anything runs)."""
    import threading
    import time
    end = time.perf_counter() + 0.4

    def spin():
        while time.perf_counter() < end:
            pass
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        timing.idle_wait(0.01)
        assert time.perf_counter() >= end - 0.05
    finally:
        spinner.join()
    t0 = time.perf_counter()
    timing.idle_wait(0.0)  # no gap: no wait at all (the fake engines of the tests above)
    assert time.perf_counter() - t0 < 0.005
