"""A fork/join thread pool written in LLVM IR, emitted into every compiled module.

Exported C API (all in the module, so a compiled model needs no runtime library besides libc):

    void relayish_parallel_for(void (*fn)(i8* closure, i32 task, i32 ntasks), i8* closure, i32 ntasks)
    void relayish_set_num_threads(i32 n)    n < 1 is taken as 1; 1 = the caller runs everything
    i32  relayish_get_num_threads(void)     default sysconf(_SC_NPROCESSORS_ONLN), read at first use
    void relayish_pool_idle(void)           workers stop spinning and sleep now
    void relayish_pool_linger(void)         workers spin LINGER_CYCLES more, then sleep (the end of a run)

Jobs. Workers are pthreads created lazily by the first parallel call that needs them. A job is published by
writing its fields and `claim` = gen << 32 (the next task to take is 0), then bumping the generation counter `gen`
(seq_cst). The job's fields, `gen` and the idle state share one cache line (the `job` struct), so a spinning worker
takes one cache miss per job, not one per field. The caller and the workers with index < P = min(threads, ntasks)
take tasks one at a time, each with a compare-and-swap of `claim` from (gen, t) to (gen, t + 1), and count each
task they finish in `done`; the caller, after taking what is left, waits until `done` is ntasks. So a worker the
kernel has not scheduled (another process holds its core) holds nothing up: its tasks are taken by whoever runs,
and the caller waits only for tasks in progress. A successful claim proves the job is not finished, so the job's
fields cannot change while its task runs; a worker that is late (it read `gen` of a job since finished) finds the
claim word's generation changed and takes nothing. Job fields are read and written atomically (monotonic): a late
worker may read them while the caller writes the next job's.

Waiting. A worker waits for a new generation by spinning with `pause` for SPIN_CYCLES of the cycle counter, then
sleeps on the futex `gen`. `idle_at` says which: 0 while a run goes on; relayish_pool_linger (the executor's last
call) sets it to the cycle counter, and workers then spin until LINGER_CYCLES after it, so that a model called
back to back (a served model, a benchmark) finds them awake instead of paying a futex wake-up per run (~20 us on
this KVM guest) and the pool still stops spinning soon after a run; relayish_pool_idle sets it to a time long past
(workers sleep at once). A sleeper counts itself in `sleepers` before
its last look at `gen`, and the caller issues FUTEX_WAKE only when that count is non-zero: a hot pool makes no
system call per job. Spinners (workers and the waiting caller) call sched_yield every YIELD_CYCLES, in case the
kernel put two of them on one core.

Placement. Linux (seen on this KVM guest) often wakes a futex sleeper onto the waker's own core and then leaves both
there: 50 fork/joins took 3.4x the time of a pinned pool. So worker w is pinned to a CPU of the process's affinity
mask other than the caller's current CPU, and when the caller is seen on another CPU (checked at every job with
rdpid, or getcpu) a worker pinned there swaps onto the caller's old CPU (it re-pins itself when it takes the job).
The caller's own affinity is never changed.

Reentrancy. A caller first takes the `busy` flag with cmpxchg; if it is taken (a call from inside a task, or a
concurrent call from another thread) the call runs its tasks serially on the calling thread: concurrent callers
are safe but not parallel. relayish_set_num_threads must not race with a running job. After fork() the child's pool
is reset (pthread_atfork): its workers do not exist there. The library must never be unloaded while its workers
live (they sleep inside its code).
"""
from __future__ import annotations

from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
VOID = ir.VoidType()
I8P = I8.as_pointer()
TASK_FN_TYPE = ir.FunctionType(VOID, [I8P, I32, I32])
TASK_FN_PTR = TASK_FN_TYPE.as_pointer()

SPIN_CYCLES = 1 << 21  # cycle-counter ticks a worker spins before sleeping (~0.8 ms at 2.6 GHz)
LINGER_CYCLES = 1 << 18  # ... after the end of a run (~0.1 ms): the Python work between two runs is ~6 us
IDLE_NOW = 1  # idle_at of relayish_pool_idle: a cycle count long past
YIELD_CYCLES = 1 << 15  # a spinner calls sched_yield this often (~12 us)
SC_NPROCESSORS_ONLN = 84
MAX_THREADS = 256
MASK_WORDS = 16  # a cpu_set_t of 1024 CPUs as 64-bit words
NO_CPU = -1
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129
_SYSCALLS = {
    "x86_64": dict(futex=202, sched_yield=24, sched_setaffinity=203, sched_getaffinity=204, getcpu=309),
    "aarch64": dict(futex=98, sched_yield=124, sched_setaffinity=122, sched_getaffinity=123, getcpu=168),
}

API = {
    "relayish_parallel_for": ir.FunctionType(VOID, [TASK_FN_PTR, I8P, I32]),
    "relayish_set_num_threads": ir.FunctionType(VOID, [I32]),
    "relayish_get_num_threads": ir.FunctionType(I32, []),
    "relayish_pool_idle": ir.FunctionType(VOID, []),
    "relayish_pool_linger": ir.FunctionType(VOID, []),
}
# The job's cache line: generation, task count, participants, function, closure, idle state (module doc).
JOB_FIELDS = ("gen", "ntasks", "parts", "pad", "fn", "closure", "idle_at")
JOB_TYPE = ir.LiteralStructType([I32, I32, I32, I32, TASK_FN_PTR, I8P, I64])


def _get_or_declare(module: ir.Module, name: str, fnty: ir.FunctionType) -> ir.Function:
    fn = module.globals.get(name)
    return fn if fn is not None else ir.Function(module, fnty, name)


def declare_api(module: ir.Module) -> dict:
    """The pool's exported functions in `module` (declared if not yet there), by name."""
    return {name: _get_or_declare(module, name, fnty) for name, fnty in API.items()}


def _loop(b: ir.IRBuilder, start, stop, step=None, name="k"):
    """Yield-once helper: `for k in range(start, stop, step)` as a phi loop (i32); the body is emitted by the
    caller between next() calls -- used as `for k in _loop(...)`."""
    pre = b.block
    head, body, end = (b.append_basic_block(f"{name}.{s}") for s in ("head", "body", "end"))
    b.branch(head)
    b.position_at_end(head)
    k = b.phi(I32, name)
    k.add_incoming(start, pre)
    b.cbranch(b.icmp_signed("<", k, stop), body, end)
    b.position_at_end(body)
    yield k
    k.add_incoming(b.add(k, step if step is not None else I32(1)), b.block)
    b.branch(head)
    b.position_at_end(end)


class _Pool:
    """Emission of the pool: globals, libc declarations and the function bodies."""

    def __init__(self, module: ir.Module, arch: str, features: str):
        if arch not in _SYSCALLS:
            raise NotImplementedError(f"codegen: thread pool has no syscall numbers for architecture {arch!r}")
        self.m, self.arch, self.sys = module, arch, _SYSCALLS[arch]
        self.has_rdpid = arch == "x86_64" and "+rdpid" in features.split(",")
        self.api = declare_api(module)
        g = self.global_
        self.nthreads, self.nworkers, self.busy = g("nthreads", I32), g("nworkers", I32), g("busy", I32)
        job = g("job", JOB_TYPE)
        field = {name: job.gep([I32(0), I32(k)]) for k, name in enumerate(JOB_FIELDS)}
        self.gen, self.job_ntasks, self.job_parts = field["gen"], field["ntasks"], field["parts"]
        self.job_fn, self.job_closure, self.idle_at = field["fn"], field["closure"], field["idle_at"]
        self.done, self.sleepers, self.atfork_done = g("done", I32), g("sleepers", I32), g("atfork", I32)
        self.claim = g("claim", I64)  # (generation << 32) | the next task to take (module doc)
        self.worker_cpu = g("worker_cpu", ir.ArrayType(I32, MAX_THREADS + 1))  # by worker index (1-based)
        self.pin_epoch, self.caller_cpu = g("pin_epoch", I32), g("caller_cpu", I32)
        self.syscall = _get_or_declare(module, "syscall", ir.FunctionType(I64, [I64], var_arg=True))
        self.sysconf = _get_or_declare(module, "sysconf", ir.FunctionType(I64, [I32]))
        start_ty = ir.FunctionType(I8P, [I8P]).as_pointer()
        self.pthread_create = _get_or_declare(module, "pthread_create",
                                              ir.FunctionType(I32, [I64.as_pointer(), I8P, start_ty, I8P]))
        hook = ir.FunctionType(VOID, []).as_pointer()
        self.pthread_atfork = _get_or_declare(module, "pthread_atfork", ir.FunctionType(I32, [hook, hook, hook]))

    def global_(self, name, ty):
        gv = ir.GlobalVariable(self.m, ty, f"relayish_pool.{name}")
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ty, None)
        gv.align = 64  # a cache line each: spinning readers of gen do not share a line with the written done
        return gv

    def function(self, name, fnty, exported=False):
        fn = self.api.get(name) or ir.Function(self.m, fnty, name)
        if not exported:
            fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        return fn, ir.IRBuilder(fn.append_basic_block("entry"))

    # ------------------------------------------------------------------ small emitters

    def call_sys(self, b, name, *args):
        return b.call(self.syscall, [I64(self.sys[name]), *args])

    def pause(self, b):
        if self.arch == "x86_64":
            b.call(_get_or_declare(self.m, "llvm.x86.sse2.pause", ir.FunctionType(VOID, [])), [])
        else:
            b.asm(ir.FunctionType(VOID, []), "yield", "", [], side_effect=True)

    def cycles(self, b):
        """The CPU's cycle counter (rdtsc on x86-64): a cheap clock for bounding spin loops."""
        return b.call(_get_or_declare(self.m, "llvm.readcyclecounter", ir.FunctionType(I64, [])), [])

    def current_cpu(self, b):
        """The CPU this thread runs on: rdpid (Linux keeps the CPU number in TSC_AUX bits 0-11) or getcpu."""
        if self.has_rdpid:
            aux = b.call(_get_or_declare(self.m, "llvm.x86.rdpid", ir.FunctionType(I32, [])), [])
            return b.and_(aux, I32(0xFFF))
        slot = b.alloca(I32)
        b.store(I32(0), slot)
        self.call_sys(b, "getcpu", slot, ir.Constant(I8P, None), ir.Constant(I8P, None))
        return b.load(slot)

    def cpu_mask(self, b):
        mask = b.alloca(ir.ArrayType(I64, MASK_WORDS))
        b.store(ir.Constant(mask.type.pointee, None), mask)
        return mask

    def mask_word(self, b, mask, cpu):
        return b.gep(mask, [I32(0), b.lshr(cpu, I32(6))])

    def pin_self(self, b, cpu, mask):
        """Pin the calling thread to `cpu` (NO_CPU: leave it); a failing syscall leaves it unpinned.
        `mask` is a cpu_mask() slot from the function's entry block (this may run in a loop)."""
        with b.if_then(b.icmp_signed("!=", cpu, I32(NO_CPU))):
            b.store(ir.Constant(mask.type.pointee, None), mask)
            b.store(b.shl(I64(1), b.zext(b.and_(cpu, I32(63)), I64)), self.mask_word(b, mask, cpu))
            self.call_sys(b, "sched_setaffinity", I32(0), I64(MASK_WORDS * 8), b.bitcast(mask, I8P))

    def sched_yield(self, b):
        self.call_sys(b, "sched_yield")

    def futex(self, b, addr, op, val):
        self.call_sys(b, "futex", addr, I32(op), val, ir.Constant(I8P, None), I64(0), I32(0))

    def run_tasks(self, b, fn, closure, first, step, ntasks):
        """for t in range(first, ntasks, step): fn(closure, t, ntasks)."""
        for t in _loop(b, first, ntasks, step, name="task"):
            b.call(fn, [closure, t, ntasks])

    def load_field(self, b, field, align: int = 4):
        return b.load_atomic(field, "monotonic", align)

    def store_field(self, b, value, field, align: int = 4):
        b.store_atomic(value, field, "monotonic", align)

    # ------------------------------------------------------------------ functions

    def emit(self):
        self.emit_num_threads()
        self.emit_idle()
        nth_cpu = self.emit_nth_cpu()
        claim_and_run = self.emit_claim_and_run()
        worker = self.emit_worker(claim_and_run)
        ensure = self.emit_ensure_workers(worker, self.emit_atfork_child(), nth_cpu)
        self.emit_parallel_for(ensure, self.emit_follow_caller(), claim_and_run)

    def emit_num_threads(self):
        fn, b = self.function("relayish_set_num_threads", API["relayish_set_num_threads"], exported=True)
        n = fn.args[0]
        n = b.select(b.icmp_signed("<", n, I32(1)), I32(1), n)
        b.store(b.select(b.icmp_signed(">", n, I32(MAX_THREADS)), I32(MAX_THREADS), n), self.nthreads)
        b.ret_void()

        fn, b = self.function("relayish_get_num_threads", API["relayish_get_num_threads"], exported=True)
        with b.if_then(b.icmp_signed("==", b.load(self.nthreads), I32(0)), likely=False):
            cores = b.trunc(b.call(self.sysconf, [I32(SC_NPROCESSORS_ONLN)]), I32)
            cores = b.select(b.icmp_signed("<", cores, I32(1)), I32(1), cores)
            b.store(b.select(b.icmp_signed(">", cores, I32(MAX_THREADS)), I32(MAX_THREADS), cores), self.nthreads)
        b.ret(b.load(self.nthreads))

    def emit_idle(self):
        fn, b = self.function("relayish_pool_idle", API["relayish_pool_idle"], exported=True)
        b.store_atomic(I64(IDLE_NOW), self.idle_at, "monotonic", 8)
        b.ret_void()

        fn, b = self.function("relayish_pool_linger", API["relayish_pool_linger"], exported=True)
        b.store_atomic(b.or_(self.cycles(b), I64(1)), self.idle_at, "monotonic", 8)  # never 0 (= running)
        b.ret_void()

    def emit_atfork_child(self):
        """In a forked child no worker exists: forget them and any job in flight."""
        fn, b = self.function("relayish_pool.atfork_child", ir.FunctionType(VOID, []))
        for gv in (self.nworkers, self.busy, self.sleepers, self.done):
            b.store(I32(0), gv)
        b.ret_void()
        return fn

    def emit_nth_cpu(self):
        """i32 nth_cpu(i32 n, i32 skip): the (n mod k)-th of the k CPUs of this thread's affinity mask other than
        `skip` (all of them if skip is the only one), or NO_CPU if the mask cannot be read."""
        fn, b = self.function("relayish_pool.nth_cpu", ir.FunctionType(I32, [I32, I32]))
        n, skip = fn.args
        mask = self.cpu_mask(b)
        count_slot, left = b.alloca(I32), b.alloca(I32)  # CPUs to choose from; set bits still to pass over
        rc = self.call_sys(b, "sched_getaffinity", I32(0), I64(MASK_WORDS * 8), b.bitcast(mask, I8P))
        with b.if_then(b.icmp_signed("<=", rc, I64(0)), likely=False):
            b.ret(I32(NO_CPU))
        ctpop = _get_or_declare(self.m, "llvm.ctpop.i64", ir.FunctionType(I64, [I64]))
        count = I32(0)
        for w in range(MASK_WORDS):
            count = b.add(count, b.trunc(b.call(ctpop, [b.load(b.gep(mask, [I32(0), I32(w)]))]), I32))
        b.store(count, count_slot)
        with b.if_then(b.icmp_signed("==", count, I32(0)), likely=False):
            b.ret(I32(NO_CPU))
        in_range = b.and_(b.icmp_signed(">=", skip, I32(0)), b.icmp_signed("<", skip, I32(MASK_WORDS * 64)))
        with b.if_then(b.and_(in_range, b.icmp_signed(">", count, I32(1)))):  # drop `skip` unless it is all we have
            word = self.mask_word(b, mask, skip)
            bit = b.shl(I64(1), b.zext(b.and_(skip, I32(63)), I64))
            had = b.icmp_unsigned("!=", b.and_(b.load(word), bit), I64(0))
            b.store(b.and_(b.load(word), b.not_(bit)), word)
            b.store(b.sub(b.load(count_slot), b.zext(had, I32)), count_slot)
        b.store(b.srem(n, b.load(count_slot)), left)
        for cpu in _loop(b, I32(0), I32(MASK_WORDS * 64), name="cpu"):
            bit = b.trunc(b.lshr(b.load(self.mask_word(b, mask, cpu)), b.zext(b.and_(cpu, I32(63)), I64)), I1)
            with b.if_then(bit):
                with b.if_then(b.icmp_signed("==", b.load(left), I32(0))):
                    b.ret(cpu)
                b.store(b.sub(b.load(left), I32(1)), left)
        b.ret(I32(NO_CPU))
        return fn

    def emit_claim_and_run(self):
        """void claim_and_run(i32 gen): take tasks of job `gen` one at a time (a compare-and-swap of `claim` from
        (gen, t) to (gen, t + 1)) and run each, counting it in `done`, until no task is left or the job is no
        longer `gen` (module doc)."""
        fn, b = self.function("relayish_pool.claim_and_run", ir.FunctionType(VOID, [I32]))
        tag = b.shl(b.zext(fn.args[0], I64), I64(32))
        look, take, run, out = (b.append_basic_block(n) for n in ("look", "take", "run", "out"))
        b.branch(look)

        b.position_at_end(look)
        word = b.load_atomic(self.claim, "acquire", 8, name="claim")
        t = b.trunc(word, I32, name="t")
        ours = b.icmp_unsigned("==", b.and_(word, I64(-(1 << 32))), tag)
        b.cbranch(b.and_(ours, b.icmp_signed("<", t, self.load_field(b, self.job_ntasks))), take, out)

        b.position_at_end(take)
        got = b.extract_value(b.cmpxchg(self.claim, word, b.add(word, I64(1)), "acq_rel", "monotonic"), 1)
        b.cbranch(got, run, look)

        b.position_at_end(run)  # the claim proves the job unfinished: its fields are this job's
        b.call(self.load_field(b, self.job_fn, 8),
               [self.load_field(b, self.job_closure, 8), t, self.load_field(b, self.job_ntasks)])
        b.atomic_rmw("add", self.done, I32(1), "release")
        b.branch(look)

        b.position_at_end(out)
        b.ret_void()
        return fn

    def emit_worker(self, claim_and_run):
        """i8* worker(i8* arg), arg = (generation seen at creation << 32) | participant index (>= 1)."""
        fn, b = self.function("relayish_pool.worker", ir.FunctionType(I8P, [I8P]))
        arg = b.ptrtoint(fn.args[0], I64)
        me = b.trunc(b.and_(arg, I64(0xFFFF)), I32)
        seen0 = b.trunc(b.lshr(arg, I64(32)), I32)
        my_epoch = b.alloca(I32, name="my_epoch")  # allocas: promoted to registers by mem2reg
        next_yield = b.alloca(I64, name="next_yield")
        mask = self.cpu_mask(b)
        b.store(b.load_atomic(self.pin_epoch, "acquire", 4), my_epoch)
        self.pin_self(b, b.load(b.gep(self.worker_cpu, [I32(0), me])), mask)
        start = self.cycles(b)
        b.store(b.add(start, I64(YIELD_CYCLES)), next_yield)
        entry = b.block
        wait, check, spin, sleep, dosleep, woke, run = (
            b.append_basic_block(n) for n in ("wait", "check", "spin", "sleep", "dosleep", "woke", "run"))
        b.branch(wait)

        b.position_at_end(wait)  # seen: last generation handled; since: cycle counter when the wait began
        seen, since = b.phi(I32, "seen"), b.phi(I64, "since")
        seen.add_incoming(seen0, entry)
        since.add_incoming(start, entry)
        g = b.load_atomic(self.gen, "acquire", 4, name="gen")
        b.cbranch(b.icmp_signed("!=", g, seen), run, check)

        b.position_at_end(check)
        now = self.cycles(b)
        idle_at = b.load_atomic(self.idle_at, "monotonic", 8)
        lingering = b.icmp_unsigned("<", b.sub(now, idle_at), I64(LINGER_CYCLES))  # wraps (sleep) if not yet
        keep = b.and_(b.icmp_unsigned("<", b.sub(now, since), I64(SPIN_CYCLES)),
                      b.or_(b.icmp_unsigned("==", idle_at, I64(0)), lingering))
        b.cbranch(keep, spin, sleep)

        b.position_at_end(spin)
        self.pause(b)
        with b.if_then(b.icmp_unsigned(">", now, b.load(next_yield)), likely=False):
            self.sched_yield(b)
            b.store(b.add(now, I64(YIELD_CYCLES)), next_yield)
        seen.add_incoming(seen, b.block)
        since.add_incoming(since, b.block)
        b.branch(wait)

        b.position_at_end(sleep)  # count ourselves as a sleeper *before* the last look at gen (module doc)
        b.atomic_rmw("add", self.sleepers, I32(1), "seq_cst")
        b.cbranch(b.icmp_signed("==", b.load_atomic(self.gen, "seq_cst", 4), seen), dosleep, woke)
        b.position_at_end(dosleep)  # returns at once if gen != seen already: no lost wake-up
        self.futex(b, self.gen, FUTEX_WAIT_PRIVATE, seen)
        b.branch(woke)
        b.position_at_end(woke)
        b.atomic_rmw("sub", self.sleepers, I32(1), "seq_cst")
        seen.add_incoming(seen, woke)
        since.add_incoming(since, woke)
        b.branch(wait)

        b.position_at_end(run)
        epoch = b.load_atomic(self.pin_epoch, "monotonic", 4)
        with b.if_then(b.icmp_signed("!=", epoch, b.load(my_epoch)), likely=False):  # our CPU was reassigned
            b.store(epoch, my_epoch)
            self.pin_self(b, b.load(b.gep(self.worker_cpu, [I32(0), me])), mask)
        with b.if_then(b.icmp_signed("<", me, self.load_field(b, self.job_parts))):
            b.call(claim_and_run, [g])
        done_at = self.cycles(b)
        b.store(b.add(done_at, I64(YIELD_CYCLES)), next_yield)
        seen.add_incoming(g, b.block)
        since.add_incoming(done_at, b.block)
        b.branch(wait)
        return fn

    def emit_ensure_workers(self, worker, atfork_child, nth_cpu):
        """i32 ensure_workers(i32 want): start workers until `want` exist (fewer if pthread_create fails);
        returns how many exist. Called with `busy` held, so `gen` is stable while workers are created."""
        fn, b = self.function("relayish_pool.ensure_workers", ir.FunctionType(I32, [I32]))
        want = fn.args[0]
        tid = b.alloca(I64)
        n0 = b.load(self.nworkers)
        with b.if_then(b.icmp_signed("==", b.load(self.atfork_done), I32(0)), likely=False):
            null = ir.Constant(ir.FunctionType(VOID, []).as_pointer(), None)
            b.call(self.pthread_atfork, [null, null, atfork_child])
            b.store(I32(1), self.atfork_done)
            b.store(self.current_cpu(b), self.caller_cpu)
        pre = b.block
        head, create, created, end = (b.append_basic_block(n) for n in ("head", "create", "created", "end"))
        b.branch(head)
        b.position_at_end(head)
        n = b.phi(I32, "n")
        n.add_incoming(n0, pre)
        b.cbranch(b.icmp_signed("<", n, want), create, end)
        b.position_at_end(create)
        w = b.add(n, I32(1))
        b.store(b.call(nth_cpu, [n, b.load(self.caller_cpu)]), b.gep(self.worker_cpu, [I32(0), w]))
        arg = b.or_(b.shl(b.zext(b.load(self.gen), I64), I64(32)), b.zext(w, I64))
        rc = b.call(self.pthread_create, [tid, ir.Constant(I8P, None), worker, b.inttoptr(arg, I8P)])
        b.cbranch(b.icmp_signed("==", rc, I32(0)), created, end)
        b.position_at_end(created)
        n.add_incoming(w, created)
        b.branch(head)
        b.position_at_end(end)
        count = b.phi(I32)
        count.add_incoming(n, head)
        count.add_incoming(n, create)
        b.store(count, self.nworkers)
        b.ret(count)
        return fn

    def emit_follow_caller(self):
        """void follow_caller(void): if the caller moved to a CPU a worker is pinned to, that worker takes the
        caller's previous CPU (it re-pins itself at its next job, seeing pin_epoch change)."""
        fn, b = self.function("relayish_pool.follow_caller", ir.FunctionType(VOID, []))
        now, before = self.current_cpu(b), b.load(self.caller_cpu)
        with b.if_then(b.icmp_signed("!=", now, before), likely=False):
            b.store(now, self.caller_cpu)
            for w in _loop(b, I32(1), b.add(b.load(self.nworkers), I32(1)), name="w"):
                slot = b.gep(self.worker_cpu, [I32(0), w])
                with b.if_then(b.icmp_signed("==", b.load(slot), now)):
                    b.store(before, slot)
                    b.atomic_rmw("add", self.pin_epoch, I32(1), "release")
        b.ret_void()
        return fn

    def emit_parallel_for(self, ensure_workers, follow_caller, claim_and_run):
        fn, b = self.function("relayish_parallel_for", API["relayish_parallel_for"], exported=True)
        task, closure, ntasks = fn.args
        blocks = ("try", "parallel", "release", "publish", "wait", "spin", "finish", "serial", "out")
        try_, parallel, release, publish, wait, spin, finish, serial, out = (b.append_basic_block(n) for n in blocks)
        nthreads = b.call(self.api["relayish_get_num_threads"], [])
        trivial = b.or_(b.icmp_signed("<=", ntasks, I32(1)), b.icmp_signed("<=", nthreads, I32(1)))
        b.cbranch(trivial, serial, try_)

        b.position_at_end(try_)  # taken -> nested or concurrent call: run serially
        got = b.extract_value(b.cmpxchg(self.busy, I32(0), I32(1), "acquire", "monotonic"), 1)
        b.cbranch(got, parallel, serial)

        b.position_at_end(parallel)
        nworkers = b.call(ensure_workers, [b.sub(nthreads, I32(1))])
        parts = b.select(b.icmp_signed("<", ntasks, nthreads), ntasks, nthreads)
        avail = b.add(nworkers, I32(1))
        parts = b.select(b.icmp_signed("<", avail, parts), avail, parts)
        b.cbranch(b.icmp_signed("<=", parts, I32(1)), release, publish)

        b.position_at_end(release)  # no worker could be started
        b.store_atomic(I32(0), self.busy, "release", 4)
        b.branch(serial)

        b.position_at_end(publish)  # job fields and claim first, then the generation bump publishes them
        b.call(follow_caller, [])
        for gv, v, align in ((self.job_fn, task, 8), (self.job_closure, closure, 8), (self.job_ntasks, ntasks, 4),
                             (self.job_parts, parts, 4), (self.done, I32(0), 4)):
            self.store_field(b, v, gv, align)
        gen = b.add(b.load_atomic(self.gen, "monotonic", 4), I32(1))  # only a caller holding `busy` writes gen
        self.store_field(b, b.shl(b.zext(gen, I64), I64(32)), self.claim, 8)
        with b.if_then(b.icmp_unsigned("!=", b.load_atomic(self.idle_at, "monotonic", 8), I64(0)), likely=False):
            b.store_atomic(I64(0), self.idle_at, "monotonic", 8)  # the first job of a run: workers spin again
        b.atomic_rmw("add", self.gen, I32(1), "seq_cst")
        with b.if_then(b.icmp_signed("!=", b.load_atomic(self.sleepers, "seq_cst", 4), I32(0)), likely=False):
            self.futex(b, self.gen, FUTEX_WAKE_PRIVATE, I32(2**31 - 1))
        b.call(claim_and_run, [gen])
        t0 = self.cycles(b)
        b.branch(wait)

        b.position_at_end(wait)  # every task taken: wait for those still running
        b.cbranch(b.icmp_signed("==", b.load_atomic(self.done, "acquire", 4), ntasks), finish, spin)
        b.position_at_end(spin)
        self.pause(b)
        with b.if_then(b.icmp_unsigned(">", b.sub(self.cycles(b), t0), I64(YIELD_CYCLES)), likely=False):
            self.sched_yield(b)  # a worker may be waiting for our core
        b.branch(wait)

        b.position_at_end(finish)
        b.store_atomic(I32(0), self.busy, "release", 4)
        b.branch(out)

        b.position_at_end(serial)
        self.run_tasks(b, task, closure, I32(0), I32(1), ntasks)
        b.branch(out)
        b.position_at_end(out)
        b.ret_void()


def emit_thread_pool(module: ir.Module, arch: str = "x86_64", features: str = "") -> None:
    """Define the pool's API functions (module docstring) in `module`. `arch` picks the syscall numbers;
    `features` (LLVM feature string) enables rdpid."""
    _Pool(module, arch, features).emit()
