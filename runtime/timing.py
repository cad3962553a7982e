"""Timing: back-to-back calls, and several engines timed in turn with idle gaps, in one of two modes (TIMING_MODES):

- steady (time_blocks, the default of `relayish bench`): each engine runs a block of consecutive calls, the engines
  take turns block by block with an idle gap before each block, and the first call of a block is not timed. This
  is how a served model runs: call after call, warm.
- strict (time_alternating): one call per turn, an idle gap before every call. Each timed call wakes its engine from
  idle (thread pools asleep, clock down), which inflates small models by 30-40% for onnxruntime and for us.

Why rotate (a, b, a, b, ...) instead of timing one engine then the other: the machine drifts (clock boost, other
load), and rotation spreads any drift evenly over every engine. Before each turn the process sleeps an idle gap,
so that no engine is timed while another's thread pool still spins on the cores (onnxruntime's workers spin for
40-60 ms after a run; timing straight after them halves our speed on 2 cores, and ours would do the same to
theirs), and then waits until the process's CPU clock shows no thread still spinning (idle_wait). A sample is
the median call of a burst of `calls` back-to-back calls (one call for a whole model; a burst for a kernel, whose
first calls after an idle gap run while the clock ramps up and the caches refill).

Everything here is a pure function of the callables it is given and of the clock: the model benchmark, the kernel
benchmark and the cost model's dataset harness all time with it. Statistics carry P50/P90/P95/P99 besides
median/mean/min/max/std (latency_stats).
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .profiling import summarize_times

TIMING_MODES = ("steady", "strict")  # the first is the default
BLOCK_RUNS = 5  # timed calls per block in the steady mode: 50 runs give paired_ratio 10 rounds (with 10: 5)
PERCENTILES = (50, 90, 95, 99)
IDLE_GAP_S = 0.05  # before each sample, at least: onnxruntime's workers spin 40-60 ms after a run (idle_wait)
QUIET_WINDOW_S = 0.01  # then wait, window by window, until this process's threads are quiet (idle_wait)
QUIET_CORES = 0.2  # "quiet": less than this fraction of one core used by the process over a window
MAX_SETTLE_S = 1.0  # never wait longer than this for quiet after the gap
OTHERS_MAX_JIFFIES = 2  # CPU time (1/100 s) other processes may take during one sample's gap + burst


@dataclass(frozen=True)
class Engine:
    """One thing to time: `run()` is one call; a sample is the median of `calls` back-to-back calls; `after()`
    (if given) runs after each sample, untimed (e.g. to let our thread pool go idle)."""
    name: str
    run: Callable[[], object]
    calls: int = 1
    after: Callable[[], object] | None = None


def time_calls(run, min_calls: int, min_seconds: float = 0.0, max_calls: int | None = None,
               clock=time.perf_counter) -> list[float]:
    """Seconds of each of back-to-back calls of run(): at least min_calls, more while their total is under
    min_seconds (but never more than max_calls). `clock` may be time.process_time (CPU time of this process)."""
    times, total = [], 0.0
    while len(times) < min_calls or (total < min_seconds and (max_calls is None or len(times) < max_calls)):
        t0 = clock()
        run()
        dt = clock() - t0
        times.append(dt)
        total += dt
    return times


def time_burst(run, calls: int) -> float:
    """Median seconds of one call over a burst of `calls` back-to-back calls. The median, not the mean: after an
    idle gap the first calls of a burst run while the core's clock ramps up and its caches refill (seen here: the
    first call of a 0.6 ms conv at 60% of the speed of the fifth)."""
    return float(np.median(time_calls(run, calls)))


def burst_calls(run, seconds: float, min_calls: int) -> int:
    """How many back-to-back calls of run() last about `seconds`, and at least min_calls (runs it a few times)."""
    run()
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < seconds / 4 or n < 2:
        run()
        n += 1
    per_call = (time.perf_counter() - t0) / n
    return max(min_calls, round(seconds / per_call))


def cpu_jiffies() -> tuple[int, int]:
    """(busy jiffies of the whole machine, jiffies of this process) from /proc (Linux): their difference over a
    window is the CPU time other processes (or the hypervisor, as steal) took in it."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    with open("/proc/self/stat") as f:
        own = f.read().rsplit(")", 1)[1].split()
    return sum(fields) - fields[3] - fields[4], int(own[11]) + int(own[12])


class QuietCheck:
    """`with QuietCheck() as q: take_a_sample()`, then q.quiet: other processes (or the hypervisor, as steal) took
    at most OTHERS_MAX_JIFFIES of CPU meanwhile. jiffies: the (machine busy, own) reader (cpu_jiffies; tests pass
    a fake), or None for no check (always quiet, /proc not read)."""

    def __init__(self, jiffies=cpu_jiffies):
        self.jiffies = jiffies
        self.quiet = True

    def __enter__(self) -> "QuietCheck":
        self.start = self.jiffies() if self.jiffies is not None else (0, 0)
        return self

    def __exit__(self, *exc) -> None:
        if self.jiffies is not None:
            (busy0, own0), (busy1, own1) = self.start, self.jiffies()
            self.quiet = (busy1 - busy0) - (own1 - own0) <= OTHERS_MAX_JIFFIES


def idle_wait(gap_s: float, window_s: float = QUIET_WINDOW_S, quiet: float = QUIET_CORES,
              max_settle_s: float = MAX_SETTLE_S) -> None:
    """Sleep gap_s, then until this process's threads use less than `quiet` of a core over a window of window_s
    and none but the caller is runnable (at most max_settle_s more). A fixed gap is not enough everywhere: onnxruntime's workers spin ~60 ms after a
    run on a Zen 3 (40 ms on a Xeon), and a 2-thread kernel timed while one of them spins runs at half speed:
    bench.op_table measured our 3x3 convolutions 25-40% slow when they followed onnxruntime after 50 ms.
    The process's CPU clock counts every thread's time, so it sees any engine's workers, whoever made them.
    gap_s <= 0: no wait at all (tests)."""
    if gap_s <= 0:
        return
    time.sleep(gap_s)
    deadline = time.perf_counter() + max_settle_s
    while time.perf_counter() < deadline:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        time.sleep(window_s)
        if time.process_time() - cpu0 < quiet * (time.perf_counter() - wall0) and not _others_runnable():
            return


def _others_runnable() -> bool:
    """Whether another thread of this process is running or waiting for a core (state R in /proc; False where
    there is no /proc). A spinning thread that other processes starve uses little CPU over a window but is still
    runnable: the CPU clock alone would call the process quiet while it waits for a core."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    for tid in tids:
        if tid == str(me):
            continue
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                if f.read().rpartition(")")[2].split()[0] == "R":
                    return True
        except (OSError, IndexError):  # (a thread that ended meanwhile)
            continue
    return False


def latency_stats(times_ns) -> dict:
    """summarize_times (median/mean/min/max/std in ms, repeat) plus p50_ms, p90_ms, p95_ms, p99_ms (numpy's
    linear interpolation between the nearest samples)."""
    stats = summarize_times(times_ns)
    ms = np.asarray(times_ns, dtype=np.float64) / 1e6
    stats.update({f"p{q}_ms": float(np.percentile(ms, q)) for q in PERCENTILES})
    return stats


def time_repeats(run, repeat: int, number: int, clock=time.perf_counter) -> list[float]:
    """tvmc's --repeat/--number: `repeat` measurements, each the mean seconds of `number` back-to-back calls."""
    if repeat < 1 or number < 1:
        raise ValueError(f"timing needs repeat >= 1 and number >= 1, got repeat={repeat}, number={number}")
    means = []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(number):
            run()
        means.append((clock() - t0) / number)
    return means


def _as_engine(engine) -> Engine:
    return engine if isinstance(engine, Engine) else Engine(*engine)


def time_alternating(engines, repeat: int, warmup: int, idle_gap_s: float = IDLE_GAP_S, max_retakes: int = 0,
                     stats: dict | None = None) -> dict[str, dict]:
    """Time engines in strict rotation: `warmup` rounds, then `repeat` rounds, each round taking one sample of
    every engine in the given order, each sample preceded by idle_wait(idle_gap_s). Warm-up rounds are taken like
    the others and dropped.

    engines: Engine objects or (name, zero-argument callable) pairs. max_retakes > 0: a sample during whose gap
    and burst other processes took more than OTHERS_MAX_JIFFIES of CPU is taken again, up to max_retakes times
    (on a shared 2-core machine one busy neighbour halves a 2-thread kernel); `stats` then gets "retaken"
    (samples taken again) and "noisy" (samples kept although disturbed). Returns {name: latency_stats(...) of
    the kept samples and "rounds_ms", the samples themselves, one per round (paired_ratio)}, in the engines'
    order."""
    engines = _checked_engines(engines, repeat, warmup)
    names = [e.name for e in engines]
    samples: dict[str, list[float]] = {name: [] for name in names}
    retaken = noisy = 0
    for k in range(warmup + repeat):
        for e in engines:
            for attempt in range(max_retakes + 1):
                with QuietCheck(cpu_jiffies if max_retakes else None) as check:
                    idle_wait(idle_gap_s)
                    dt = time_burst(e.run, e.calls)
                    if e.after is not None:
                        e.after()
                if check.quiet or attempt == max_retakes:
                    break
                retaken += 1
            if k >= warmup:
                samples[e.name].append(dt)
                noisy += not check.quiet
    if stats is not None:
        stats.update(retaken=retaken, noisy=noisy)
    return {name: dict(latency_stats(np.asarray(s) * 1e9), rounds_ms=[t * 1e3 for t in s])
            for name, s in samples.items()}


def paired_ratio(a: dict, b: dict, confidence: float = 0.9, resamples: int = 2000, seed: int = 0) -> dict:
    """Engine a's latency over engine b's, round by round: the stats of time_blocks / time_alternating carry
    `rounds_ms`, each engine's median per round of the rotation (one block each in the steady mode, one call each
    in the strict mode). The two engines of a round ran within a second of each other, in the same phase of a
    shared machine, so the round's ratio cancels the phase that a ratio of overall medians does not: on this
    2-core VM the machine's speed moves by 25% over minutes (the measured FMA peak read 134 and 186 GFLOP/s a
    minute apart), enough to decide which engine's blocks a slow phase hits. Returns {"ratio": the median of the
    rounds' ratios, "low", "high": a bootstrap `confidence` interval of that median (resampling rounds), "rounds"}.
    """
    ra, rb = np.asarray(a["rounds_ms"], dtype=np.float64), np.asarray(b["rounds_ms"], dtype=np.float64)
    if len(ra) != len(rb) or len(ra) == 0:
        raise ValueError(f"paired_ratio needs the same number of rounds (> 0) for both engines, got {len(ra)} and "
                         f"{len(rb)}")
    ratios = ra / rb
    picks = np.random.default_rng(seed).integers(0, len(ratios), size=(resamples, len(ratios)))
    medians = np.median(ratios[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    return {"ratio": float(np.median(ratios)), "low": float(np.percentile(medians, tail)),
            "high": float(np.percentile(medians, 100 - tail)), "rounds": len(ratios)}


def format_paired(p: dict, digits: int = 3) -> str:
    """A paired_ratio result as "ratio [low-high]" with `digits` decimals, as the reports print it."""
    return f"{p['ratio']:.{digits}f} [{p['low']:.{digits}f}-{p['high']:.{digits}f}]"


def _checked_engines(engines, repeat: int, warmup: int) -> list[Engine]:
    if repeat < 1 or warmup < 0:
        raise ValueError(f"timing needs repeat >= 1 and warmup >= 0, got repeat={repeat}, warmup={warmup}")
    engines = [_as_engine(e) for e in engines]
    names = [e.name for e in engines]
    if len(set(names)) != len(names):
        raise ValueError(f"engine names must be unique, got {names}")
    return engines


def time_blocks(engines, repeat: int, warmup: int, block: int = BLOCK_RUNS, idle_gap_s: float = IDLE_GAP_S,
                lead: int = 1, sleep=idle_wait) -> dict[str, dict]:
    """Steady state: the engines take turns block by block, in the given order, each block preceded by
    `sleep(idle_gap_s)` (idle_wait: the gap, then until no thread of the process spins) and followed by the
    engine's `after()`. A warm-up turn first gives each engine `warmup` untimed calls; then every block is `lead`
    untimed calls (the wake-up after the gap) and `block` timed samples, the last block fewer, until each engine
    has exactly `repeat` samples. A sample is time_burst(run, calls).

    engines: Engine objects or (name, zero-argument callable) pairs. Returns {name: latency_stats(...) and
    "rounds_ms", the median of each of its blocks (paired_ratio)} in the engines' order."""
    engines = _checked_engines(engines, repeat, warmup)
    if block < 1 or lead < 0:
        raise ValueError(f"time_blocks needs block >= 1 and lead >= 0, got block={block}, lead={lead}")
    samples: dict[str, list[float]] = {e.name: [] for e in engines}
    rounds: dict[str, list[float]] = {e.name: [] for e in engines}  # each block's median (ms), block by block
    turns = [(warmup, 0)] if warmup else []
    turns += [(lead, min(block, repeat - start)) for start in range(0, repeat, block)]
    for untimed, timed in turns:
        for e in engines:
            sleep(idle_gap_s)
            for _ in range(untimed):
                e.run()
            block_samples = [time_burst(e.run, e.calls) for _ in range(timed)]
            samples[e.name] += block_samples
            if block_samples:
                rounds[e.name].append(float(np.median(block_samples)) * 1e3)
            if e.after is not None:
                e.after()
    return {name: dict(latency_stats(np.asarray(s) * 1e9), rounds_ms=rounds[name]) for name, s in samples.items()}


def time_engines(engines, mode: str, repeat: int, warmup: int, idle_gap_s: float = IDLE_GAP_S,
                 block: int = BLOCK_RUNS) -> dict[str, dict]:
    """time_blocks (mode "steady") or time_alternating (mode "strict") of the engines."""
    if mode == "steady":
        return time_blocks(engines, repeat, warmup, block, idle_gap_s)
    if mode == "strict":
        return time_alternating(engines, repeat, warmup, idle_gap_s)
    raise ValueError(f"timing mode must be one of {TIMING_MODES}, got {mode!r}")


def describe_timing(mode: str, repeat: int, warmup: int, block: int = BLOCK_RUNS) -> str:
    """One line saying how the engines were timed."""
    if mode == "steady":
        return (f"timing steady: blocks of {block} consecutive runs per engine (the first run of each block "
                f"untimed), engines alternating block by block with an idle gap, {repeat} timed runs each after "
                f"{warmup} warm-up runs")
    return (f"timing strict: {repeat} alternating runs, an idle gap before each, after {warmup} warm-up runs "
            f"each")
