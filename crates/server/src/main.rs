//! The `bothy-server` binary: everything lives in the library (`bothy_server::cli`).

fn main() -> std::process::ExitCode {
    bothy_server::cli::main()
}
