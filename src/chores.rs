//! One background thread for work done ahead of the request that needs it
//! (spare ephemeral keys for the next at-rest seal, deferred at-rest seals),
//! so that work runs on the other core instead of the event loop.
//!
//! Whoever hands work here must cope with it not running: the queue is
//! bounded ([`MAX_QUEUED`]), and where no thread can be started
//! (WebAssembly, or a spawn the OS refuses) [`run`] says no and the caller
//! does the work itself when it needs it. The thread sleeps on a condition
//! variable when there is nothing to do and is woken only then, so a steady
//! stream of work costs no wake-up per item.
//!
//! Work nobody waits for (an enqueued payload's at-rest seal) is queued
//! quietly ([`run_quietly`]): it does not wake a sleeping thread, because on
//! a virtual machine waking the idle core can cost the caller as much as the
//! work itself (≈ 20 µs a wake in the job cycle on this project's machine);
//! the next wake for other work, or a backlog of [`QUIET_BACKLOG`], runs it.

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};

/// Work items waiting at once; more are refused.
pub(crate) const MAX_QUEUED: usize = 4096;
/// Chores waiting at which a quiet one wakes the thread after all.
pub(crate) const QUIET_BACKLOG: usize = 64;

type Chore = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    chores: VecDeque<Chore>,
    /// The thread is blocked waiting (the next `run` must wake it).
    parked: bool,
}

struct Worker {
    queue: Mutex<Queue>,
    wake: Condvar,
}

fn worker() -> Option<&'static Worker> {
    static WORKER: OnceLock<Option<&'static Worker>> = OnceLock::new();
    *WORKER.get_or_init(|| {
        let worker: &'static Worker = Box::leak(Box::new(Worker {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        }));
        spawn(worker).then_some(worker)
    })
}

#[cfg(not(target_arch = "wasm32"))]
fn spawn(worker: &'static Worker) -> bool {
    std::thread::Builder::new()
        .name("byollm-chores".into())
        .spawn(move || work(worker))
        .is_ok()
}

#[cfg(target_arch = "wasm32")]
fn spawn(_: &'static Worker) -> bool {
    false
}

/// Queue `chore` for the background thread; `false` (and `chore` dropped
/// unrun) when there is no thread or the queue is full.
pub(crate) fn run(chore: impl FnOnce() + Send + 'static) -> bool {
    submit(Box::new(chore), Urgency::Later)
}

/// [`run`], without waking the thread if it sleeps (unless
/// [`QUIET_BACKLOG`] chores are waiting): for work nobody waits for, which
/// may run whenever the thread next wakes. Whoever needs its result before
/// then must be able to do the work itself.
pub(crate) fn run_quietly(chore: impl FnOnce() + Send + 'static) -> bool {
    submit(Box::new(chore), Urgency::Quiet)
}

#[derive(Clone, Copy, PartialEq)]
enum Urgency {
    Later,
    /// [`Urgency::Later`]'s queue, without the wake.
    Quiet,
}

fn submit(chore: Chore, urgency: Urgency) -> bool {
    match worker() {
        Some(worker) => submit_to(worker, chore, urgency),
        None => false,
    }
}

fn submit_to(worker: &Worker, chore: Chore, urgency: Urgency) -> bool {
    let Ok(mut queue) = worker.queue.lock() else {
        return false;
    };
    if queue.chores.len() >= MAX_QUEUED {
        return false;
    }
    queue.chores.push_back(chore);
    let wake = queue.parked && (urgency != Urgency::Quiet || queue.chores.len() >= QUIET_BACKLOG);
    drop(queue);
    if wake {
        worker.wake.notify_one();
    }
    true
}

/// Whether there is a thread to run chores.
pub(crate) fn available() -> bool {
    worker().is_some()
}

/// The thread: run chores in order, unlocked; sleep when there are none.
#[cfg_attr(target_arch = "wasm32", allow(dead_code))]
fn work(worker: &Worker) {
    loop {
        let chore = {
            let Ok(mut queue) = worker.queue.lock() else {
                return;
            };
            loop {
                if let Some(chore) = queue.chores.pop_front() {
                    break chore;
                }
                queue.parked = true;
                queue = match worker.wake.wait(queue) {
                    Ok(q) => q,
                    Err(_) => return,
                };
                queue.parked = false;
            }
        };
        // A chore is not expected to unwind; if one did, whoever waits for
        // its result does the work itself, and the thread goes on.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(chore));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn chores_run_in_order_on_another_thread() {
        let (tx, rx) = mpsc::channel();
        let here = std::thread::current().id();
        for n in 0..20 {
            let tx = tx.clone();
            assert!(run(move || {
                let _ = tx.send((n, std::thread::current().id()));
            }));
        }
        let mut seen = Vec::new();
        for _ in 0..20 {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok((n, thread)) => {
                    assert_ne!(thread, here, "ran on the caller's thread");
                    seen.push(n);
                }
                Err(e) => panic!("a chore never ran: {e}"),
            }
        }
        // Other tests queue chores too, but these twenty keep their order.
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
    }

    /// A worker of the test's own, so no other test's chores wake it.
    fn own_worker() -> &'static Worker {
        let worker: &'static Worker = Box::leak(Box::new(Worker {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        }));
        assert!(spawn(worker), "no thread for the test's worker");
        worker
    }

    fn wait_until_parked(worker: &Worker) {
        for _ in 0..1000 {
            if worker.queue.lock().is_ok_and(|q| q.parked) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        panic!("the worker never went to sleep");
    }

    #[test]
    fn quiet_chores_wait_for_the_next_wake_or_a_backlog() {
        let worker = own_worker();
        wait_until_parked(worker);
        let (tx, rx) = mpsc::channel();
        let send = |name: &'static str, urgency: Urgency| {
            let tx = tx.clone();
            let chore = Box::new(move || {
                let _ = tx.send(name);
            });
            assert!(submit_to(worker, chore, urgency));
        };
        send("quiet", Urgency::Quiet);
        assert!(
            rx.recv_timeout(Duration::from_millis(100)).is_err(),
            "a quiet chore woke the sleeping thread"
        );
        send("loud", Urgency::Later);
        let mut seen = Vec::new();
        for _ in 0..2 {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(name) => seen.push(name),
                Err(e) => panic!("a chore never ran: {e}"),
            }
        }
        assert_eq!(seen, ["quiet", "loud"]);

        // A backlog runs without anyone else waking the thread.
        wait_until_parked(worker);
        for n in 0..QUIET_BACKLOG {
            let tx = tx.clone();
            assert!(submit_to(
                worker,
                Box::new(move || {
                    let _ = tx.send(if n + 1 == QUIET_BACKLOG {
                        "last"
                    } else {
                        "one"
                    });
                }),
                Urgency::Quiet
            ));
        }
        let mut last = false;
        for _ in 0..QUIET_BACKLOG {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(name) => last = name == "last",
                Err(e) => panic!("a backlog of quiet chores did not run: {e}"),
            }
        }
        assert!(last);
    }

    #[test]
    fn a_chore_that_panics_does_not_stop_the_thread() {
        assert!(run(|| panic!("a chore failing on purpose")));
        let (tx, rx) = mpsc::channel();
        assert!(run(move || {
            let _ = tx.send(());
        }));
        assert!(rx.recv_timeout(Duration::from_secs(10)).is_ok());
    }
}
