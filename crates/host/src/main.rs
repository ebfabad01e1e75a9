//! `bothy-host`: see the library's documentation.

fn main() -> std::process::ExitCode {
    bothy_host::cli::main()
}
