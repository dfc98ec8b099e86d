//! The layouts against arrays written by the real kernel md (the md-kernel fixtures: member
//! images filled through /dev/mdX with a pattern that names every array sector).
//!
//! The fixtures live in `testdata/md-kernel` of the repository (`$RAIDD_MD_FIXTURES` may point
//! elsewhere).

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use raidd_layout::{
    Geometry, Level, ParityLayout, Raid0Layout, Raid10Layout, Reverse, SECTOR_SIZE,
};
use serde_json::Value;

const SECTOR: usize = SECTOR_SIZE as usize;

fn fixture_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("RAIDD_MD_FIXTURES").map(PathBuf::from),
        Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/md-kernel")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|dir| dir.join("README.md").exists())
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// One kernel-made array: its geometry and each member's data area.
struct Fixture {
    name: String,
    geometry: Geometry,
    key: u64,
    data: Vec<Vec<u8>>,
}

fn unxz(path: &Path) -> Vec<u8> {
    let file = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    xz2::read::XzDecoder::new(file)
        .read_to_end(&mut out)
        .expect("xz member image");
    out
}

fn geometry_of(m: &Value, sizes: &[u64]) -> Geometry {
    let members = sizes.len();
    let chunk = u32::try_from(u64_of(&m["chunk_bytes"]) / SECTOR_SIZE).expect("chunk");
    let component = u64_of(&m["superblock"]["component_size_sectors"]);
    let layout = u32::try_from(u64_of(&m["layout"]["number"])).expect("layout");
    let level =
        Level::from_md_number(m["level_number"].as_i64().expect("level") as i32).expect("level");
    let result = match level {
        Level::Linear => Geometry::linear(sizes, chunk),
        // Single-zone arrays: the layout field is not in force (feature bit unset).
        Level::Raid0 => Geometry::raid0(sizes, chunk, Raid0Layout::Original),
        Level::Raid1 => Geometry::raid1(members, component),
        Level::Raid10 => {
            let layout = Raid10Layout::from_md_number(layout).expect("raid10 layout");
            Geometry::raid10(members, layout, chunk, component)
        }
        _ => {
            let layout = ParityLayout::from_md_number(layout).expect("parity layout");
            Geometry::parity(level, members, layout, chunk, component)
        }
    };
    result.unwrap_or_else(|e| panic!("{}: {e}", m["name"]))
}

fn load(dir: &Path) -> Fixture {
    let manifest: Value =
        serde_json::from_slice(&fs::read(dir.join("manifest.json")).expect("manifest"))
            .expect("manifest.json");
    let members = manifest["members"].as_array().expect("members");
    let mut data = vec![Vec::new(); members.len()];
    let mut sizes = vec![0u64; members.len()];
    for member in members {
        let role = usize::try_from(u64_of(&member["role"])).expect("role");
        let image = unxz(&dir.join(member["name"].as_str().expect("name")));
        let offset = u64_of(&member["data_offset_sectors"]) as usize * SECTOR;
        sizes[role] = u64_of(&member["data_size_sectors"]);
        data[role] = image[offset..offset + sizes[role] as usize * SECTOR].to_vec();
    }
    let geometry = geometry_of(&manifest, &sizes);
    assert_eq!(
        geometry.array_sectors() * SECTOR_SIZE,
        u64_of(&manifest["array_size_bytes"]),
        "{}: array size as the kernel reported it",
        manifest["name"]
    );
    let key = u64::from_str_radix(
        manifest["pattern"]["K"]
            .as_str()
            .expect("K")
            .trim_start_matches("0x"),
        16,
    )
    .expect("pattern key");
    Fixture {
        name: manifest["name"].as_str().expect("name").to_string(),
        geometry,
        key,
        data,
    }
}

impl Fixture {
    fn word(&self, member: usize, sector: u64, index: usize) -> u64 {
        let at = sector as usize * SECTOR + index * 8;
        u64::from_le_bytes(self.data[member][at..at + 8].try_into().expect("8 bytes"))
    }

    /// Whether member sector `sector` holds the pattern of array sector `array_sector`.
    fn holds(&self, member: usize, sector: u64, array_sector: u64) -> bool {
        let want = array_sector ^ self.key;
        self.word(member, sector, 0) == want && self.word(member, sector, 63) == want
    }
}

/// GF(2^8) with md's polynomial 0x11d: `x * 2^power`.
fn gf_mul_pow2(mut x: u8, power: u8) -> u8 {
    for _ in 0..power {
        x = (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 };
    }
    x
}

fn check_data(fx: &Fixture) {
    let g = &fx.geometry;
    for sector in 0..g.array_sectors() {
        let piece = &g.pieces(sector, 1)[0];
        for loc in &piece.copies {
            assert!(
                fx.holds(loc.member, loc.sector, sector),
                "{}: sector {sector} not at {loc:?}",
                fx.name
            );
        }
    }
    // And from the members' side: every data sector holds what reverse says.
    for member in 0..g.members() {
        for sector in 0..g.member_used_sectors(member) {
            if let Reverse::Data { array_sector, .. } = g.reverse(member, sector) {
                assert!(
                    fx.holds(member, sector, array_sector),
                    "{}: {member}@{sector}",
                    fx.name
                );
            }
        }
    }
}

/// P is the XOR of the stripe's data and Q md's syndrome with the stripe map's coefficients.
fn check_parity(fx: &Fixture) {
    let Some(p) = fx.geometry.as_parity() else {
        return;
    };
    for stripe in 0..p.stripes() {
        let map = p.stripe_map(stripe);
        // Every seventh sector of the chunk, first and last included: enough to catch a
        // misplaced parity chunk or a wrong coefficient, at a fraction of the cost.
        let chunk = u64::from(p.chunk_sectors);
        let offsets = (0..chunk).step_by(7).chain([chunk - 1]);
        for offset in offsets {
            let sector = p.member_sector(stripe, offset);
            let at = sector as usize * SECTOR;
            let mut xor = [0u8; SECTOR];
            let mut syndrome = [0u8; SECTOR];
            for (dd, &member) in map.data.iter().enumerate() {
                let bytes = &fx.data[member][at..at + SECTOR];
                for i in 0..SECTOR {
                    xor[i] ^= bytes[i];
                    if let Some(&coef) = map.q_coef.get(dd) {
                        syndrome[i] ^= gf_mul_pow2(bytes[i], coef);
                    }
                }
            }
            assert_eq!(
                &fx.data[map.p][at..at + SECTOR],
                &xor[..],
                "{}: P of stripe {stripe}",
                fx.name
            );
            if let Some(q) = map.q {
                assert_eq!(
                    &fx.data[q][at..at + SECTOR],
                    &syndrome[..],
                    "{}: Q of stripe {stripe}",
                    fx.name
                );
            }
        }
    }
}

#[test]
fn kernel_md_arrays_read_back_through_the_layouts() {
    let dir = fixture_dir().expect("md-kernel fixtures are in testdata/ of the repository");
    let mut names = Vec::new();
    let mut dirs: Vec<PathBuf> = fs::read_dir(&dir)
        .expect("fixture dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("manifest.json").exists())
        .collect();
    dirs.sort();
    for fixture in dirs {
        let fx = load(&fixture);
        check_data(&fx);
        check_parity(&fx);
        names.push(fx.name);
    }
    assert_eq!(names, ["a1", "a2", "a3", "a4", "a5", "a6", "a7"]);
}
