//! `raidd generate-docs DIR` (hidden; for packaging): the man pages, one for raidd and one
//! per command (`raidd-create.8`, ...), section 8, made from the same definitions as
//! `--help`, and the shell completions for bash, zsh and fish.

use std::path::Path;

use clap::Command;
use clap_complete::Shell;
use raidd_admin::exit::{AdminError, AdminResult};

/// Writes `DIR/man8/*.8` and `DIR/completions/{raidd.bash,_raidd,raidd.fish}`.
pub fn generate(cmd: Command, out: &Path) -> AdminResult {
    let man = out.join("man8");
    let completions = out.join("completions");
    for d in [&man, &completions] {
        std::fs::create_dir_all(d)
            .map_err(|e| AdminError::io(format!("cannot create {}", d.display()), &e))?;
    }
    let mut cmd = cmd;
    cmd.build();
    write_man(&cmd, "raidd", &man)?;
    pages(&cmd, "raidd", "raidd", &man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "raidd", &completions)
            .map_err(|e| AdminError::io(format!("{shell} completions"), &e))?;
    }
    Ok(())
}

/// A page for each command under `cmd` (`name`: its page's name, `bin`: how it is typed),
/// and theirs in turn; clap's own `help` has none.
fn pages(cmd: &Command, name: &str, bin: &str, dir: &Path) -> AdminResult {
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let (name, bin) = (
            format!("{name}-{}", sub.get_name()),
            format!("{bin} {}", sub.get_name()),
        );
        let page = sub.clone().display_name(name.clone()).bin_name(bin.clone());
        write_man(&page, &name, dir)?;
        pages(sub, &name, &bin, dir)?;
    }
    Ok(())
}

fn write_man(cmd: &Command, name: &str, dir: &Path) -> AdminResult {
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("raidd")
        .render(&mut buf)
        .map_err(|e| AdminError::io(format!("man page {name}"), &e))?;
    let path = dir.join(format!("{name}.8"));
    std::fs::write(&path, buf)
        .map_err(|e| AdminError::io(format!("cannot write {}", path.display()), &e))
}
