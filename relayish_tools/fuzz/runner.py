"""Running mutants in child processes: a small pool of workers, each running many mutants, restarted after a
crash or a hang.

A worker is a spawned process (it shares no state with the parent) with an address-space limit (RLIMIT_AS) that
imports onnxruntime and relayish once and then, per job, runs the mutant through onnxruntime (1 thread) and
through relayish (`compile_model` + `run`, 1 thread) on the same seeded inputs, and sends back both `Outcome`s.
Before each side it tells the parent which side it is in, so that when it dies (a signal, an exit) or passes the
time limit, the parent knows whose fault it was: it kills the worker, starts a new one, and
- if relayish was running: records a CRASH or HANG for this mutant;
- if onnxruntime was running: records onnxruntime as rejecting the mutant and runs the mutant again on relayish
  alone in the new worker.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait

import numpy as np

from .verdict import Outcome, nonfinite_disagreement

MAX_FEED_ELEMENTS = 1 << 22  # larger inputs are not fed: both sides only build the model


@dataclass
class Job:
    index: int
    model: bytes
    feed_seed: int
    ort: Outcome | None = None  # set when onnxruntime already failed (crashed or hung) on this mutant


def model_feeds(model_bytes: bytes, seed: int) -> dict | str:
    """Seeded float32 inputs for the graph's non-initializer inputs (symbolic/unknown dims as 1), or why none
    can be made."""
    import onnx
    try:
        model = onnx.load_from_string(model_bytes)
    except Exception as e:  # noqa: BLE001  (protobuf's DecodeError): both sides will reject it too
        return f"unparseable model ({type(e).__name__})"
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits or vi.name in feeds:
            continue
        if not vi.type.tensor_type.HasField("shape"):
            return f"input {vi.name!r} has no shape"
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.float64)) > MAX_FEED_ELEMENTS:
            return f"input {vi.name!r} of shape {shape} is too large to feed"
        feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _error(e: BaseException) -> Outcome:
    frames = traceback.extract_tb(e.__traceback__)
    raised_in = ""
    if frames:
        path = os.path.relpath(frames[-1].filename, _ROOT)
        raised_in = path.replace(os.sep, ".").removesuffix(".py") if not path.startswith("..") else path
    return Outcome(error_type=type(e).__name__, error_module=type(e).__module__, raised_in=raised_in,
                   message=" ".join(str(e).split())[:2000])


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_ort(ort, model: bytes, feeds) -> Outcome:
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.log_severity_level = 4
        sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        if isinstance(feeds, str):
            return Outcome(outputs=[], message=feeds)
        return Outcome(outputs=sess.run(None, feeds))
    except Exception as e:  # onnxruntime's errors: a rejection whatever their type
        return _error(e)


def _run_ours(compile_model, model: bytes, feeds) -> Outcome:
    try:
        sess = compile_model(model, num_threads=1)
        if isinstance(feeds, str):
            return Outcome(outputs=[], message=feeds)
        return Outcome(outputs=sess.run(None, feeds))
    except Exception as e:  # noqa: BLE001  (any error is an outcome; verdict.py judges its clarity)
        return _error(e)


def _run_reference(model: bytes, feeds) -> list | None:
    """onnx's reference implementation's outputs (the arbiter of non-finite arithmetic), None if it fails."""
    try:
        import onnx
        from onnx.reference import ReferenceEvaluator
        return list(ReferenceEvaluator(onnx.ModelProto.FromString(model)).run(None, feeds))
    except Exception:  # noqa: BLE001 - the reference refusing the model leaves the disagreement a WRONG
        return None


def _worker_main(conn, memory_bytes: int, before_ours=None):
    """Run jobs from conn until None arrives: ('phase', side[, onnxruntime's outcome]) before each side,
    ('done', onnxruntime's outcome, ours) after. before_ours(job), if given, runs just before our side (tests
    use it to crash or hang a worker on purpose)."""
    import resource
    import warnings
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    warnings.simplefilter("ignore")
    import onnxruntime as ort
    ort.set_default_logger_severity(4)
    from compiler import compile_model
    while (job := conn.recv()) is not None:
        feeds = model_feeds(job.model, job.feed_seed)
        ort_outcome = job.ort
        if ort_outcome is None:
            conn.send(("phase", "onnxruntime"))
            ort_outcome = _run_ort(ort, job.model, feeds)
        conn.send(("phase", "relayish", ort_outcome))
        if before_ours is not None:
            before_ours(job)
        ours = _run_ours(compile_model, job.model, feeds)
        if ours.ran and ort_outcome.ran and nonfinite_disagreement(ours.outputs, ort_outcome.outputs):
            ours.reference = _run_reference(job.model, feeds)
        conn.send(("done", ort_outcome, ours))


class _Worker:
    def __init__(self, ctx, memory_bytes: int, before_ours=None):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, memory_bytes, before_ours), daemon=True)
        self.process.start()
        child.close()
        self.job: Job | None = None
        self.phase = ""
        self.deadline = 0.0

    def stop(self, kill: bool = False):
        if kill:
            self.process.kill()
        else:
            try:
                self.conn.send(None)
            except OSError:
                pass
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


def _death(process, timed_out: bool, timeout_s: float) -> str:
    if timed_out:
        return f"hang: no answer within {timeout_s:.0f} s"
    code = process.exitcode
    return f"crash: signal {-code}" if code is not None and code < 0 else f"crash: exit code {code}"


def run_jobs(jobs, on_result, workers: int = 2, timeout_s: float = 60.0, memory_bytes: int = 4 << 30,
             before_ours=None):
    """Run every Job on a pool of `workers`; on_result(job, ort_outcome, our_outcome) for each, in completion
    order. Returns how many workers had to be restarted. before_ours: see _worker_main (a picklable function)."""
    ctx = mp.get_context("spawn")
    pending = list(jobs)[::-1]
    pool = [_Worker(ctx, memory_bytes, before_ours) for _ in range(workers)]
    restarts = 0
    try:
        while pending or any(w.job for w in pool):
            for w in pool:
                if w.job is None and pending:
                    w.job, w.phase = pending.pop(), "sent"
                    w.deadline = time.monotonic() + timeout_s
                    w.conn.send(w.job)
            busy = [w for w in pool if w.job]
            ready = wait([w.conn for w in busy], timeout=max(0.0, min(w.deadline for w in busy) - time.monotonic()))
            for k, w in enumerate(pool):
                if w.job is None:
                    continue
                died = ""
                if w.conn in ready:
                    try:
                        message = w.conn.recv()
                    except (EOFError, OSError):
                        w.process.join(5)
                        died = _death(w.process, False, timeout_s)
                    else:
                        if message[0] == "phase":
                            w.phase = message[1]
                            if len(message) > 2:
                                w.job.ort = message[2]
                        else:
                            on_result(w.job, message[1], message[2])
                            w.job = None
                        continue
                elif time.monotonic() >= w.deadline:
                    died = _death(w.process, True, timeout_s)
                else:
                    continue
                job, phase = w.job, w.phase
                w.stop(kill=True)
                pool[k] = _Worker(ctx, memory_bytes, before_ours)
                restarts += 1
                if phase == "onnxruntime":  # not our fault: run ours alone in the new worker
                    pending.append(Job(job.index, job.model, job.feed_seed,
                                       Outcome(error_type="WorkerDied", message=f"onnxruntime {died}")))
                else:
                    on_result(job, job.ort or Outcome(outputs=[]), Outcome(died=died))
    finally:
        for w in pool:
            w.stop()
    return restarts
