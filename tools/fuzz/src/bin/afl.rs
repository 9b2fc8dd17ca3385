//! The AFL++ entry point: `mnemix-fuzz-afl TARGET` runs one target in AFL++'s persistent mode.
//! Built and run by `cargo xtask fuzz`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = mnemix_fuzz::Target::from_name(&name) else {
        eprintln!(
            "usage: mnemix-fuzz-afl TARGET (one of: {})",
            mnemix_fuzz::Target::ALL
                .map(mnemix_fuzz::Target::name)
                .join(", ")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target.check(data));
}
