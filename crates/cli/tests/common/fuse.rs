//! Member images behind a FUSE filesystem the test can make hang or slow down
//! (`tests/fuse_images.py`): what a network- or FUSE-backed image does when its server
//! stops answering. Unmounted and its process killed (by PID) when dropped.
#![allow(clippy::unwrap_used, dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct FuseImages {
    child: Child,
    pub mount: PathBuf,
    control: PathBuf,
}

impl FuseImages {
    /// Serves `images` (names of files of `bytes` bytes it creates) from `dir/fuse-backing`
    /// at `dir/fuse`; `slow_ms` is how long a slowed write waits.
    pub fn start(dir: &Path, images: &[&str], bytes: u64, slow_ms: u64) -> FuseImages {
        let backing = dir.join("fuse-backing");
        let mount = dir.join("fuse");
        let control = dir.join("fuse-control");
        for d in [&backing, &mount, &control] {
            std::fs::create_dir_all(d).unwrap();
        }
        for name in images {
            let f = std::fs::File::create(backing.join(name)).unwrap();
            f.set_len(bytes).unwrap();
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuse_images.py");
        let child = Command::new("/usr/bin/python3")
            .arg(script)
            .args([&backing, &mount, &control])
            .env("SLOW_MS", slow_ms.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let f = FuseImages {
            child,
            mount,
            control,
        };
        let start = Instant::now();
        let first = f.mount.join(images[0]);
        while !std::fs::metadata(&first).is_ok_and(|m| m.len() == bytes) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the FUSE mount did not come up"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        f
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.mount.join(name)
    }

    /// Every later read, write and fsync waits for ever.
    pub fn hang(&self) {
        std::fs::write(self.control.join("hang"), b"").unwrap();
    }

    /// Every later write waits `slow_ms` first.
    pub fn slow(&self, on: bool) {
        let p = self.control.join("slow");
        if on {
            std::fs::write(p, b"").unwrap();
        } else {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Byte ranges of image `name` that fail every read until written (latent sector
    /// errors), replacing any listed before.
    pub fn set_bad(&self, name: &str, ranges: &[std::ops::Range<u64>]) {
        let text: String = ranges
            .iter()
            .map(|r| format!("{} {}\n", r.start, r.end))
            .collect();
        let tmp = self.control.join(format!("bad-{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.control.join(format!("bad-{name}"))).unwrap();
    }

    /// The byte ranges of image `name` still unreadable.
    pub fn bad(&self, name: &str) -> Vec<std::ops::Range<u64>> {
        std::fs::read_to_string(self.control.join(format!("bad-{name}")))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace().map(|x| x.parse::<u64>().ok());
                Some(it.next()??..it.next()??)
            })
            .collect()
    }

    /// Writes waiting in their slow pause now.
    pub fn slow_writes(&self) -> u64 {
        std::fs::read_to_string(self.control.join("slow-writes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for FuseImages {
    fn drop(&mut self) {
        // The filesystem's process first: requests it never answered then fail, and what
        // waited for them (raidd's abandoned member I/O) completes.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}
