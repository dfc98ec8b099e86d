//! md's names for levels and layouts, as mdadm prints them (`examine`, `detail`).

use raidd_layout::{Level, ParityLayout, Raid0Layout, Raid10Layout};
use raidd_md::feature;

/// md's name for a level number.
pub fn level_text(level: i32) -> String {
    Level::from_md_number(level).map_or_else(|| "-unknown-".to_string(), |l| l.to_string())
}

/// The layout line of examine/detail, as mdadm names it; `None` where a level has none.
pub fn layout_text(level: i32, layout: u32, feature_map: u32) -> Option<String> {
    match level {
        4..=6 => Some(
            ParityLayout::from_md_number(layout)
                .map_or_else(|| format!("-unknown- ({layout})"), |l| l.to_string()),
        ),
        10 => Some(Raid10Layout::from_md_number(layout).map_or_else(
            || format!("-unknown- ({layout:#x})"),
            |l| l.to_string().replace(',', ", "),
        )),
        0 if feature_map & feature::RAID0_LAYOUT != 0 => Some(match layout {
            0 => "dangerous".to_string(),
            n => match Raid0Layout::from_md_number(n) {
                Some(Raid0Layout::Original) => "original".to_string(),
                Some(Raid0Layout::Alternate) => "alternate".to_string(),
                None => format!("-unknown- ({n})"),
            },
        }),
        _ => None,
    }
}

/// A level as the user names it (`raid5`, `5`, `mirror`, ...), for `--level` arguments.
pub fn parse_level(s: &str) -> Result<Level, String> {
    Level::parse(s).ok_or_else(|| {
        format!(
            "unknown RAID level {s:?} (use linear, raid0, raid1, raid4, raid5, raid6 or raid10)"
        )
    })
}
