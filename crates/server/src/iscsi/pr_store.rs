//! Persistent reservations kept across restarts (APTPL). Every change is saved by one
//! thread of the target's, in the order the changes were made (they are queued under the
//! LUN's reservations lock), atomically: a temporary file written and fsynced, renamed over
//! the old one, the directory fsynced, so a crash leaves the old state or the new one. The
//! command that made the change waits for its save off the worker's thread, and fails when
//! the save failed.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use futures::channel::oneshot;

/// One save: the reservations' bytes (`None`: APTPL is off, the file goes).
struct Job {
    path: PathBuf,
    bytes: Option<Vec<u8>>,
    done: oneshot::Sender<io::Result<()>>,
}

/// The target's saver.
#[derive(Debug)]
pub struct Store {
    jobs: mpsc::Sender<Job>,
}

impl Store {
    /// Starts the saving thread; it ends when the store is dropped.
    pub fn new() -> io::Result<Store> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("raidd-pr-store".into())
            .spawn(move || {
                for job in rx {
                    let r = save(&job.path, job.bytes.as_deref());
                    if let Err(e) = &r {
                        tracing::error!(file = %job.path.display(), "cannot save persistent reservations: {e}");
                    }
                    let _ = job.done.send(r);
                }
            })?;
        Ok(Store { jobs })
    }

    /// Queues a save of `bytes` at `path`. Called with the LUN's reservations lock held, so
    /// saves land in the order of the changes; the answer says how it went.
    pub fn queue(&self, path: &Path, bytes: Option<Vec<u8>>) -> oneshot::Receiver<io::Result<()>> {
        let (done, answer) = oneshot::channel();
        let job = Job {
            path: path.to_path_buf(),
            bytes,
            done,
        };
        // A saver that has gone drops the job, and with it `done`: the answer is an error.
        let _ = self.jobs.send(job);
        answer
    }
}

/// Waits for a queued save; an error when it failed or the saver is gone.
pub async fn saved(answer: oneshot::Receiver<io::Result<()>>) -> io::Result<()> {
    answer
        .await
        .unwrap_or_else(|_| Err(io::Error::other("the reservation saver has stopped")))
}

/// Writes (or removes) the file atomically and durably.
fn save(path: &Path, bytes: Option<&[u8]>) -> io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    match bytes {
        // Nothing kept there (no file, or no directory at all): nothing to remove.
        None => match std::fs::remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(()),
            r => r?,
        },
        Some(b) => {
            if let Some(dir) = dir {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension("tmp");
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(b)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, path)?;
        }
    }
    // The rename (or removal) is durable once the directory is.
    match dir {
        Some(dir) => std::fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_land_in_order_and_failures_are_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::new().expect("saver");
        let path = dir.path().join("state/pr-x");
        let answers: Vec<_> = (0..20u8)
            .map(|i| store.queue(&path, Some(vec![i; 100])))
            .collect();
        raidd_rt::block_on(async move {
            for a in answers {
                saved(a).await.expect("saved");
            }
        });
        assert_eq!(
            std::fs::read(&path).expect("file"),
            vec![19u8; 100],
            "the last change wins"
        );
        assert!(!path.with_extension("tmp").exists());
        let gone = store.queue(&path, None);
        raidd_rt::block_on(async move { saved(gone).await.expect("removed") });
        assert!(!path.exists());
        // A directory where the file should be: the save fails, and says so.
        std::fs::create_dir_all(dir.path().join("state/pr-y.tmp")).expect("dir");
        let bad = store.queue(&dir.path().join("state/pr-y"), Some(vec![1]));
        let r = raidd_rt::block_on(async move { saved(bad).await });
        assert!(r.is_err(), "{r:?}");
    }
}
