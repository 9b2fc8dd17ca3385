//! Readable terminal output: colour where the terminal has it (anstream strips it for pipes
//! and honours `NO_COLOR`).

use anstyle::{AnsiColor, Style};

pub const HEADING: Style = Style::new()
    .bold()
    .fg_color(Some(anstyle::Color::Ansi(AnsiColor::Cyan)));
pub const GOOD: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Green)));
pub const BAD: Style = Style::new().fg_color(Some(anstyle::Color::Ansi(AnsiColor::Red)));
pub const DIM: Style = Style::new().dimmed();
pub const ROLE: Style = Style::new().bold();

/// A section heading.
pub fn heading(text: &str) {
    anstream::println!("\n{HEADING}== {text}{HEADING:#}");
}

/// A line with a green check.
pub fn good(text: &str) {
    anstream::println!("  {GOOD}✔{GOOD:#} {text}");
}

/// A line with a red cross: something failed or differs.
pub fn refused(text: &str) {
    anstream::println!("  {BAD}✘{BAD:#} {text}");
}

/// A check that passed by being refused (the demo's stale compare-and-append, forged
/// continuation, …): a green check, so it never reads as a failure.
pub fn refused_as_expected(text: &str) {
    anstream::println!("  {GOOD}✔{GOOD:#} refused, as it must be: {text}");
}

/// A plain indented line.
pub fn line(text: &str) {
    anstream::println!("  {text}");
}

/// A dimmed indented line.
pub fn dim(text: &str) {
    anstream::println!("  {DIM}{text}{DIM:#}");
}

/// One message of a transcript.
pub fn message(seq: u64, role: &str, text: &str) {
    anstream::println!("    {DIM}#{seq:<3}{DIM:#} {ROLE}{role:<9}{ROLE:#} {text}");
}

/// `2026-12-02 14:05 UTC`.
pub fn utc_minute(at: mnemix_core::Timestamp) -> String {
    let (year, month, day) = at.utc_date();
    let minutes = at.as_millis().div_euclid(60_000).rem_euclid(24 * 60);
    format!(
        "{year}-{month:02}-{day:02} {:02}:{:02} UTC",
        minutes / 60,
        minutes % 60
    )
}
