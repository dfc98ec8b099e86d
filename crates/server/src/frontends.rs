//! The registered frontends. Each line of the `frontends!` list below names a frontend's
//! field in the configuration and its type (which implements [`Frontend`]); from it come
//! [`Frontends`], the frontends' checked configurations, and everything the daemon does
//! to all of them alike: take their sections out of the file, check them, drop what serves
//! arrays that did not start or volumes that are not there, start them, and write their
//! metrics. A new frontend is a folder of its own and one line here.

use raidd_admin::exit::AdminResult;
use raidd_admin::status::StatusReport;

use crate::config::arrays::ArrayConfig;
use crate::frontend::{
    Frontend, ParseCtx, ReloadCtx, Resolver, Sections, Serving, StartCtx, Started,
};
use crate::metrics::Sink;

macro_rules! frontends {
    ($($(#[$doc:meta])* $field:ident: $ty:ty,)*) => {
        /// Each registered frontend's checked configuration.
        #[derive(Clone, Debug, PartialEq)]
        pub struct Frontends {
            $($(#[$doc])* pub $field: <$ty as Frontend>::Config,)*
        }

        /// Each registered frontend's sections of the file.
        pub(crate) struct AllSections {
            $($field: Sections,)*
        }

        /// What each registered frontend's entries serve, as resolved.
        pub(crate) struct AllServing {
            $($field: Vec<Serving>,)*
        }

        impl Frontends {
            /// Takes every frontend's sections out of the file's top-level table.
            pub(crate) fn take_sections(table: &mut toml::Table) -> AllSections {
                AllSections {
                    $($field: Sections::take(table, <$ty as Frontend>::SECTIONS),)*
                }
            }

            /// Checks every frontend's sections.
            pub(crate) fn parse(s: AllSections, ctx: &ParseCtx) -> Result<Frontends, String> {
                Ok(Frontends {
                    $($field: <$ty as Frontend>::parse(s.$field, ctx)?,)*
                })
            }

            /// Every frontend's checks before any array is touched.
            pub(crate) fn preflight(&self) -> AdminResult<()> {
                $(<$ty as Frontend>::preflight(&self.$field)?;)*
                Ok(())
            }

            /// The most one connection of any frontend may hold.
            pub(crate) fn connection_memory(&self) -> u64 {
                [$(<$ty as Frontend>::connection_memory(&self.$field),)*]
                    .into_iter()
                    .max()
                    .unwrap_or(0)
            }

            /// What the frontends hold for their whole life, with `threads` workers.
            pub(crate) fn held_memory(&self, threads: usize) -> u64 {
                [$(<$ty as Frontend>::held_memory(&self.$field, threads),)*]
                    .into_iter()
                    .fold(0u64, u64::saturating_add)
            }

            /// What the frontends hold for their whole life must leave room for one
            /// connection in the server's buffer budget, so a config cannot make raidd hold
            /// unbounded memory.
            pub(crate) fn check_held_memory(
                &self,
                threads: usize,
                buffer_memory: u64,
            ) -> Result<(), String> {
                let (held, one) = (self.held_memory(threads), self.connection_memory());
                if held.saturating_add(one) <= buffer_memory {
                    return Ok(());
                }
                $(<$ty as Frontend>::refuse_held_memory(&self.$field, threads, one, buffer_memory)?;)*
                Err(format!(
                    "frontends would hold {held} bytes of buffers: with one connection's {one} \
                     bytes, more than buffer_memory ({buffer_memory} bytes)"
                ))
            }

            /// Without what serves the arrays not `kept`, renumbered; a note each.
            pub(crate) fn without_arrays(
                &self,
                kept: &[Option<usize>],
                arrays: &[ArrayConfig],
                notes: &mut Vec<String>,
            ) -> Frontends {
                Frontends {
                    $($field: <$ty as Frontend>::without_arrays(&self.$field, kept, arrays, notes),)*
                }
            }

            /// Resolves what every entry serves, leaving out those that cannot be served.
            pub(crate) fn resolve(&mut self, serve: &mut Resolver<'_>) -> AllServing {
                AllServing {
                    $($field: <$ty as Frontend>::resolve(&mut self.$field, serve),)*
                }
            }

            /// Starts every frontend that has something to serve, in order.
            pub(crate) fn start(
                &self,
                serving: AllServing,
                ctx: &StartCtx,
            ) -> AdminResult<Vec<Started>> {
                let mut started = Vec::new();
                $(started.extend(<$ty as Frontend>::start(&self.$field, serving.$field, ctx)?);)*
                Ok(started)
            }

            /// Applies `new` in place of these while they run (`running`: the frontends
            /// started); the configuration now in effect (a line per change made or left for
            /// the next start is in `rc.notes`).
            pub(crate) async fn reload(
                &self,
                new: &Frontends,
                running: &[std::sync::Arc<dyn crate::frontend::Running>],
                rc: &mut ReloadCtx<'_, '_>,
            ) -> Frontends {
                Frontends {
                    $($field: <$ty as Frontend>::reload(
                        &self.$field,
                        &new.$field,
                        running
                            .iter()
                            .find(|r| r.name() == stringify!($field))
                            .map(|r| &**r),
                        rc,
                    ).await,)*
                }
            }

            /// Every frontend's metrics, from the status report.
            pub(crate) fn metrics(report: &StatusReport, sink: &mut Sink) {
                $(<$ty as Frontend>::metrics(report, sink);)*
            }
        }
    };
}

frontends! {
    /// NBD: `[nbd]` and `[[export]]`.
    nbd: crate::nbd::Nbd,
    /// iSCSI: `[iscsi]` and `[[target]]`.
    iscsi: crate::iscsi::Iscsi,
    /// Local block devices: `[[ublk]]`.
    ublk: crate::ublk::Ublk,
}
