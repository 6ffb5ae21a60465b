//! `--generate`: the man pages and completion scripts, made from the command-line definition,
//! so that a copied binary carries its own docs. The files under man/ and completions/ are
//! exactly this output (a test compares them).

mod completions;
mod man;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, Generate};

/// What `--generate KIND` prints.
pub fn render(kind: Generate) -> String {
    let model = || completions::Model::new(Cli::command());
    match kind {
        Generate::Man => man::main_page(),
        Generate::ManStatus => man::sub_page("status"),
        Generate::ManRelease => man::sub_page("release"),
        Generate::ManLock => man::sub_page("lock"),
        Generate::ManUnlock => man::sub_page("unlock"),
        Generate::Bash => completions::bash(&model()),
        Generate::Zsh => completions::zsh(&model()),
        Generate::Fish => completions::fish(&model()),
        // clap_complete's scripts as they come (options and subcommands; the command's own
        // words are not completed).
        Generate::Elvish => clap_script(Shell::Elvish),
        Generate::Powershell => clap_script(Shell::PowerShell),
    }
}

fn clap_script(shell: Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "redlock-run", &mut out);
    String::from_utf8(out).expect("clap_complete writes UTF-8")
}
