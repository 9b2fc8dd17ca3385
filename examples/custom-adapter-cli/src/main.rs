//! `mnemix-redb`: the `mnemix` command with the redb adapter registered, so every command takes
//! `--url redb://FILE` — what a third party writes to open its adapter from the command line.

fn main() -> std::process::ExitCode {
    mnemix::register(custom_adapter_example::DESCRIPTOR).expect("redb:// is no other backend's");
    mnemix_cli::main()
}
