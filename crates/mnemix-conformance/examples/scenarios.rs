//! Prints every scenario of the suite, one a line: its `group::name`, a tab, and `engine` for
//! the engine's scenarios (run only by suites with the `engine` feature) or `contracts`.
//!
//! `cargo xtask test` reads it to count a scenario that never reported as failed, so that the
//! tasks need not build the suite themselves.

fn main() {
    for scenario in mnemix_conformance::SCENARIOS {
        let part = if mnemix_conformance::ENGINE_SCENARIOS.contains(&scenario.name) {
            "engine"
        } else {
            "contracts"
        };
        println!("{}\t{part}", scenario.name);
    }
}
