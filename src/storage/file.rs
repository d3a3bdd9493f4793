//! The local directory backend (`file://PATH`), the embedded default.
//!
//! Responsibility: objects as files under a root directory, with the same
//! guarantees an object store gives: a create is atomic, exclusive and
//! durable when it returns [`Created::New`].
//!
//! How a create works (see `rfcs/0002-storage.md` for why):
//! 1. the bytes go to a temporary file in the key's own directory: an
//!    unnamed one (`O_TMPFILE`) where the kernel and the file system have
//!    it and a directory fsync is known to make its link durable (ext4 and
//!    XFS, with `/proc` mounted), else one named
//!    `.objwal-tmp-<pid>-<counter>` (a name no key may use);
//! 2. the temporary file is fsynced;
//! 3. it is hard-linked to the final name (`linkat` of `/proc/self/fd/N`
//!    for an unnamed one); a link never replaces, so an existing key fails
//!    with `EEXIST` and becomes [`Created::AlreadyExists`];
//! 4. a named temporary is removed, and the create returns only after a
//!    directory fsync that started after its link ([`dir_sync`]: concurrent
//!    creates in one directory share one fsync, which covers every link
//!    made before it started). If that fsync fails, the new entry is removed
//!    again: visible is not durable, and a later fsync may report success
//!    without writing it (Linux forgets the error), so no read-back may see it.
//!
//! Missing parent directories are created one by one and each new
//! directory's parent is fsynced; the first create in a directory of a
//! process also fsyncs the directory's ancestors, so an entry a crashed
//! process left unsynced is made durable before anything is put under it.
//!
//! Invariants: no torn object is ever visible under a key (it only appears by
//! `link` of a complete, synced file); temporary files are never listed;
//! temporary files of dead processes are removed by
//! [`ObjectStorage::remove_leftovers`], which only a writer calls (a writer's
//! open, `objwal repair --yes`): opening a store and reading it changes
//! nothing in the directory (beyond creating the root when it is missing).
//! Deletes are not fsynced: a delete that an OS crash undoes only brings back
//! an object that was already obsolete.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::dir_sync::DirSyncs;
use super::StorageErrorKind;
use super::{check_range, sort_listing, Created, ObjectMeta, ObjectStorage, StorageError, Suffix};

#[cfg(test)]
pub(crate) use super::dir_sync::SyncEvent;

/// Every temporary file's name starts with this; no key part may.
pub const TEMP_MARKER: &str = ".objwal-tmp-";

/// A temporary file older than this is removed by a writer's cleanup even if
/// its process seems alive (where liveness cannot be checked, this is the only rule).
const STALE_TEMP_AGE: Duration = Duration::from_secs(3600);

/// Numbers temporary files within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A durable object store in a local directory.
#[derive(Debug, Clone)]
pub struct FileStorage {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    /// Directories this handle has made sure are durable (created and
    /// fsynced in their parent, up to the root).
    synced_dirs: Mutex<HashSet<PathBuf>>,
    /// Keys this handle linked whose directory fsync failed and whose entry
    /// could not be removed again: visible but not durable, so reads of them
    /// fail (a create's read-back must never take them for durable) until a
    /// create replaces them.
    unsynced: Mutex<HashSet<PathBuf>>,
    /// The shared directory fsyncs after links.
    dir_syncs: DirSyncs,
    /// Keys a create of this store works on now, each with its turn: a
    /// second create of a key waits until the first returned, its undo
    /// included (issue 30 item 10).
    creating: Mutex<std::collections::HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// Per directory: whether creates there use an unnamed temporary file
    /// (`O_TMPFILE`); decided at the first create, and turned off for good
    /// when the kernel refuses one.
    unnamed_temps: Mutex<std::collections::HashMap<PathBuf, bool>>,
    /// Test hook: directory fsyncs still to fail.
    #[cfg(any(test, feature = "testing"))]
    fail_dir_syncs: std::sync::atomic::AtomicUsize,
    /// Test hook: directory fsyncs still to slow down, and by how much.
    #[cfg(any(test, feature = "testing"))]
    slow_dir_syncs: Mutex<(usize, std::time::Duration)>,
    /// Test hook: where the steps a power loss depends on are journaled.
    #[cfg(any(test, feature = "testing"))]
    journal: std::sync::OnceLock<super::power_loss::Journal>,
}

impl FileStorage {
    /// Opens (creating it durably when missing) the directory `root`.
    /// Nothing in an existing directory is touched: the temporary files of
    /// processes that no longer run are removed by
    /// [`remove_leftovers`](ObjectStorage::remove_leftovers), which a
    /// writer's open calls.
    ///
    /// This does blocking I/O; call it before or outside async code, or
    /// through `spawn_blocking`.
    pub fn open(root: impl Into<PathBuf>) -> Result<FileStorage, StorageError> {
        let root = root.into();
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir()
                .map_err(|e| io_error(e, None))?
                .join(root)
        };
        create_dirs_durably(&root).map_err(|e| io_error(e, None))?;
        Ok(FileStorage {
            inner: Arc::new(Inner {
                root,
                synced_dirs: Mutex::new(HashSet::new()),
                unsynced: Mutex::new(HashSet::new()),
                dir_syncs: DirSyncs::default(),
                unnamed_temps: Mutex::new(std::collections::HashMap::new()),
                creating: Mutex::new(std::collections::HashMap::new()),
                #[cfg(any(test, feature = "testing"))]
                fail_dir_syncs: std::sync::atomic::AtomicUsize::new(0),
                #[cfg(any(test, feature = "testing"))]
                slow_dir_syncs: Mutex::new((0, std::time::Duration::ZERO)),
                #[cfg(any(test, feature = "testing"))]
                journal: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Test hook (feature `testing`): the next `n` fsyncs of a directory
    /// after a link (or before a read in such a directory) fail with EIO.
    #[cfg(any(test, feature = "testing"))]
    pub fn fail_next_dir_syncs(&self, n: usize) {
        self.inner.fail_dir_syncs.store(n, Ordering::SeqCst);
    }

    /// Test hook (feature `testing`): the next `n` fsyncs of a directory
    /// after a link each take `delay` longer (a disk under load), so that
    /// requests on the same key (a hedge, a repeat, another process's
    /// create) meet an entry whose directory fsync has not finished.
    #[cfg(any(test, feature = "testing"))]
    pub fn slow_next_dir_syncs(&self, n: usize, delay: std::time::Duration) {
        *lock(&self.inner.slow_dir_syncs) = (n, delay);
    }

    /// Test hook: `hook` sees every link and every shared directory fsync
    /// from now on, and may block to order threads.
    #[cfg(test)]
    pub(crate) fn on_dir_sync(&self, hook: super::dir_sync::Hook) {
        self.inner.dir_syncs.set_hook(hook);
    }

    /// Test hook (feature `testing`): from now on, journal to `journal`
    /// (appending) each step of a create that decides what a power loss
    /// keeps, so that [`power_loss::apply`](super::power_loss::apply) can
    /// turn the directory into what a power loss would leave after the
    /// process is killed. A store journals to one file only.
    #[cfg(any(test, feature = "testing"))]
    pub fn record_power_loss(&self, journal: &Path) -> Result<(), StorageError> {
        let opened = super::power_loss::Journal::create(journal).map_err(|e| io_error(e, None))?;
        self.inner
            .journal
            .set(opened)
            .map_err(|_| StorageError::permanent("this store already journals for a power loss"))
    }

    /// Test hook (feature `testing`): creates use named temporary files,
    /// as where `O_TMPFILE` is missing.
    #[cfg(any(test, feature = "testing"))]
    pub fn use_named_temps(&self) {
        let mut temps = lock(&self.inner.unnamed_temps);
        temps.clear();
        temps.insert(PathBuf::new(), false);
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    async fn blocking<T, F>(&self, key: &str, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, StorageError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| {
                StorageError::permanent(format!("file storage task failed: {e}")).with_key(key)
            })?
    }
}

impl Inner {
    /// The path of a valid key.
    fn path(&self, key: &str) -> Result<PathBuf, StorageError> {
        validate_key(key)?;
        Ok(self.root.join(key))
    }

    /// Makes sure `dir` exists and its entry (and its ancestors' up to the
    /// root) is durable; done once per directory and handle.
    fn ensure_dir(&self, dir: &Path) -> io::Result<()> {
        let known = |d: &Path| {
            self.synced_dirs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains(d)
        };
        if dir == self.root || known(dir) {
            return Ok(());
        }
        let rel = dir.strip_prefix(&self.root).map_err(io::Error::other)?;
        let mut current = self.root.clone();
        for part in rel.components() {
            let parent = current.clone();
            current.push(part);
            if known(&current) {
                continue;
            }
            match fs::create_dir(&current) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            // Also when it already existed: a racing creator or a crashed
            // process may not have synced its entry yet.
            sync_dir(&parent)?;
        }
        self.synced_dirs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(dir.to_path_buf());
        Ok(())
    }

    /// Creates `key` in its turn: creates of one key in this store run one
    /// after the other. A create that linked and whose directory fsync
    /// failed removes its entry again (visible is not durable); a create of
    /// the same key that met that entry would answer "already exists", its
    /// caller would read back the bytes (its own, for a hedge or the repeat
    /// of a request that timed out while its thread went on) and take them
    /// as landed, and the undo would then remove them. In turns, the second
    /// create meets the key as the first left it. (Across processes the
    /// race remains, and loses nothing acknowledged: only the writer whose
    /// bytes they are acknowledges them, and its own create, undo included,
    /// returns before its read-back; the other process at most takes the
    /// key as another's, which a later listing corrects: rfcs/0006.)
    fn create(&self, key: &str, data: &[u8]) -> Result<Created, StorageError> {
        let path = self.path(key)?;
        let turn = {
            let mut creating = lock(&self.creating);
            let turn = creating.entry(path.clone()).or_default();
            #[cfg(test)]
            if Arc::strong_count(turn) > 1 {
                self.dir_syncs
                    .event(&path, super::dir_sync::SyncEvent::KeyBusy);
            }
            Arc::clone(turn)
        };
        let result = {
            let _mine = lock(&turn);
            self.create_now(&path, key, data)
        };
        let mut creating = lock(&self.creating);
        // The map's and ours: nobody else waits for the key.
        if Arc::strong_count(&turn) == 2 {
            creating.remove(&path);
        }
        result
    }

    fn create_now(&self, path: &Path, key: &str, data: &[u8]) -> Result<Created, StorageError> {
        let path = path.to_path_buf();
        let err = |e| io_error(e, Some(key));
        let dir = path
            .parent()
            .ok_or_else(|| StorageError::permanent("key has no parent").with_key(key))?;
        self.ensure_dir(dir).map_err(err)?;
        let (temp, mut file) = self.create_temp(dir).map_err(err)?;
        let written = file
            .write_all(data)
            .and_then(|()| self.sync_bytes(&file, key));
        if let Err(e) = written {
            drop(file);
            if let Some(tmp) = &temp {
                let _ = fs::remove_file(tmp);
            }
            return Err(err(e));
        }
        let stale = lock(&self.unsynced).remove(&path);
        if stale {
            // Our own entry whose directory fsync failed: write it afresh.
            let _ = fs::remove_file(&path);
        }
        let linked = match &temp {
            Some(tmp) => {
                drop(file);
                let linked = fs::hard_link(tmp, &path);
                let _ = fs::remove_file(tmp);
                linked
            }
            None => {
                let linked = link_unnamed(&file, &path);
                drop(file);
                linked
            }
        };
        let created = match linked {
            Ok(()) => {
                #[cfg(any(test, feature = "testing"))]
                self.journal(|j| j.linked(key));
                Created::New
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                if fs::symlink_metadata(&path).map_err(err)?.is_dir() {
                    return Err(StorageError::permanent(
                        "a directory exists under this key (a key is a prefix of another key)",
                    )
                    .with_key(key));
                }
                Created::AlreadyExists
            }
            Err(e) => return Err(err(e)),
        };
        // For AlreadyExists too: the existing entry may be another handle's
        // whose directory fsync has not happened yet.
        let synced = self
            .dir_syncs
            .sync_after_link(dir, || self.sync_dir_after_link(dir));
        if let Err(e) = synced {
            if created == Created::New {
                return Err(self.undo_unsynced_link(&path, key, e));
            }
            return Err(err(e));
        }
        Ok(created)
    }

    /// A new temporary file in `dir`: unnamed (`None`) where creates there
    /// use `O_TMPFILE`, else with its name.
    fn create_temp(&self, dir: &Path) -> io::Result<(Option<PathBuf>, File)> {
        if self.unnamed_temps_in(dir) {
            match open_unnamed(dir) {
                Ok(file) => return Ok((None, file)),
                Err(e) if unnamed_unsupported(&e) => {
                    tracing::info!(dir = %dir.display(), error = %e, "O_TMPFILE refused: named temporary files from now on");
                    lock(&self.unnamed_temps).insert(dir.to_path_buf(), false);
                }
                Err(e) => return Err(e),
            }
        }
        let (tmp, file) = create_named_temp(dir)?;
        Ok((Some(tmp), file))
    }

    /// Whether creates in `dir` use an unnamed temporary file: where the
    /// file system is one whose directory fsync makes a `linkat` of it
    /// durable with its link count (a journaled ext4 or XFS, which commit
    /// the new entry, the link count and the orphan list in one
    /// transaction), and `/proc/self/fd` is there to link it by.
    fn unnamed_temps_in(&self, dir: &Path) -> bool {
        let mut temps = lock(&self.unnamed_temps);
        if temps.get(Path::new("")) == Some(&false) {
            return false;
        }
        if let Some(&known) = temps.get(dir) {
            return known;
        }
        let usable = cfg!(target_os = "linux")
            && Path::new("/proc/self/fd").is_dir()
            && rustix::fs::statfs(dir).is_ok_and(|st| journaled(st.f_type));
        temps.insert(dir.to_path_buf(), usable);
        usable
    }

    /// Fsyncs `dir` after a link (the test hook can make it fail).
    fn sync_dir_after_link(&self, dir: &Path) -> io::Result<()> {
        #[cfg(any(test, feature = "testing"))]
        if self
            .fail_dir_syncs
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(io::Error::other("injected directory fsync failure (EIO)"));
        }
        #[cfg(any(test, feature = "testing"))]
        {
            let delay = {
                let mut slow = lock(&self.slow_dir_syncs);
                let delay = (slow.0 > 0).then_some(slow.1);
                slow.0 = slow.0.saturating_sub(1);
                delay
            };
            if let Some(delay) = delay {
                // On the blocking thread of the create, as a slow fsync.
                std::thread::sleep(delay);
            }
        }
        #[cfg(any(test, feature = "testing"))]
        if let Some(journal) = self.journal.get() {
            let below = dir.strip_prefix(&self.root).unwrap_or(dir);
            let n = journal.dir_sync_starts(&below.to_string_lossy());
            sync_dir(dir)?;
            journal.dir_synced(n);
            return Ok(());
        }
        sync_dir(dir)
    }

    /// Fsyncs a new object's bytes before its link (journaled for the
    /// power-loss simulation).
    fn sync_bytes(&self, file: &File, _key: &str) -> io::Result<()> {
        file.sync_all()?;
        #[cfg(any(test, feature = "testing"))]
        self.journal(|j| j.data_synced(_key));
        Ok(())
    }

    #[cfg(any(test, feature = "testing"))]
    fn journal(&self, step: impl FnOnce(&super::power_loss::Journal)) {
        if let Some(journal) = self.journal.get() {
            step(journal);
        }
    }

    /// A new entry whose directory fsync failed is visible but not durable
    /// (and a later fsync may report success without writing it, as Linux
    /// does after an I/O error): remove it, so no read-back can take it for
    /// durable and a repeated create writes it afresh. When even the removal
    /// fails, the key is remembered and reads of it fail.
    fn undo_unsynced_link(&self, path: &Path, key: &str, e: io::Error) -> StorageError {
        let removed = fs::remove_file(path);
        let unsynced = || {
            self.unsynced
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        };
        let detail = match removed {
            Ok(()) => "the new entry was removed".to_owned(),
            Err(r) => {
                unsynced().insert(path.to_path_buf());
                format!("the new entry could not be removed ({r}) and reads of it fail")
            }
        };
        StorageError::transient(format!(
            "the directory fsync after linking failed ({e}); {detail}"
        ))
        .with_key(key)
        .with_source(e)
    }

    fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let (file, size) = self.open_object(key)?;
        let r = check_range(key, &range, size)?;
        let mut buf = vec![0u8; r.len()];
        file.read_exact_at(&mut buf, range.start)
            .map_err(|e| io_error(e, Some(key)))?;
        Ok(Bytes::from(buf))
    }

    /// The last `len` bytes of `key` (all of it when shorter), and its size.
    fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        let (file, size) = self.open_object(key)?;
        let start = size.saturating_sub(len);
        let want = usize::try_from(size - start)
            .map_err(|_| StorageError::permanent("range too large").with_key(key))?;
        let mut buf = vec![0u8; want];
        file.read_exact_at(&mut buf, start)
            .map_err(|e| io_error(e, Some(key)))?;
        Ok(Suffix {
            data: Bytes::from(buf),
            size,
        })
    }

    /// The object at `key`, open for reading, and its size: not-found for
    /// a directory, and a transient error for an entry whose directory
    /// fsync failed (visible is not durable).
    fn open_object(&self, key: &str) -> Result<(File, u64), StorageError> {
        let path = self.path(key)?;
        let err = |e| io_error(e, Some(key));
        let unsynced = self
            .unsynced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(&path);
        if unsynced {
            // Visible is not durable: its directory fsync failed.
            return Err(StorageError::transient(
                "this entry's directory fsync failed: it is not durable",
            )
            .with_key(key));
        }
        let file = File::open(&path).map_err(err)?;
        let meta = file.metadata().map_err(err)?;
        if !meta.is_file() {
            return Err(StorageError::not_found(key));
        }
        Ok((file, meta.len()))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        // Walk the deepest directory the prefix names for sure, filter by the
        // whole prefix (a prefix need not end at a `/`).
        let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        if !dir_part.is_empty() {
            validate_key(dir_part)?;
        }
        let mut out = Vec::new();
        let mut stack = vec![(self.root.join(dir_part), dir_part.to_owned())];
        while let Some((dir, rel)) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(io_error(e, Some(prefix))),
            };
            for entry in entries {
                let entry = entry.map_err(|e| io_error(e, Some(prefix)))?;
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                    tracing::warn!(path = %entry.path().display(), "skipping a non-UTF-8 file name");
                    continue;
                };
                if name.starts_with(TEMP_MARKER) {
                    continue;
                }
                let key = if rel.is_empty() {
                    name
                } else {
                    format!("{rel}/{name}")
                };
                let file_type = match entry.file_type() {
                    Ok(t) => t,
                    Err(e) if is_gone(&e) => continue,
                    Err(e) => return Err(io_error(e, Some(&key))),
                };
                if file_type.is_dir() {
                    // Only descend where keys with the prefix can be.
                    if key.starts_with(prefix) || prefix.starts_with(&format!("{key}/")) {
                        stack.push((entry.path(), key));
                    }
                } else if file_type.is_file() && key.starts_with(prefix) {
                    match entry.metadata() {
                        Ok(m) => out.push(ObjectMeta { key, size: m.len() }),
                        Err(e) if is_gone(&e) => {}
                        Err(e) => return Err(io_error(e, Some(&key))),
                    }
                }
            }
        }
        Ok(sort_listing(out))
    }

    /// Removes the temporary files of dead processes in the directory
    /// `prefix` names (up to its last `/`) and below it.
    fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        let dir_part = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        if !dir_part.is_empty() {
            validate_key(dir_part)?;
        }
        let dir = self.root.join(dir_part);
        let removed = remove_stale_temp_files(&dir).map_err(|e| io_error(e, Some(prefix)))?;
        if removed > 0 {
            tracing::info!(dir = %dir.display(), removed, "removed leftover temporary files");
        }
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<(), StorageError> {
        let path = self.path(key)?;
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(e, Some(key))),
        }
    }
}

#[async_trait::async_trait]
impl ObjectStorage for FileStorage {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        let k = key.to_owned();
        self.blocking(key, move |inner| inner.create(&k, &data))
            .await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        let k = key.to_owned();
        self.blocking(key, move |inner| inner.read(&k, range)).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        let k = key.to_owned();
        self.blocking(key, move |inner| inner.read_suffix(&k, len))
            .await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let p = prefix.to_owned();
        self.blocking(prefix, move |inner| inner.list(&p)).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let k = key.to_owned();
        self.blocking(key, move |inner| inner.delete(&k)).await
    }

    fn charges_per_request(&self) -> bool {
        false
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        let p = prefix.to_owned();
        self.blocking(prefix, move |inner| inner.remove_leftovers(&p))
            .await
    }
}

/// Refuses keys that are not plain relative paths under the root, or that
/// use the temporary-file marker.
fn validate_key(key: &str) -> Result<(), StorageError> {
    let refuse =
        |why: &str| Err(StorageError::permanent(format!("invalid key: {why}")).with_key(key));
    if key.is_empty() {
        return refuse("it is empty");
    }
    if key.starts_with('/') {
        return refuse("it must be relative");
    }
    if key.contains('\0') {
        return refuse("it contains a NUL byte");
    }
    for part in key.split('/') {
        match part {
            "" => return refuse("it has an empty part"),
            "." | ".." => return refuse("it has a '.' or '..' part"),
            p if p.starts_with(TEMP_MARKER) => {
                return refuse("a part uses the reserved temporary-file marker")
            }
            _ => {}
        }
    }
    Ok(())
}

/// Locks a mutex, taking over a poisoned one (its data is a cache or a set
/// that a panic cannot leave half-updated).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// ext4 (also ext2/3, one magic) and XFS: journaled, so a directory fsync
/// commits a link together with the inode's link count.
fn journaled(f_type: impl TryInto<i64>) -> bool {
    const EXT4_SUPER_MAGIC: i64 = 0xef53;
    const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
    f_type
        .try_into()
        .is_ok_and(|t| t == EXT4_SUPER_MAGIC || t == XFS_SUPER_MAGIC)
}

/// An unnamed temporary file in `dir` (`O_TMPFILE`): nothing is listed or
/// left behind if the process dies before it is linked.
fn open_unnamed(dir: &Path) -> io::Result<File> {
    use rustix::fs::{Mode, OFlags};
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        dir,
        OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o666),
    )
    .map_err(io::Error::from)?;
    Ok(File::from(fd))
}

/// Whether an `O_TMPFILE` open failed because the kernel or the file
/// system has none (not because of the directory).
fn unnamed_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(code) if code == rustix::io::Errno::OPNOTSUPP.raw_os_error()
            || code == rustix::io::Errno::ISDIR.raw_os_error()
            || code == rustix::io::Errno::INVAL.raw_os_error()
    )
}

/// Links an unnamed temporary file at `path`; fails with `EEXIST` when a
/// file is there (never replaces).
fn link_unnamed(file: &File, path: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd_path = format!("/proc/self/fd/{}", file.as_raw_fd());
    rustix::fs::linkat(
        rustix::fs::CWD,
        fd_path.as_str(),
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_FOLLOW,
    )
    .map_err(io::Error::from)
}

/// Creates a new named temporary file in `dir`, never reusing a name.
fn create_named_temp(dir: &Path) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!("{TEMP_MARKER}{pid}-{n}"));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Fsyncs a directory, making its entries durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and its missing ancestors, fsyncing each new directory's
/// parent.
fn create_dirs_durably(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut current = dir;
    while !current.is_dir() {
        missing.push(current);
        match current.parent() {
            Some(p) => current = p,
            None => break,
        }
    }
    for d in missing.into_iter().rev() {
        match fs::create_dir(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        if let Some(parent) = d.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Removes, under `root` (absent: nothing to do), the temporary files of
/// processes that no longer run (or that are older than
/// [`STALE_TEMP_AGE`]). Returns how many.
pub(crate) fn remove_stale_temp_files(root: &Path) -> io::Result<usize> {
    let mut removed = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if is_gone(&e) => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let file_type = match entry.file_type() {
                Ok(t) => t,
                Err(e) if is_gone(&e) => continue,
                Err(e) => return Err(e),
            };
            if file_type.is_dir() {
                stack.push(entry.path());
                continue;
            }
            let name = entry.file_name();
            let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TEMP_MARKER)) else {
                continue;
            };
            if is_stale(rest, &entry) {
                match fs::remove_file(entry.path()) {
                    Ok(()) => removed += 1,
                    Err(e) if is_gone(&e) => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(removed)
}

/// Whether the temporary file named `<pid>-<n>` (after the marker) can no
/// longer be in use.
fn is_stale(rest: &str, entry: &fs::DirEntry) -> bool {
    let old = entry
        .metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age > STALE_TEMP_AGE);
    if old {
        return true;
    }
    let pid = rest.split('-').next().and_then(|p| p.parse::<u32>().ok());
    match pid {
        None => true,
        Some(pid) if pid == std::process::id() => false,
        Some(pid) => !process_alive(pid),
    }
}

#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32) -> bool {
    // Cannot tell: rely on the age rule alone.
    true
}

/// Whether a path vanished (or never was a directory) under a walk.
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Maps an I/O error: not-found; interruptions, timeouts and a full disk are
/// transient; everything else is permanent.
pub(crate) fn io_error(e: io::Error, key: Option<&str>) -> StorageError {
    use io::ErrorKind as K;
    let kind = match e.kind() {
        K::NotFound => {
            return match key {
                Some(k) => StorageError::not_found(k),
                None => StorageError::permanent(e.to_string()).with_source(e),
            }
        }
        K::Interrupted | K::TimedOut | K::WouldBlock | K::StorageFull | K::QuotaExceeded => {
            StorageErrorKind::Transient
        }
        _ => StorageErrorKind::Permanent,
    };
    let err = StorageError::new(kind, e.to_string()).with_source(e);
    match key {
        Some(k) => err.with_key(k),
        None => err,
    }
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
