//! Group directory fsync: concurrent creates in one directory share the
//! fsync that makes their new entries durable.
//!
//! A directory fsync makes durable every entry change made in the directory
//! before the fsync started. So a create that linked its key needs *a*
//! directory fsync that started after its link, not one of its own: the
//! first create to arrive while no fsync of the directory runs becomes the
//! leader and fsyncs for everyone who linked before it started; creates
//! that link while it runs wait for the next one (which one of them
//! leads). Each waiting create learns the verdict of the first fsync that
//! covers it: if that fsync failed, every create it covered fails (and
//! undoes its own link, as a lone create did), because after a failed fsync
//! nothing says those entries reached the disk.
//!
//! Invariants (each create, by its ticket):
//! - D1: tickets are handed out under the lock after the create's link (or
//!   its `EEXIST`) returned, in increasing order;
//! - D2: an fsync covers exactly the tickets handed out before it read the
//!   last ticket under the lock, which it did before it started;
//! - D3: a create returns the verdict of the first fsync that covers its
//!   ticket, and only once that fsync finished.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// The fsyncs of one directory, and who waits for them.
#[derive(Debug, Default)]
struct Dir {
    state: Mutex<State>,
    done: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// The last ticket handed out.
    issued: u64,
    /// Every ticket up to this one has its verdict.
    decided: u64,
    /// An fsync of the directory is running.
    syncing: bool,
    /// Fsyncs that failed, while creates they covered have not read it.
    failures: Vec<Failure>,
}

/// A failed fsync and the tickets it covered, `(after, through]`.
#[derive(Debug)]
struct Failure {
    after: u64,
    through: u64,
    kind: io::ErrorKind,
    message: String,
    unread: u64,
}

/// What happens around a shared fsync, for tests to watch and steer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SyncEvent {
    /// A create took its ticket after its link.
    Linked { ticket: u64 },
    /// An fsync of the directory starts, covering tickets through `through`.
    Started { through: u64 },
    /// That fsync finished.
    Finished { through: u64, ok: bool },
    /// A create waits for another create of the same key in this store.
    #[cfg(test)]
    KeyBusy,
}

/// A test's observer of [`SyncEvent`]s (it may block to order threads).
#[cfg(test)]
pub(crate) type Hook = Arc<dyn Fn(&Path, &SyncEvent) + Send + Sync>;

/// The shared fsyncs of every directory of one store.
#[derive(Default)]
pub(crate) struct DirSyncs {
    dirs: Mutex<HashMap<PathBuf, Arc<Dir>>>,
    #[cfg(test)]
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for DirSyncs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirSyncs").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl DirSyncs {
    /// Test hook: `hook` sees every event from now on.
    #[cfg(test)]
    pub(crate) fn set_hook(&self, hook: Hook) {
        *lock(&self.hook) = Some(hook);
    }

    pub(crate) fn event(&self, _dir: &Path, _event: SyncEvent) {
        #[cfg(test)]
        {
            let hook = lock(&self.hook).clone();
            if let Some(hook) = hook {
                hook(_dir, &_event);
            }
        }
    }

    /// Returns once an fsync of `dir` that started after this call did
    /// (with its result): call it after linking into `dir`. `fsync` is the
    /// fsync itself (the leader runs it, others wait for it).
    pub(crate) fn sync_after_link(
        &self,
        dir: &Path,
        fsync: impl Fn() -> io::Result<()>,
    ) -> io::Result<()> {
        let shared = Arc::clone(lock(&self.dirs).entry(dir.to_path_buf()).or_default());
        let mut state = lock(&shared.state);
        state.issued += 1;
        let ticket = state.issued;
        drop(state);
        self.event(dir, SyncEvent::Linked { ticket });
        let mut state = lock(&shared.state);
        loop {
            if state.decided >= ticket {
                return verdict(&mut state, ticket);
            }
            if state.syncing {
                state = shared
                    .done
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            // Lead: this fsync covers every ticket handed out until now.
            state.syncing = true;
            let (after, through) = (state.decided, state.issued);
            drop(state);
            self.event(dir, SyncEvent::Started { through });
            let result = fsync();
            self.event(
                dir,
                SyncEvent::Finished {
                    through,
                    ok: result.is_ok(),
                },
            );
            state = lock(&shared.state);
            state.syncing = false;
            state.decided = through;
            if let Err(e) = result {
                state.failures.push(Failure {
                    after,
                    through,
                    kind: e.kind(),
                    message: e.to_string(),
                    unread: through - after,
                });
            }
            shared.done.notify_all();
        }
    }
}

/// The verdict of `ticket`'s fsync: the error of a failed one (read once
/// per ticket it covered), else success.
fn verdict(state: &mut State, ticket: u64) -> io::Result<()> {
    let Some(i) = state
        .failures
        .iter()
        .position(|f| f.after < ticket && ticket <= f.through)
    else {
        return Ok(());
    };
    let error = state.failures.get_mut(i).map(|f| {
        f.unread = f.unread.saturating_sub(1);
        io::Error::new(
            f.kind,
            format!(
                "{} (a directory fsync shared by concurrent creates)",
                f.message
            ),
        )
    });
    if state.failures.get(i).is_some_and(|f| f.unread == 0) {
        state.failures.swap_remove(i);
    }
    match error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
