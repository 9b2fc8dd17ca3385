//! Draws C1's plots and slopes table again from reports already written (`benchmarks.json` of
//! each backend's run), so runs made one backend at a time are shown together:
//!
//! ```sh
//! cargo run -p mnemix-bench --example c1-plots -- OUT_DIR REPORT.json...
//! ```
//!
//! Writes `OUT_DIR/c1-<backend>.svg` and `OUT_DIR/c1-tenants-<backend>.svg`, and prints the
//! slopes table.

use mnemix_bench::{curves, Report};

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let out = std::path::PathBuf::from(
        args.next()
            .ok_or("usage: c1-plots OUT_DIR REPORT.json...")?,
    );
    let mut tables = Vec::new();
    for path in args {
        let text = std::fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
        let report: Report = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
        tables.extend(report.tables);
    }
    std::fs::create_dir_all(&out).map_err(|e| e.to_string())?;
    for plot in curves::plots(&tables) {
        std::fs::write(out.join(&plot.file), plot.svg).map_err(|e| e.to_string())?;
        eprintln!("c1-plots: wrote {}", out.join(&plot.file).display());
    }
    println!("{}", curves::slopes(&tables).unwrap_or_default());
    Ok(())
}
