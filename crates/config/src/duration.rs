//! Durations in configuration files: humantime strings (`15m`, `60s`,
//! `2h 30m`), checked against a [`DurationRule`], and written back in the same
//! notation by [`format_duration`].

use std::time::Duration;

/// The longest duration any key accepts, so that `Instant + duration` and the
/// millisecond values on the wire can never overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// What a duration key accepts.
#[derive(Debug, Clone, Copy)]
pub struct DurationRule {
    /// Shortest value; `Duration::ZERO` where zero means "none" (a leeway).
    pub min: Duration,
    /// Longest value.
    pub max: Duration,
    /// Whole seconds only (`auth.totp_step`); otherwise whole milliseconds.
    pub whole_seconds: bool,
}

/// At least one millisecond.
pub const POSITIVE: DurationRule = DurationRule {
    min: Duration::from_millis(1),
    max: MAX_DURATION,
    whole_seconds: false,
};

/// Zero allowed (a leeway, a window that may be switched off).
pub const ZERO_ALLOWED: DurationRule = DurationRule {
    min: Duration::ZERO,
    max: MAX_DURATION,
    whole_seconds: false,
};

impl DurationRule {
    /// Parses a humantime string and checks it against the rule.
    pub fn parse(&self, text: &str) -> Option<Duration> {
        let d = humantime::parse_duration(text.trim()).ok()?;
        let granular = if self.whole_seconds {
            d.subsec_nanos() == 0
        } else {
            d.subsec_nanos() % 1_000_000 == 0
        };
        (granular && d >= self.min && d <= self.max).then_some(d)
    }

    /// What the rule accepts, for an error message; `example` is the default.
    pub fn expected(&self, example: Duration) -> String {
        let unit = if self.whole_seconds {
            "whole seconds"
        } else {
            "whole milliseconds"
        };
        let min = if self.min.is_zero() {
            "0s".to_owned()
        } else {
            format_duration(self.min)
        };
        let max = if self.max == MAX_DURATION {
            "365d".to_owned()
        } else {
            format_duration(self.max)
        };
        format!(
            "a duration such as \"{}\", from {min} to {max}, in {unit}",
            format_duration(example)
        )
    }
}

/// What a duration key holds, for a wrong type.
pub const DURATION_TYPE: &str = "a duration string such as \"15m\", \"60s\" or \"2h 30m\"";

/// A duration in the notation of the file: hours, minutes, seconds and
/// milliseconds (`15m`, `2h 30m`, `60s`, `1s 500ms`, `0s`); whole seconds under
/// two minutes stay seconds; humantime reads it back.
pub fn format_duration(d: Duration) -> String {
    let total_ms = d.as_millis();
    if total_ms == 0 && d.subsec_nanos() == 0 {
        return "0s".to_owned();
    }
    // Short whole-second values as the spec writes them (`60s`, `90s`).
    if d < Duration::from_secs(120) && d.subsec_nanos() == 0 {
        return format!("{}s", d.as_secs());
    }
    let hours = total_ms / 3_600_000;
    let minutes = total_ms / 60_000 % 60;
    let seconds = total_ms / 1000 % 60;
    let millis = total_ms % 1000;
    let nanos = d.subsec_nanos() % 1_000_000;
    let mut parts = Vec::new();
    for (value, unit) in [(hours, "h"), (minutes, "m"), (seconds, "s"), (millis, "ms")] {
        if value > 0 {
            parts.push(format!("{value}{unit}"));
        }
    }
    if nanos > 0 {
        parts.push(format!("{nanos}ns"));
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (d, s) in [
            (Duration::from_secs(900), "15m"),
            (Duration::from_secs(12 * 3600), "12h"),
            (Duration::from_secs(24 * 3600), "24h"),
            (Duration::from_secs(9000), "2h 30m"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_secs(60), "60s"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(120), "2m"),
            (Duration::from_secs(121), "2m 1s"),
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(5), "5ns"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(humantime::parse_duration(s).unwrap(), d, "{s}");
        }
        assert_eq!(POSITIVE.parse("15m"), Some(Duration::from_secs(900)));
        assert_eq!(POSITIVE.parse("2h 30m"), Some(Duration::from_secs(9000)));
        assert_eq!(POSITIVE.parse("0s"), None);
        assert_eq!(ZERO_ALLOWED.parse("0s"), Some(Duration::ZERO));
        assert_eq!(POSITIVE.parse("1500us"), None);
        assert_eq!(POSITIVE.parse("-5s"), None);
        assert_eq!(POSITIVE.parse("15"), None);
        assert_eq!(POSITIVE.parse("366d"), None);
        assert_eq!(POSITIVE.parse("365d"), Some(MAX_DURATION));
        assert_eq!(POSITIVE.parse("99999999999999999999y"), None);
        let secs = DurationRule {
            whole_seconds: true,
            ..POSITIVE
        };
        assert_eq!(secs.parse("1500ms"), None);
        assert_eq!(secs.parse("30s"), Some(Duration::from_secs(30)));
        assert_eq!(
            POSITIVE.expected(Duration::from_secs(900)),
            "a duration such as \"15m\", from 1ms to 365d, in whole milliseconds"
        );
    }
}
