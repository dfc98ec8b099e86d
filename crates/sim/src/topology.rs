//! Where the drives sit: on channels, on controllers, on one bus, under one host. Read from
//! a TOML file or made for `N` drives of one model, one per channel and one channel per
//! controller.
//!
//! ```toml
//! bus_mb_s = 133          # the shared bus (PCI); absent: unlimited
//! host_mb_s = 60          # what the host takes in at most; absent: unlimited
//! [[controller]]
//! mb_s = 100              # the controller's own limit; absent: unlimited
//! [[controller.channel]]
//! mb_s = 66               # absent: only the drives' interfaces limit it
//! overlap = false         # PATA: master and slave take turns, one command at a time
//! drives = ["djna-371350", "djna-371350"]   # master, slave: models by name or file
//! ```
//!
//! Drives become members in the order the file lists them.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::drive::{Drive, DriveSpec};

/// PCI's nominal rate: the bus of a topology made for plain `sim:MODEL` members.
pub const PCI_MB_S: f64 = 133.0;

#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    /// Each distinct model once; channels name them by index.
    pub models: Vec<Drive>,
    pub controllers: Vec<Controller>,
    pub bus_mb_s: Option<f64>,
    pub host_mb_s: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Controller {
    pub mb_s: Option<f64>,
    pub channels: Vec<Channel>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Channel {
    pub mb_s: Option<f64>,
    pub overlap: bool,
    /// Indices into [`Topology::models`].
    pub drives: Vec<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTopology {
    bus_mb_s: Option<f64>,
    host_mb_s: Option<f64>,
    #[serde(default)]
    model: Vec<DriveSpec>,
    controller: Vec<RawController>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawController {
    mb_s: Option<f64>,
    channel: Vec<RawChannel>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawChannel {
    mb_s: Option<f64>,
    #[serde(default = "yes")]
    overlap: bool,
    drives: Vec<String>,
}

fn yes() -> bool {
    true
}

/// The most drives a topology may hold.
pub const MAX_DRIVES: usize = 256;

impl Topology {
    /// `n` drives of `model`, each alone on its channel and controller, on a PCI bus.
    pub fn separate(model: Drive, n: usize) -> Topology {
        Topology {
            models: vec![model],
            controllers: (0..n)
                .map(|_| Controller {
                    mb_s: None,
                    channels: vec![Channel {
                        mb_s: None,
                        overlap: true,
                        drives: vec![0],
                    }],
                })
                .collect(),
            bus_mb_s: Some(PCI_MB_S),
            host_mb_s: None,
        }
    }

    pub fn drives(&self) -> usize {
        self.controllers
            .iter()
            .flat_map(|c| &c.channels)
            .map(|ch| ch.drives.len())
            .sum()
    }

    /// The model of each drive, in member order.
    pub fn drive_models(&self) -> Vec<&Drive> {
        self.controllers
            .iter()
            .flat_map(|c| &c.channels)
            .flat_map(|ch| &ch.drives)
            .map(|&m| &self.models[m])
            .collect()
    }

    /// Reads a topology file; model files it names are found beside it.
    pub fn load(path: &Path) -> Result<Topology, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Topology::parse(&text, &base).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str, base: &Path) -> Result<Topology, String> {
        let raw: RawTopology = toml::from_str(text).map_err(|e| e.to_string())?;
        for (what, r) in [("bus_mb_s", raw.bus_mb_s), ("host_mb_s", raw.host_mb_s)] {
            check_rate(what, r)?;
        }
        let mut t = Topology {
            models: Vec::new(),
            controllers: Vec::new(),
            bus_mb_s: raw.bus_mb_s,
            host_mb_s: raw.host_mb_s,
        };
        let mut names: Vec<String> = Vec::new();
        for spec in raw.model {
            if names.contains(&spec.name) {
                return Err(format!("model {:?} is defined twice", spec.name));
            }
            names.push(spec.name.clone());
            t.models.push(Drive::new(spec)?);
        }
        if raw.controller.is_empty() {
            return Err("no [[controller]]".into());
        }
        for c in raw.controller {
            check_rate("controller mb_s", c.mb_s)?;
            let mut channels = Vec::new();
            for ch in c.channel {
                check_rate("channel mb_s", ch.mb_s)?;
                if ch.drives.is_empty() {
                    return Err("a channel without drives".into());
                }
                if !ch.overlap && ch.drives.len() > 2 {
                    return Err("a PATA channel (overlap = false) holds at most two drives".into());
                }
                let mut drives = Vec::new();
                for name in &ch.drives {
                    let i = match names.iter().position(|n| n == name) {
                        Some(i) => i,
                        None => {
                            let d = load_model(name, base)?;
                            names.push(name.clone());
                            t.models.push(d);
                            t.models.len() - 1
                        }
                    };
                    drives.push(i);
                }
                channels.push(Channel {
                    mb_s: ch.mb_s,
                    overlap: ch.overlap,
                    drives,
                });
            }
            if channels.is_empty() {
                return Err("a controller without channels".into());
            }
            t.controllers.push(Controller {
                mb_s: c.mb_s,
                channels,
            });
        }
        if t.drives() > MAX_DRIVES {
            return Err(format!("more than {MAX_DRIVES} drives"));
        }
        Ok(t)
    }
}

fn check_rate(what: &str, r: Option<f64>) -> Result<(), String> {
    match r {
        Some(x) if !(x.is_finite() && x > 0.0 && x <= 1e6) => {
            Err(format!("{what} must be above 0 and at most 1000000 (MB/s)"))
        }
        _ => Ok(()),
    }
}

/// The built-in models: their TOML, by name.
pub const BUILTIN: &[(&str, &str)] = &[
    ("djna-371350", include_str!("models/djna-371350.toml")),
    ("ata100-7200", include_str!("models/ata100-7200.toml")),
];

/// A model by name (built in) or as a TOML file (a name ending in `.toml`, relative to
/// `base`).
pub fn load_model(name: &str, base: &Path) -> Result<Drive, String> {
    if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name) {
        return parse_model(text);
    }
    if !name.ends_with(".toml") {
        let known: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
        return Err(format!(
            "no drive model {name:?}: built in are {}, or give a .toml file",
            known.join(", ")
        ));
    }
    let path: PathBuf = base.join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_model(&text).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn parse_model(text: &str) -> Result<Drive, String> {
    let spec: DriveSpec = toml::from_str(text).map_err(|e| e.to_string())?;
    Drive::new(spec)
}
