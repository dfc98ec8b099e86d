//! Volumes in the daemon: what each frontend's entries (exports, LUNs, devices) serve
//! (resolved once, at the start, from the arrays' partition tables), the tables as the
//! reports show them, and changes to them through the control socket.
//!
//! A served volume keeps its place and size while the daemon runs: its clients were told
//! its size, and a volume deleted under them would let their writes land in whatever is
//! made there next. So the control socket refuses to resize or delete one that an export
//! or a LUN serves; it creates volumes at any time (they take free space only), and a new
//! volume is served from the next start if the config names it.

use std::cell::RefCell;

use raidd_admin::exit::{AdminError, AdminResult, Exit};
use raidd_admin::status::VolumeTable;
use raidd_admin::volume::{self, Change, Volume, VolumeRef, EDGE};
use raidd_admin::volume_io;
use raidd_engine::Extent;

use crate::arrays::Served;
use crate::config::Config;
use crate::frontend::Serving;
use crate::frontends::AllServing;

/// A table as read: `None` without one; an error when it cannot be read or used.
type Read = Result<Option<Vec<Volume>>, String>;

/// The table of `served`'s array; arrays too small to hold one have none.
async fn read_table(served: &Served) -> Read {
    let array = served.session.root();
    if array.size_bytes() < 4 * EDGE {
        return Ok(None);
    }
    volume_io::table(array).await.map_err(|e| e.message)
}

/// What `r` (none: the whole array) names on served array `i`.
fn serving(
    served: &[Served],
    tables: &[Read],
    i: usize,
    r: Option<&VolumeRef>,
) -> Result<Serving, String> {
    let array = served[i].session.root();
    let Some(r) = r else {
        return Ok(Serving {
            extent: Extent::whole(array.clone()),
            volume: None,
        });
    };
    let vols = tables[i].as_ref().map_err(Clone::clone)?;
    let vol = volume::find(vols.as_deref(), r, array.name())?;
    let extent = volume_io::extent_of(array, &vol).map_err(|e| e.message)?;
    debug_assert!(
        extent.offset() + extent.size_bytes() <= array.size_bytes(),
        "a volume lies within its array"
    );
    Ok(Serving {
        extent,
        volume: Some(vol),
    })
}

/// What the frontends' entries serve.
pub struct Resolved {
    /// The configuration without the entries whose volume is not there (and what a
    /// frontend drops with them, such as targets left without a LUN).
    pub config: Config,
    /// One per entry of each frontend of `config`.
    pub serving: AllServing,
    pub volumes: Volumes,
}

/// Reads every served array's table and resolves each frontend entry's volume. One whose
/// volume is missing (or whose table cannot be used) is left out with a log line, as an
/// export of an array that did not start is, so the others still serve.
pub async fn resolve(mut config: Config, served: &[Served]) -> Resolved {
    let mut tables = Vec::with_capacity(served.len());
    for s in served {
        let t = read_table(s).await;
        if let Err(e) = &t {
            tracing::warn!(array = %s.config.name, "volumes not usable: {e}");
        }
        tables.push(t);
    }
    let mut users = Vec::new();
    // What one export, LUN or device (`what`) serves, noted as a user of its volume; or
    // `None`, logged, when it cannot be served.
    let mut resolve_one = |array: usize, volume: Option<&VolumeRef>, what: String| match serving(
        served, &tables, array, volume,
    ) {
        Ok(s) => {
            if let Some(v) = &s.volume {
                users.push((array, v.guid.clone(), what));
            }
            Some(s)
        }
        Err(e) => {
            tracing::error!("{what} is not offered: {e}");
            eprintln!("raidd: {what} is not offered: {e}");
            None
        }
    };
    let serving = config.frontends.resolve(&mut resolve_one);
    debug_assert_eq!(tables.len(), served.len(), "one table per served array");
    debug_assert!(
        users.iter().all(|(a, _, _)| *a < served.len()),
        "users of served arrays"
    );
    Resolved {
        config,
        serving,
        volumes: Volumes {
            tables: RefCell::new(tables),
            users: RefCell::new(users),
            lock: futures::lock::Mutex::new(()),
        },
    }
}

/// The daemon's view of its arrays' volumes (on the control thread).
pub struct Volumes {
    /// Each served array's table as last read (indices as the served arrays').
    tables: RefCell<Vec<Read>>,
    /// What serves each volume: (array index, volume GUID, `export NAME`, `LUN N of T` or
    /// `/dev/ublkbN`).
    users: RefCell<Vec<(usize, String, String)>>,
    /// One change to a table at a time: each reads the table, changes it and writes it back.
    lock: futures::lock::Mutex<()>,
}

impl Volumes {
    /// Served array `i`'s volumes, with what serves each, as last read.
    pub fn table(&self, i: usize) -> VolumeTable {
        let read = self.tables.borrow().get(i).cloned().unwrap_or(Ok(None));
        let mut t = VolumeTable::from_read(read);
        for v in &mut t.volumes {
            v.served_as = self.users_of(i, &v.volume.guid);
        }
        t
    }

    fn users_of(&self, i: usize, guid: &str) -> Vec<String> {
        self.users
            .borrow()
            .iter()
            .filter(|(a, g, _)| *a == i && g == guid)
            .map(|(_, _, by)| by.clone())
            .collect()
    }

    /// What an entry added while the daemon runs (`what`: "export NAME") serves of served
    /// array `i` (`r`: a volume of it, from its table as last read; none: all of it), noted
    /// as a user of its volume; `None`, logged, when it cannot be served.
    pub fn serve(
        &self,
        served: &[Served],
        i: usize,
        r: Option<&VolumeRef>,
        what: String,
    ) -> Option<Serving> {
        let got = serving(served, &self.tables.borrow(), i, r);
        match got {
            Ok(s) => {
                if let Some(v) = &s.volume {
                    self.users.borrow_mut().push((i, v.guid.clone(), what));
                }
                Some(s)
            }
            Err(e) => {
                tracing::error!("{what} is not offered: {e}");
                None
            }
        }
    }

    /// The entry `what` no longer serves its volume.
    pub fn release(&self, what: &str) {
        self.users.borrow_mut().retain(|(_, _, by)| by != what);
    }

    /// Reads served array `i`'s table again (a table written by a client of the whole
    /// array is seen from then on) and reports it.
    pub async fn rescan(&self, i: usize, served: &Served) -> AdminResult<VolumeTable> {
        let _one = self.lock.lock().await;
        let t = read_table(served).await;
        let err = t.as_ref().err().cloned();
        self.set(i, t);
        match err {
            Some(e) => Err(AdminError::new(Exit::Corrupt, e)),
            None => Ok(self.table(i)),
        }
    }

    fn set(&self, i: usize, t: Read) {
        debug_assert!(i < self.tables.borrow().len(), "array {i} is served");
        if let Some(slot) = self.tables.borrow_mut().get_mut(i) {
            *slot = t;
        }
    }

    /// Applies `change` to served array `i`'s table; the volume as it is after.
    pub async fn change(&self, i: usize, served: &Served, change: Change) -> AdminResult<Volume> {
        let _one = self.lock.lock().await;
        let array = served.session.root();
        if let Some(name) = change.existing() {
            let vols = volume_io::table(array).await?;
            let vol = volume::find(
                vols.as_deref(),
                &VolumeRef::Name(name.to_string()),
                array.name(),
            )
            .map_err(|m| AdminError::new(Exit::NotFound, m))?;
            let users = self.users_of(i, &vol.guid);
            if !users.is_empty() {
                return Err(AdminError::new(
                    Exit::Conflict,
                    format!(
                        "volume {name:?} of {} is served as {}: its clients were given its \
                         place and size, so it is not resized or deleted while it is served \
                         (take it out of the config and restart raidd serve first)",
                        served.config.name,
                        users.join(", ")
                    ),
                ));
            }
        }
        let done = volume_io::change(array, |e| change.apply(e)).await;
        // What is on the array now, whatever happened.
        self.set(i, read_table(served).await);
        let vol = done?;
        tracing::info!(array = %served.config.name, volume = %vol.name, size = vol.size_bytes, "volume {}", change.done());
        Ok(vol)
    }
}
