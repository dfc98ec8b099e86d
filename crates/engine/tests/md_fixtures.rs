//! Arrays written by the real Linux kernel md driver (testdata/md-kernel, made with mdadm
//! 4.2 on kernel 6.1) assemble in raidd from their image files and read back the pattern the
//! kernel wrote, sector by sector, the degraded one (a7, member 2 failed and stale) included.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use raidd_engine::assemble::{assemble, AssembleOptions, Decision};
use raidd_engine::member::{FileMember, OpenOptions};
use raidd_engine::{ArrayState, Member};

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/md-kernel")
}

/// Decompresses a fixture's member images into `dir` and opens them read-only.
fn open_members(fixture: &Path, dir: &Path) -> Vec<Arc<dyn Member>> {
    let mut names: Vec<_> = std::fs::read_dir(fixture)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".img.xz"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|n| {
            let mut xz = xz2::read::XzDecoder::new(std::fs::File::open(fixture.join(n)).unwrap());
            let mut img = Vec::new();
            xz.read_to_end(&mut img).unwrap();
            let path = dir.join(n.trim_end_matches(".xz"));
            std::fs::write(&path, img).unwrap();
            let opts = OpenOptions {
                write: false,
                direct: None,
                exclusive: true,
                timeout: None,
            };
            Arc::new(FileMember::open(&path, opts).unwrap()) as Arc<dyn Member>
        })
        .collect()
}

fn pattern_sector(s: u64, k: u64) -> [u8; 512] {
    let mut out = [0u8; 512];
    for w in out.chunks_exact_mut(8) {
        w.copy_from_slice(&(s ^ k).to_le_bytes());
    }
    out
}

#[test]
fn kernel_arrays_assemble_and_read_back_exactly() {
    let root = fixtures_dir();
    let mut checked = Vec::new();
    for name in ["a1", "a2", "a3", "a4", "a5", "a6", "a7"] {
        let fixture = root.join(name);
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixture.join("manifest.json")).unwrap())
                .unwrap();
        let k = u64::from_str_radix(
            manifest["pattern"]["K"]
                .as_str()
                .unwrap()
                .trim_start_matches("0x"),
            16,
        )
        .unwrap();
        let size = manifest["array_size_bytes"].as_u64().unwrap();
        let dir = tempfile::Builder::new()
            .prefix("raidd-fx-")
            .tempdir_in("/var/tmp")
            .unwrap();
        let members = open_members(&fixture, dir.path());
        let (bad, state, report) = raidd_rt::block_on(async move {
            let a = assemble(members, AssembleOptions::read_only())
                .await
                .unwrap();
            assert_eq!(a.array.size_bytes(), size, "{name}: array size");
            let mut bad = Vec::new();
            let step = 1 << 20;
            let mut pos = 0;
            while pos < size {
                let n = step.min(size - pos);
                let buf = a.array.read_to_buf(pos, n as usize).await.unwrap();
                for (i, sector) in buf.chunks_exact(512).enumerate() {
                    let s = pos / 512 + i as u64;
                    if sector != pattern_sector(s, k) {
                        bad.push(s);
                    }
                }
                pos += n;
            }
            let status = a.array.status().await;
            (bad, status.state, a.report)
        });
        assert!(
            bad.is_empty(),
            "{name}: {} sectors differ, first at sector {}",
            bad.len(),
            bad[0]
        );
        if name == "a7" {
            assert_eq!(state, ArrayState::Degraded, "a7 runs degraded");
            let m2 = report
                .iter()
                .find(|r| r.member.contains("m2-faulty"))
                .unwrap();
            assert!(
                matches!(
                    m2.decision,
                    Decision::Stale {
                        events: 4,
                        array_events: 8
                    } | Decision::Faulty
                ),
                "a7 m2 must be refused as stale or faulty, got {:?}",
                m2.decision
            );
        } else {
            assert_eq!(state, ArrayState::Clean, "{name} is clean");
        }
        checked.push(name);
    }
    assert_eq!(checked.len(), 7);
}
