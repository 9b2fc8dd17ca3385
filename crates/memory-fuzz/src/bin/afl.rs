//! The AFL++ entry point: `memory-fuzz-afl TARGET` runs one target in AFL++'s persistent mode.
//! Built and run by `cargo xtask fuzz`.

fn main() {
    let name = std::env::args().nth(1).unwrap_or_default();
    let Some(target) = memory_fuzz::Target::from_name(&name) else {
        eprintln!(
            "usage: memory-fuzz-afl TARGET (one of: {})",
            memory_fuzz::Target::ALL
                .map(memory_fuzz::Target::name)
                .join(", ")
        );
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| target.check(data));
}
