//! A small, bounded pool of dedicated worker threads, each owning a per-thread context (on Windows: its COM
//! apartment and WMI connections), that runs blocking calls under the caller's deadline and cancellation.
//!
//! It is platform-independent so that its semantics are tested on Linux; the Windows implementation is its only user.
//!
//! # Semantics
//! - **Fixed threads.** `threads` OS threads are started up front; each builds its context once, on itself (a
//!   context may be `!Send`, like `wmi::WMIConnection`). A context whose construction failed is retried at the
//!   thread's next job; a job that panics drops its thread's context, which is rebuilt for the next job.
//! - **Bounded queue.** At most `queue_capacity` calls wait for a thread; a caller finding the queue full waits for
//!   room until its deadline.
//! - **Deadline and cancellation before start.** A call whose caller gave up (deadline passed, token cancelled)
//!   while it was queued is never started: the caller gets [`CallError::DeadlineExceeded`] /
//!   [`CallError::Cancelled`] with `started: false`, and the host was not touched.
//! - **Deadline and cancellation after start.** A blocking host call cannot be interrupted (a synchronous WMI
//!   `ExecQuery`/`ExecMethod` has no timeout and no cancellation; `CancelAsyncCall` does not stop a provider either,
//!   reference §1.3). The caller stops waiting at once and gets the error with `started: true`: the outcome is
//!   unknown and the caller must re-check state. The call keeps its thread until the host answers; its result is
//!   then dropped (logged at `warn`).
//! - **Stuck calls are abandoned, their threads replaced, and reported.** When a caller stops waiting for a started
//!   call, that thread is lost to the pool until the host answers, which for a provider that never answers is
//!   forever. The pool then starts a replacement thread (so two calls to an unreachable server cannot starve the
//!   lane) and lets the stuck thread exit once its call returns. Replacements are bounded (`max_replacements`
//!   stuck threads at a time): past that, the lane runs with fewer threads, and when every thread is stuck it is
//!   [`PoolStatus::exhausted`] — which the backend reports (its readiness check names the lane and the stuck call).
//!   Every abandonment is logged at `warn` with the call's name; [`WorkerPool::status`] lists the stuck calls.

use std::collections::{BTreeMap, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crate::call::CallContext;
use crate::error::{CallError, CallResult};

/// Builds a worker thread's context, on that thread.
pub type ContextInit<C> = Arc<dyn Fn() -> Result<C, String> + Send + Sync>;

/// The size of a pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// The thread name prefix (threads are `name-0`, `name-1`, …).
    pub name: String,
    /// How many worker threads (at least 1).
    pub threads: usize,
    /// How many calls may wait for a thread (at least 1).
    pub queue_capacity: usize,
    /// How many threads stuck in calls their callers abandoned may be replaced at a time (0: never replaced).
    pub max_replacements: usize,
}

/// A call whose caller stopped waiting while the host had not answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StuckCall {
    /// What was called (e.g. `MSFT_SmbGlobalMapping.Create`).
    pub call: &'static str,
    /// How long it has been running.
    pub running_for: Duration,
    /// Whether its thread was replaced (else the lane is a thread short while it runs).
    pub replaced: bool,
}

/// A pool's state, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolStatus {
    /// The pool's name (its lane).
    pub name: String,
    /// Threads that serve calls (the configured number, replacements included).
    pub threads: usize,
    /// Calls running now, stuck ones included.
    pub running: usize,
    /// Calls waiting for a thread.
    pub queued: usize,
    /// Calls still running after their callers stopped waiting.
    pub stuck: Vec<StuckCall>,
    /// How many more stuck threads may be replaced now.
    pub replacements_left: usize,
    /// Threads replaced since the pool started.
    pub replaced_total: u64,
}

impl PoolStatus {
    /// Whether the lane can serve nothing: every thread is stuck and none may be replaced.
    pub fn exhausted(&self) -> bool {
        let lost = self.stuck.iter().filter(|s| !s.replaced).count();
        lost >= self.threads
    }
}

/// The pool. Dropping it lets idle threads exit; a thread still inside a host call exits when the call returns.
pub struct WorkerPool<C: 'static> {
    shared: Arc<Shared<C>>,
    threads: usize,
}

trait Task<C>: Send {
    /// Queued → running. False when the caller already gave up: skip it.
    fn claim(&self) -> bool;
    /// The call's id and name.
    fn id(&self) -> (u64, &'static str);
    /// Run it. False when it panicked (the context must then be rebuilt).
    fn run(self: Box<Self>, context: &mut C) -> bool;
    /// The thread has no context to run it with.
    fn fail(self: Box<Self>, error: CallError);
}

struct Shared<C> {
    name: String,
    capacity: usize,
    max_replacements: usize,
    init: ContextInit<C>,
    queue: Mutex<Queue<C>>,
    not_empty: Condvar,
    not_full: Condvar,
    calls: Mutex<Calls>,
    next_id: AtomicU64,
}

struct Queue<C> {
    tasks: VecDeque<Box<dyn Task<C>>>,
    closed: bool,
}

/// The calls running now, by id.
#[derive(Default)]
struct Calls {
    running: BTreeMap<u64, Running>,
    /// Stuck threads replaced and not yet returned.
    replaced_now: usize,
    replaced_total: u64,
    next_thread: usize,
}

struct Running {
    call: &'static str,
    since: Instant,
    abandoned: bool,
    /// The thread was replaced: it exits once this call returns.
    retire: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while holding these locks (jobs run outside them), so poisoning cannot leave bad state.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: 'static> WorkerPool<C> {
    /// Start `config.threads` threads, each calling `init` once to build its context.
    pub fn new(config: PoolConfig, init: ContextInit<C>) -> std::io::Result<Self> {
        let threads = config.threads.max(1);
        let shared = Arc::new(Shared {
            name: config.name,
            capacity: config.queue_capacity.max(1),
            max_replacements: config.max_replacements,
            init,
            queue: Mutex::new(Queue {
                tasks: VecDeque::new(),
                closed: false,
            }),
            not_empty: Condvar::new(),
            not_full: Condvar::new(),
            calls: Mutex::new(Calls::default()),
            next_id: AtomicU64::new(1),
        });
        for _ in 0..threads {
            spawn_worker(&shared)?;
        }
        Ok(Self { shared, threads })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many worker threads it has.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// What it is doing: running, queued and stuck calls.
    pub fn status(&self) -> PoolStatus {
        let queued = lock(&self.shared.queue).tasks.len();
        let calls = lock(&self.shared.calls);
        let now = Instant::now();
        PoolStatus {
            name: self.shared.name.clone(),
            threads: self.threads,
            running: calls.running.len(),
            queued,
            stuck: calls
                .running
                .values()
                .filter(|r| r.abandoned)
                .map(|r| StuckCall {
                    call: r.call,
                    running_for: now.saturating_duration_since(r.since),
                    replaced: r.retire,
                })
                .collect(),
            replacements_left: self
                .shared
                .max_replacements
                .saturating_sub(calls.replaced_now),
            replaced_total: calls.replaced_total,
        }
    }

    /// Run `job` (named `call` in reports) on a worker thread with its context, and wait for it within `ctx`'s
    /// deadline and cancellation (see the module documentation for what happens when the caller stops waiting).
    pub fn run<R, F>(&self, ctx: &CallContext, call: &'static str, job: F) -> CallResult<R>
    where
        R: Send + 'static,
        F: FnOnce(&mut C) -> CallResult<R> + Send + 'static,
    {
        ctx.check()?;
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let pool = Arc::downgrade(&self.shared);
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Queued),
            changed: Condvar::new(),
            ctx: ctx.clone(),
            abandon: Box::new(move || {
                if let Some(shared) = pool.upgrade() {
                    shared.abandon(id);
                }
            }),
        });
        self.enqueue(
            ctx,
            Box::new(Job {
                slot: slot.clone(),
                job,
                pool: self.shared.name.clone(),
                id,
                call,
            }),
        )?;
        slot.wait()
    }

    fn enqueue(&self, ctx: &CallContext, task: Box<dyn Task<C>>) -> CallResult<()> {
        let shared = self.shared.clone();
        let _registration = ctx.cancel_token().and_then(|t| {
            t.register(Arc::new(move || {
                let _queue = lock(&shared.queue);
                shared.not_full.notify_all();
            }))
        });
        let mut queue = lock(&self.shared.queue);
        loop {
            if queue.closed {
                return Err(CallError::Unavailable(format!(
                    "{} has shut down",
                    self.shared.name
                )));
            }
            if queue.tasks.len() < self.shared.capacity {
                queue.tasks.push_back(task);
                self.shared.not_empty.notify_one();
                return Ok(());
            }
            ctx.check()?;
            let wait = ctx.deadline().saturating_duration_since(Instant::now());
            queue = self
                .shared
                .not_full
                .wait_timeout(queue, wait)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl<C: 'static> Drop for WorkerPool<C> {
    fn drop(&mut self) {
        let mut queue = lock(&self.shared.queue);
        queue.closed = true;
        queue.tasks.clear();
        self.shared.not_empty.notify_all();
        self.shared.not_full.notify_all();
    }
}

fn spawn_worker<C: 'static>(shared: &Arc<Shared<C>>) -> std::io::Result<()> {
    let index = {
        let mut calls = lock(&shared.calls);
        calls.next_thread += 1;
        calls.next_thread - 1
    };
    let shared = shared.clone();
    thread::Builder::new()
        .name(format!("{}-{index}", shared.name))
        .spawn(move || worker(shared))
        .map(|_| ())
}

impl<C: 'static> Shared<C> {
    /// The caller of running call `id` stopped waiting: replace its thread if the budget allows.
    fn abandon(self: &Arc<Self>, id: u64) {
        let mut calls = lock(&self.calls);
        let replace = calls.replaced_now < self.max_replacements;
        let Some(r) = calls.running.get_mut(&id).filter(|r| !r.abandoned) else {
            return;
        };
        r.abandoned = true;
        let call = r.call;
        if !replace || lock(&self.queue).closed {
            tracing::warn!(
                pool = %self.name,
                call,
                "a host call outlived its caller and holds its thread; no replacement is left, so the lane has one \
                 thread fewer until the host answers"
            );
            return;
        }
        r.retire = true;
        calls.replaced_now += 1;
        calls.replaced_total += 1;
        drop(calls);
        match spawn_worker(self) {
            Ok(()) => tracing::warn!(
                pool = %self.name,
                call,
                "a host call outlived its caller: its thread is abandoned to it and replaced"
            ),
            Err(e) => {
                let mut calls = lock(&self.calls);
                calls.replaced_now -= 1;
                if let Some(r) = calls.running.get_mut(&id) {
                    r.retire = false;
                }
                tracing::warn!(pool = %self.name, call, error = %e, "cannot start a replacement thread");
            }
        }
    }

    fn begin(&self, id: u64, call: &'static str) {
        lock(&self.calls).running.insert(
            id,
            Running {
                call,
                since: Instant::now(),
                abandoned: false,
                retire: false,
            },
        );
    }

    /// Call `id` returned: whether its thread was replaced and must exit.
    fn end(&self, id: u64) -> bool {
        let mut calls = lock(&self.calls);
        let Some(r) = calls.running.remove(&id) else {
            return false;
        };
        if r.abandoned {
            tracing::info!(
                pool = %self.name,
                call = r.call,
                after_ms = r.since.elapsed().as_millis() as u64,
                "an abandoned host call returned"
            );
        }
        if r.retire {
            calls.replaced_now -= 1;
        }
        r.retire
    }
}

fn worker<C: 'static>(shared: Arc<Shared<C>>) {
    let init = shared.init.clone();
    let build = || match catch_unwind(AssertUnwindSafe(|| init())) {
        Ok(result) => result,
        Err(_) => Err("context initialisation panicked".to_owned()),
    };
    let mut context: Result<C, String> = build();
    loop {
        let task = {
            let mut queue = lock(&shared.queue);
            loop {
                if queue.closed {
                    return;
                }
                if let Some(task) = queue.tasks.pop_front() {
                    shared.not_full.notify_one();
                    break task;
                }
                queue = shared
                    .not_empty
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        };
        if !task.claim() {
            continue;
        }
        if context.is_err() {
            context = build();
        }
        let (id, call) = task.id();
        match &mut context {
            Ok(c) => {
                shared.begin(id, call);
                let ok = task.run(c);
                let retire = shared.end(id);
                if retire {
                    // A replacement serves the lane now; this thread's context goes with it.
                    return;
                }
                if !ok {
                    // Drop the possibly inconsistent context first (on Windows: release its COM objects and
                    // apartment), then build a fresh one.
                    drop(std::mem::replace(&mut context, Err(String::new())));
                    context = build();
                }
            }
            Err(e) => task.fail(CallError::Unavailable(format!(
                "{}: worker thread has no host context: {e}",
                shared.name
            ))),
        }
    }
}

enum SlotState<R> {
    Queued,
    Running,
    Done(CallResult<R>),
    /// The worker skipped it: the caller had already given up.
    Skipped,
    /// The caller stopped waiting.
    Abandoned,
}

struct Slot<R> {
    state: Mutex<SlotState<R>>,
    changed: Condvar,
    ctx: CallContext,
    /// Tells the pool its caller gave up on the running call.
    abandon: Box<dyn Fn() + Send + Sync>,
}

impl<R: Send + 'static> Slot<R> {
    fn wait(self: &Arc<Self>) -> CallResult<R> {
        let result = self.wait_inner();
        if matches!(
            result,
            Err(CallError::DeadlineExceeded { started: true }
                | CallError::Cancelled { started: true })
        ) {
            (self.abandon)();
        }
        result
    }

    fn wait_inner(self: &Arc<Self>) -> CallResult<R> {
        let me = Arc::downgrade(self);
        let _registration = self.ctx.cancel_token().and_then(|t| {
            t.register(Arc::new(move || {
                if let Some(me) = Weak::upgrade(&me) {
                    let _state = lock(&me.state);
                    me.changed.notify_all();
                }
            }))
        });
        let mut state = lock(&self.state);
        loop {
            match std::mem::replace(&mut *state, SlotState::Abandoned) {
                SlotState::Done(result) => return result,
                SlotState::Skipped => {
                    return Err(self
                        .ctx
                        .check()
                        .err()
                        .unwrap_or(CallError::DeadlineExceeded { started: false }));
                }
                other => *state = other,
            }
            let started = matches!(*state, SlotState::Running);
            if self.ctx.is_cancelled() {
                *state = SlotState::Abandoned;
                return Err(CallError::Cancelled { started });
            }
            let now = Instant::now();
            if now >= self.ctx.deadline() {
                *state = SlotState::Abandoned;
                return Err(CallError::DeadlineExceeded { started });
            }
            state = self
                .changed
                .wait_timeout(state, self.ctx.deadline() - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

struct Job<R, F> {
    slot: Arc<Slot<R>>,
    job: F,
    pool: String,
    id: u64,
    call: &'static str,
}

impl<C, R, F> Task<C> for Job<R, F>
where
    R: Send + 'static,
    F: FnOnce(&mut C) -> CallResult<R> + Send + 'static,
{
    fn claim(&self) -> bool {
        let mut state = lock(&self.slot.state);
        match *state {
            SlotState::Queued if self.slot.ctx.check().is_ok() => {
                *state = SlotState::Running;
                true
            }
            SlotState::Queued => {
                *state = SlotState::Skipped;
                self.slot.changed.notify_all();
                tracing::debug!(pool = %self.pool, call = self.call, "host call not started: its caller gave up while it was queued");
                false
            }
            _ => false,
        }
    }

    fn id(&self) -> (u64, &'static str) {
        (self.id, self.call)
    }

    fn run(self: Box<Self>, context: &mut C) -> bool {
        let Self {
            slot,
            job,
            pool,
            call,
            ..
        } = *self;
        let (result, ok) = match catch_unwind(AssertUnwindSafe(|| job(context))) {
            Ok(result) => (result, true),
            Err(_) => (
                Err(CallError::Unavailable(format!(
                    "{pool}: the host call {call} panicked"
                ))),
                false,
            ),
        };
        let mut state = lock(&slot.state);
        if matches!(*state, SlotState::Abandoned) {
            tracing::warn!(
                pool = %pool,
                call,
                succeeded = result.is_ok(),
                "a host call finished after its caller stopped waiting (deadline or cancellation); its result was dropped"
            );
        } else {
            *state = SlotState::Done(result);
            slot.changed.notify_all();
        }
        ok
    }

    fn fail(self: Box<Self>, error: CallError) {
        let mut state = lock(&self.slot.state);
        if !matches!(*state, SlotState::Abandoned) {
            *state = SlotState::Done(Err(error));
            self.slot.changed.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::call::CancelToken;

    /// A context that records which thread built it.
    struct Ctx {
        thread: String,
        calls: usize,
    }

    fn pool(threads: usize, queue: usize, inits: Arc<AtomicUsize>) -> WorkerPool<Ctx> {
        replacing(threads, queue, 0, inits)
    }

    fn replacing(
        threads: usize,
        queue: usize,
        max_replacements: usize,
        inits: Arc<AtomicUsize>,
    ) -> WorkerPool<Ctx> {
        WorkerPool::new(
            PoolConfig {
                name: "test".into(),
                threads,
                queue_capacity: queue,
                max_replacements,
            },
            Arc::new(move || {
                inits.fetch_add(1, Ordering::SeqCst);
                Ok(Ctx {
                    thread: thread::current().name().unwrap_or("").to_owned(),
                    calls: 0,
                })
            }),
        )
        .unwrap()
    }

    fn long() -> CallContext {
        CallContext::after(Duration::from_secs(60))
    }

    /// A job that reports it started, then blocks until released.
    fn blocker(
        started: mpsc::Sender<()>,
        release: mpsc::Receiver<()>,
    ) -> impl FnOnce(&mut Ctx) -> CallResult<&'static str> + Send + 'static {
        move |_| {
            started.send(()).unwrap();
            release.recv().unwrap();
            Ok("finished")
        }
    }

    #[test]
    fn jobs_run_on_the_pool_threads_with_a_context_built_once_per_thread() {
        let inits = Arc::new(AtomicUsize::new(0));
        let p = pool(1, 4, inits.clone());
        for expected in 1..=5 {
            let (thread, calls) = p
                .run(&long(), "test", |c: &mut Ctx| {
                    c.calls += 1;
                    Ok((c.thread.clone(), c.calls))
                })
                .unwrap();
            assert_eq!(thread, "test-0");
            assert_eq!(calls, expected);
        }
        assert_eq!(inits.load(Ordering::SeqCst), 1);
        assert_eq!(p.threads(), 1);
        assert_eq!(p.name(), "test");
    }

    #[test]
    fn never_more_calls_at_once_than_threads() {
        let p = Arc::new(pool(2, 8, Arc::new(AtomicUsize::new(0))));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let (started_tx, started_rx) = mpsc::channel();
        let mut releases = Vec::new();
        let mut callers = Vec::new();
        for _ in 0..4 {
            let (release_tx, release_rx) = mpsc::channel::<()>();
            releases.push(release_tx);
            let (p, running, peak, started_tx) =
                (p.clone(), running.clone(), peak.clone(), started_tx.clone());
            callers.push(thread::spawn(move || {
                p.run(&long(), "test", move |_| {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    started_tx.send(()).unwrap();
                    release_rx.recv().unwrap();
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                })
            }));
        }
        // Two start; the other two are queued until a thread frees up.
        started_rx.recv().unwrap();
        started_rx.recv().unwrap();
        assert!(started_rx.try_recv().is_err());
        for r in &releases {
            // A job not yet running has not taken its receiver: its send still succeeds (buffered).
            r.send(()).unwrap();
        }
        for c in callers {
            c.join().unwrap().unwrap();
        }
        started_rx.recv().unwrap();
        started_rx.recv().unwrap();
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_expired_or_cancelled_context_is_refused_without_running() {
        let p = pool(1, 1, Arc::new(AtomicUsize::new(0)));
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let past = CallContext::new(Instant::now() - Duration::from_millis(1));
        assert_eq!(
            p.run(&past, "test", move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            Err(CallError::DeadlineExceeded { started: false })
        );
        let token = CancelToken::new();
        token.cancel();
        let r = ran.clone();
        assert_eq!(
            p.run(&long().with_cancel(token), "test", move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            Err(CallError::Cancelled { started: false })
        );
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    /// The caller returns at its deadline with `started: true`; the running call finishes on its thread, its result
    /// is dropped, and the thread then serves the next call.
    ///
    /// Whether the idle worker claims the call before a short deadline depends on scheduling, so each attempt
    /// accepts only the two consistent outcomes (started and still running, or never started and never run) and the
    /// deadline grows until the started case has been seen.
    #[test]
    fn a_started_call_outliving_its_deadline_reports_unknown_outcome_and_frees_its_thread_later() {
        let p = pool(1, 4, Arc::new(AtomicUsize::new(0)));
        for budget_ms in [50, 200, 1_000, 5_000, 30_000] {
            let (started_tx, started_rx) = mpsc::channel();
            let (release_tx, release_rx) = mpsc::channel();
            let ctx = CallContext::after(Duration::from_millis(budget_ms));
            match p.run(&ctx, "test", blocker(started_tx, release_rx)) {
                Err(err @ CallError::DeadlineExceeded { started: true }) => {
                    assert!(err.outcome_unknown());
                    // It really is running: it reported its start and waits for its release.
                    started_rx.recv().unwrap();
                    release_tx.send(()).unwrap();
                    assert_eq!(p.run(&long(), "test", |_| Ok(7)), Ok(7));
                    return;
                }
                Err(CallError::DeadlineExceeded { started: false }) => {
                    // Skipped, never run: the job (and its sender) was dropped without sending.
                    assert!(started_rx.recv().is_err());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!("the worker never claimed a call within 30 s");
    }

    /// A call queued behind a stuck one is never started once its caller has given up.
    #[test]
    fn a_queued_call_whose_caller_gave_up_is_skipped() {
        let p = Arc::new(pool(1, 4, Arc::new(AtomicUsize::new(0))));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let p2 = p.clone();
        let stuck = thread::spawn(move || p2.run(&long(), "test", blocker(started_tx, release_rx)));
        started_rx.recv().unwrap();

        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let short = CallContext::after(Duration::from_millis(50));
        assert_eq!(
            p.run(&short, "test", move |_| {
                r.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }),
            Err(CallError::DeadlineExceeded { started: false })
        );
        release_tx.send(()).unwrap();
        assert_eq!(stuck.join().unwrap(), Ok("finished"));
        // The skipped job was popped and dropped, not run: the next call runs and the counter is still 0.
        assert_eq!(p.run(&long(), "test", |_| Ok(())), Ok(()));
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    /// Cancelling wakes a caller waiting on a running call at once (long deadline), with `started: true`.
    #[test]
    fn cancellation_wakes_a_waiting_caller() {
        let p = Arc::new(pool(1, 4, Arc::new(AtomicUsize::new(0))));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let token = CancelToken::new();
        let ctx = long().with_cancel(token.clone());
        let p2 = p.clone();
        let caller = thread::spawn(move || p2.run(&ctx, "test", blocker(started_tx, release_rx)));
        started_rx.recv().unwrap();
        token.cancel();
        assert_eq!(
            caller.join().unwrap(),
            Err(CallError::Cancelled { started: true })
        );
        release_tx.send(()).unwrap();
        assert_eq!(p.run(&long(), "test", |_| Ok(1)), Ok(1));
    }

    /// With the thread busy and the queue full, a caller waits for room and gives up at its deadline, not started.
    #[test]
    fn a_full_queue_makes_callers_wait_until_their_deadline() {
        let p = Arc::new(pool(1, 1, Arc::new(AtomicUsize::new(0))));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let p2 = p.clone();
        let stuck = thread::spawn(move || p2.run(&long(), "test", blocker(started_tx, release_rx)));
        started_rx.recv().unwrap();
        // Fill the single queue slot with a call whose caller waits long.
        let p3 = p.clone();
        let queued = thread::spawn(move || p3.run(&long(), "test", |_| Ok("queued ran")));
        // Wait (without sleeping) until it is really in the queue.
        while lock(&p.shared.queue).tasks.is_empty() {
            thread::yield_now();
        }
        let short = CallContext::after(Duration::from_millis(50));
        assert_eq!(
            p.run(&short, "test", |_| Ok("third")),
            Err(CallError::DeadlineExceeded { started: false })
        );
        release_tx.send(()).unwrap();
        assert_eq!(stuck.join().unwrap(), Ok("finished"));
        assert_eq!(queued.join().unwrap(), Ok("queued ran"));
    }

    /// A provider that never answers: the caller gives up (cancels), the pool abandons the stuck thread to it,
    /// starts a replacement, and the lane keeps serving; the stuck call is reported until it returns, then its
    /// thread exits and the lane is whole again. (Before replacements, the next call waited for the stuck thread and
    /// failed unstarted at its deadline.)
    #[test]
    fn a_stuck_call_is_abandoned_its_thread_replaced_and_reported() {
        let inits = Arc::new(AtomicUsize::new(0));
        let p = Arc::new(replacing(1, 4, 1, inits.clone()));
        let (started_tx, started_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel();
        let token = CancelToken::new();
        let ctx = long().with_cancel(token.clone());
        let p2 = p.clone();
        let caller = thread::spawn(move || {
            p2.run(
                &ctx,
                "MSFT_SmbGlobalMapping.Create",
                blocker(started_tx, release_rx),
            )
        });
        started_rx.recv().unwrap();
        token.cancel();
        assert_eq!(
            caller.join().unwrap(),
            Err(CallError::Cancelled { started: true })
        );
        // The lane serves the next call at once, on a new thread, while the stuck one still waits.
        let (thread_name, _) = p
            .run(&long(), "MSFT_Disk.Online", |c: &mut Ctx| {
                Ok((c.thread.clone(), ()))
            })
            .unwrap();
        assert_eq!(thread_name, "test-1");
        let status = p.status();
        assert_eq!(status.stuck.len(), 1);
        assert_eq!(status.stuck[0].call, "MSFT_SmbGlobalMapping.Create");
        assert!(status.stuck[0].replaced);
        assert_eq!((status.replacements_left, status.replaced_total), (0, 1));
        assert!(!status.exhausted());
        // The provider answers at last: the abandoned thread exits, nothing is stuck, the budget is back.
        release_tx.send(()).unwrap();
        while !p.status().stuck.is_empty() {
            thread::yield_now();
        }
        let status = p.status();
        assert_eq!((status.replacements_left, status.running), (1, 0));
        assert_eq!(p.run(&long(), "x", |_| Ok(3)), Ok(3));
        assert_eq!(
            inits.load(Ordering::SeqCst),
            2,
            "one context per thread ever started"
        );
    }

    /// Replacements are bounded: past the budget a stuck thread is not replaced, and a lane whose every thread is
    /// stuck says so.
    #[test]
    fn replacements_are_bounded_and_an_exhausted_lane_says_so() {
        let p = Arc::new(replacing(1, 4, 1, Arc::new(AtomicUsize::new(0))));
        let mut releases = Vec::new();
        for n in 0..2 {
            let (started_tx, started_rx) = mpsc::channel();
            let (release_tx, release_rx) = mpsc::channel();
            releases.push(release_tx);
            let token = CancelToken::new();
            let ctx = long().with_cancel(token.clone());
            let p2 = p.clone();
            let caller = thread::spawn(move || {
                p2.run(
                    &ctx,
                    "MSFT_iSCSITarget.Connect",
                    blocker(started_tx, release_rx),
                )
            });
            started_rx.recv().unwrap();
            token.cancel();
            assert_eq!(
                caller.join().unwrap(),
                Err(CallError::Cancelled { started: true }),
                "call {n}"
            );
        }
        let status = p.status();
        assert_eq!(status.stuck.len(), 2);
        assert_eq!(status.stuck.iter().filter(|s| s.replaced).count(), 1);
        assert!(status.exhausted(), "{status:?}");
        let short = CallContext::after(Duration::from_millis(50));
        assert_eq!(
            p.run(&short, "x", |_| Ok(())),
            Err(CallError::DeadlineExceeded { started: false })
        );
        for r in releases {
            r.send(()).unwrap();
        }
        while !p.status().stuck.is_empty() {
            thread::yield_now();
        }
        assert!(!p.status().exhausted());
        assert_eq!(p.run(&long(), "x", |_| Ok(4)), Ok(4));
    }

    #[test]
    fn a_panicking_job_is_reported_and_its_thread_gets_a_fresh_context() {
        let inits = Arc::new(AtomicUsize::new(0));
        let p = pool(1, 4, inits.clone());
        let result: CallResult<()> = p.run(&long(), "test", |_| panic!("boom"));
        assert!(matches!(result, Err(CallError::Unavailable(m)) if m.contains("panicked")));
        assert_eq!(
            p.run(&long(), "test", |c: &mut Ctx| {
                c.calls += 1;
                Ok(c.calls)
            }),
            Ok(1)
        );
        assert_eq!(inits.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_failing_context_is_reported_and_retried() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let a = attempts.clone();
        let p: WorkerPool<u32> = WorkerPool::new(
            PoolConfig {
                name: "flaky".into(),
                threads: 1,
                queue_capacity: 2,
                max_replacements: 0,
            },
            Arc::new(move || {
                // Fails at thread start and at the first job; works from the third attempt.
                if a.fetch_add(1, Ordering::SeqCst) < 2 {
                    Err("COM unavailable".into())
                } else {
                    Ok(42)
                }
            }),
        )
        .unwrap();
        let err = p.run(&long(), "test", |c: &mut u32| Ok(*c)).unwrap_err();
        assert!(
            matches!(&err, CallError::Unavailable(m) if m.contains("COM unavailable")),
            "{err}"
        );
        assert_eq!(p.run(&long(), "test", |c: &mut u32| Ok(*c)), Ok(42));
        assert_eq!(attempts.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn dropping_the_pool_stops_idle_threads() {
        let p = pool(2, 2, Arc::new(AtomicUsize::new(0)));
        let shared = Arc::downgrade(&p.shared);
        drop(p);
        // Each idle thread wakes, sees `closed` and drops its reference.
        while shared.strong_count() > 0 {
            thread::yield_now();
        }
    }
}
