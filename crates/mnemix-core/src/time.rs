//! Timestamps and the injectable clock that decides "now" for TTL and expiry.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch (UTC).
///
/// Millisecond precision is what every backend stores exactly (Postgres, SQLite and Redis alike),
/// so a timestamp round-trips unchanged everywhere.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Default)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The epoch.
    pub const EPOCH: Self = Self(0);

    /// From milliseconds since the epoch.
    pub const fn from_millis(millis: i64) -> Self {
        Self(millis)
    }

    /// Milliseconds since the epoch.
    pub const fn as_millis(self) -> i64 {
        self.0
    }

    /// The wall clock now.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Self(i64::try_from(millis).unwrap_or(i64::MAX))
    }

    /// The instant of a UTC calendar date and time of day (proleptic Gregorian).
    ///
    /// ```
    /// use mnemix_core::Timestamp;
    /// let at = Timestamp::from_utc(2023, 5, 8, 13, 56);
    /// assert_eq!(at.as_millis(), 1_683_554_160_000);
    /// assert_eq!(at.utc_date(), (2023, 5, 8));
    /// ```
    pub fn from_utc(year: i64, month: u32, day: u32, hour: u32, minute: u32) -> Self {
        // Howard Hinnant's days_from_civil.
        let y = if month <= 2 { year - 1 } else { year };
        let era = y.div_euclid(400);
        let yoe = y - era * 400;
        let doy = (153 * ((i64::from(month) + 9) % 12) + 2) / 5 + i64::from(day) - 1;
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        let days = era * 146_097 + doe - 719_468;
        Self(((days * 24 + i64::from(hour)) * 60 + i64::from(minute)) * 60_000)
    }

    /// The start (00:00 UTC) of a calendar date written `YYYY-MM-DD`, refusing a date that
    /// does not exist (`2026-02-30`).
    ///
    /// ```
    /// use mnemix_core::Timestamp;
    /// assert_eq!(Timestamp::from_date("2023-05-08")?, Timestamp::from_utc(2023, 5, 8, 0, 0));
    /// assert!(Timestamp::from_date("2023-02-29").unwrap_err().is_invalid_input());
    /// assert!(Timestamp::from_date("8 May 2023").is_err());
    /// # Ok::<(), mnemix_core::MemoryError>(())
    /// ```
    pub fn from_date(text: &str) -> crate::Result<Self> {
        let invalid =
            || crate::MemoryError::invalid(format!("date {text:?} is not a real YYYY-MM-DD date"));
        let bytes = text.as_bytes();
        let shaped = bytes.len() == 10
            && bytes.iter().enumerate().all(|(i, b)| match i {
                4 | 7 => *b == b'-',
                _ => b.is_ascii_digit(),
            });
        if !shaped {
            return Err(invalid());
        }
        let number =
            |range: std::ops::Range<usize>| text[range].parse::<u32>().map_err(|_| invalid());
        let (year, month, day) = (i64::from(number(0..4)?), number(5..7)?, number(8..10)?);
        let at = Self::from_utc(year, month, day, 0, 0);
        if !(1..=12).contains(&month) || at.utc_date() != (year, month, day) {
            return Err(invalid());
        }
        Ok(at)
    }

    /// The UTC calendar date of this instant: (year, month 1–12, day 1–31).
    pub fn utc_date(self) -> (i64, u32, u32) {
        // Howard Hinnant's civil_from_days.
        let z = self.0.div_euclid(86_400_000) + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        (year, month, day)
    }

    /// This instant plus a duration, saturating.
    #[must_use]
    pub fn saturating_add(self, duration: Duration) -> Self {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self(self.0.saturating_add(millis))
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({}ms)", self.0)
    }
}

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        match time.duration_since(UNIX_EPOCH) {
            Ok(d) => Self(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            Err(e) => Self(-i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX)),
        }
    }
}

/// The source of "now" for a store: expiry of facts and cache entries is decided by it, never by
/// the database server's clock, so tests can move time and every backend agrees.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that only moves when told to; for tests of TTL and expiry.
///
/// Clones share the same instant.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Timestamp) -> Self {
        Self(Arc::new(AtomicI64::new(start.as_millis())))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let millis = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.0.fetch_add(millis, Ordering::SeqCst);
    }

    /// Sets the clock to an instant.
    pub fn set(&self, to: Timestamp) {
        self.0.store(to.as_millis(), Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new(Timestamp::now())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp(self.0.load(Ordering::SeqCst))
    }
}

/// A time to live, written as a whole number and a unit: `"30s"`, `"15m"`, `"1h"`, `"24h"`,
/// `"7d"` (seconds, minutes, hours, days). A fact remembered with a TTL expires that long after
/// the store's clock says it was stored.
///
/// Only these four units, whole and positive: a day is always 24 hours here, and months or
/// years (of no fixed length) are refused rather than guessed. Serialized as its string.
///
/// ```
/// use std::time::Duration;
/// use mnemix_core::Ttl;
/// let ttl: Ttl = "15m".parse()?;
/// assert_eq!(ttl.duration(), Duration::from_secs(900));
/// assert_eq!(ttl.to_string(), "15m");
/// assert!("1.5h".parse::<Ttl>().unwrap_err().is_invalid_input());
/// assert!("0s".parse::<Ttl>().is_err() && "7w".parse::<Ttl>().is_err());
/// # Ok::<(), mnemix_core::MemoryError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ttl {
    amount: u32,
    /// `s`, `m`, `h` or `d`.
    unit: char,
}

/// Seconds in one of a TTL's units.
fn unit_seconds(unit: char) -> Option<u64> {
    match unit {
        's' => Some(1),
        'm' => Some(60),
        'h' => Some(3_600),
        'd' => Some(86_400),
        _ => None,
    }
}

impl Ttl {
    /// How long it lasts.
    pub fn duration(self) -> Duration {
        Duration::from_secs(u64::from(self.amount) * unit_seconds(self.unit).unwrap_or(1))
    }

    /// When something stored at `now` expires.
    pub fn expires_at(self, now: Timestamp) -> Timestamp {
        now.saturating_add(self.duration())
    }
}

impl std::str::FromStr for Ttl {
    type Err = crate::MemoryError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = || {
            crate::MemoryError::invalid(format!(
                "TTL {text:?} is not a positive whole number followed by s, m, h or d \
                 (\"30s\", \"15m\", \"1h\", \"7d\")"
            ))
        };
        let unit = text.chars().last().ok_or_else(invalid)?;
        unit_seconds(unit).ok_or_else(invalid)?;
        let digits = &text[..text.len() - unit.len_utf8()];
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let amount: u32 = digits.parse().map_err(|_| invalid())?;
        if amount == 0 {
            return Err(invalid());
        }
        Ok(Self { amount, unit })
    }
}

impl fmt::Display for Ttl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.amount, self.unit)
    }
}

impl Serialize for Ttl {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ttl {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
