//! Members that are real block devices (loop devices over files): size and logical block
//! size from the kernel, O_DIRECT I/O through io_uring, exclusive open, and an array on them.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use raidd_engine::create::{create, CreateSpec};
use raidd_engine::member::{FileMember, OpenOptions};
use raidd_engine::{ErrorKind, Member};
use raidd_layout::Level;

/// A loop device over a file, detached on drop.
struct Loop {
    dev: PathBuf,
}

impl Loop {
    fn new(file: &Path, sector_size: u32) -> Loop {
        let out = Command::new("losetup")
            .args([
                "--find",
                "--show",
                "--sector-size",
                &sector_size.to_string(),
            ])
            .arg(file)
            .output()
            .expect("losetup (util-linux) is needed for the block device tests");
        assert!(
            out.status.success(),
            "losetup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Loop {
            dev: PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()),
        }
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

fn loops(dir: &Path, n: usize, size: u64, sector_size: u32) -> Vec<Loop> {
    (0..n)
        .map(|i| {
            let f = dir.join(format!("bd{i}.img"));
            std::fs::File::create(&f).unwrap().set_len(size).unwrap();
            Loop::new(&f, sector_size)
        })
        .collect()
}

#[test]
fn loop_devices_as_members() {
    if !Path::new("/dev/loop-control").exists() {
        panic!("no /dev/loop-control: this test needs loop devices (run as root on Linux)");
    }
    let dir = tempfile::Builder::new()
        .prefix("raidd-bd-")
        .tempdir_in("/var/tmp")
        .unwrap();
    for sector_size in [512u32, 4096] {
        let devs = loops(dir.path(), 3, 32 << 20, sector_size);
        let members: Vec<Arc<dyn Member>> = devs
            .iter()
            .map(|l| {
                Arc::new(FileMember::open(&l.dev, OpenOptions::default()).unwrap())
                    as Arc<dyn Member>
            })
            .collect();
        for m in &members {
            assert_eq!(m.info().size_bytes, 32 << 20);
            assert_eq!(m.info().block_size, sector_size);
        }
        // Exclusive: a second open of an in-use device is refused.
        let again = FileMember::open(&devs[0].dev, OpenOptions::default());
        assert_eq!(
            again.unwrap_err().kind(),
            ErrorKind::Conflict,
            "O_EXCL refuses a busy device"
        );
        raidd_rt::block_on(async move {
            let spec = CreateSpec {
                name: format!("bd{sector_size}"),
                homehost: "test".into(),
                level: Level::Raid5,
                layout: None,
                chunk_sectors: Some(128),
                members: members.into_iter().map(Some).collect(),
                size_sectors: None,
                assume_clean: true,
                force: false,
                bitmap_chunk: None,
                ppl: false,
                journal: None,
                checksums: None,
            };
            let a = create(spec).await.unwrap();
            assert_eq!(a.array.block_size(), sector_size);
            let mut data = raidd_rt::AlignedBuf::zeroed(3 << 20);
            raidd_engine::pattern::fill(&mut data, 2048, 1, 77);
            a.array.write_buf(1 << 20, data).await.unwrap();
            let back = a.array.read_to_buf(1 << 20, 3 << 20).await.unwrap();
            assert!(raidd_engine::pattern::verify(&back, 2048, 77, |_| 1).is_empty());
            // A 512-byte request on a 4 KiB-sector array is refused, not split badly.
            if sector_size == 4096 {
                let e = a.array.read_to_buf(512, 512).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Unaligned);
            }
            a.array.close().await.unwrap();
        });
    }
}
