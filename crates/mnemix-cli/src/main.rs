//! The `mnemix` command (see the library, `mnemix_cli`).

fn main() -> std::process::ExitCode {
    mnemix_cli::main()
}
