//! `bothy`: parse the command line, run it, print an error once as its code
//! and a one-line hint, and exit with the command's code.

use clap::Parser;

fn main() {
    let cli = bothy::cli::Cli::parse();
    let code = bothy::commands::run(cli);
    std::process::exit(code);
}
