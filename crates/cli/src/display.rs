//! How listings show things: times in UTC (tables) and RFC 3339 (JSON), the
//! time left, the start of a fingerprint and of an ID, so that a table stays
//! within 120 columns (issue 16 item 12, docs/decisions.md D-377).

use serde_json::Value;

/// Characters of a session ID a table shows (a prefix `bothy attach` and
/// `bothy close` accept when it is unambiguous).
pub const SHORT_ID_CHARS: usize = 8;

/// Groups of four characters of a fingerprint a table shows.
pub const SHORT_FINGERPRINT_GROUPS: usize = 2;

/// `(year, month, day, hour, minute, second, millisecond)` of Unix
/// milliseconds in UTC (civil from days, Howard Hinnant's algorithm).
fn civil(unix_ms: i64) -> (i64, i64, i64, i64, i64, i64, i64) {
    let seconds = unix_ms.div_euclid(1000);
    let days = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        unix_ms.rem_euclid(1000),
    )
}

/// `YYYY-MM-DD HH:MM:SS` of Unix milliseconds (UTC).
pub fn format_time(unix_ms: i64) -> String {
    let (year, month, day, hour, minute, second, _) = civil(unix_ms);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02}:{second:02}")
}

/// RFC 3339 in UTC with milliseconds: `2026-12-01T00:00:00.000Z`.
pub fn rfc3339(unix_ms: i64) -> String {
    let (year, month, day, hour, minute, second, ms) = civil(unix_ms);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{ms:03}Z")
}

/// `1h05m` / `4m` / `0m` of milliseconds.
pub fn format_duration(ms: i64) -> String {
    let minutes = ms.max(0) / 60_000;
    if minutes >= 60 {
        format!("{}h{:02}m", minutes / 60, minutes % 60)
    } else {
        format!("{minutes}m")
    }
}

/// The first groups of a fingerprint (`ABCD-EFGH…`); the whole one is in
/// `--json` and `bothy host show`.
pub fn short_fingerprint(fingerprint: &str) -> String {
    let groups: Vec<&str> = fingerprint.split('-').collect();
    if groups.len() <= SHORT_FINGERPRINT_GROUPS {
        return fingerprint.to_owned();
    }
    format!("{}…", groups[..SHORT_FINGERPRINT_GROUPS].join("-"))
}

/// The start of an ID as tables show it.
pub fn short_id(id: &str) -> &str {
    id.get(..SHORT_ID_CHARS).unwrap_or(id)
}

/// The JSON a listing prints: every member whose name ends in `_at` and
/// whose value is a number (the server's Unix milliseconds) becomes RFC 3339,
/// at any depth.
pub fn json_times(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, member) in map.iter_mut() {
                if key.ends_with("_at") {
                    if let Some(ms) = member.as_i64() {
                        *member = Value::String(rfc3339(ms));
                        continue;
                    }
                }
                json_times(member);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(json_times),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_and_durations() {
        assert_eq!(format_time(0), "1970-01-01 00:00:00");
        assert_eq!(format_time(1_796_083_200_000), "2026-12-01 00:00:00");
        assert_eq!(
            format_time(951_782_400_000 + 3_723_000),
            "2000-02-29 01:02:03"
        );
        assert_eq!(rfc3339(1_796_083_200_123), "2026-12-01T00:00:00.123Z");
        assert_eq!(format_duration(3_900_000), "1h05m");
        assert_eq!(format_duration(59_999), "0m");
        assert_eq!(format_duration(-5), "0m");
    }

    #[test]
    fn fingerprints_and_ids_are_shortened() {
        let fingerprint = "ABCD-EFGH-JKMN-PQRS-TVWX-YZ01-2345-6789-ABCD-EFGH-JKMN-PQRS-TVWX";
        assert_eq!(short_fingerprint(fingerprint), "ABCD-EFGH…");
        assert_eq!(short_fingerprint("-"), "-");
        assert_eq!(short_id("3f2a9c1e-0000-7000-8000-000000000000"), "3f2a9c1e");
    }

    #[test]
    fn json_times_become_rfc_3339() {
        let mut value = json!([{"created_at": 1_796_083_200_000_i64, "name": "x",
            "inner": {"ended_at": 0}, "last_seen_at": null}]);
        json_times(&mut value);
        assert_eq!(value[0]["created_at"], "2026-12-01T00:00:00.000Z");
        assert_eq!(value[0]["inner"]["ended_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(value[0]["last_seen_at"], Value::Null);
        assert_eq!(value[0]["name"], "x");
    }
}
