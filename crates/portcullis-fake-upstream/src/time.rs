//! Small time formatting helpers (no date crate needed).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(crate) fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// RFC 3339 UTC timestamp, whole seconds: `2025-01-31T10:17:32Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = unix_secs(t) as i64;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// `YYYY-MM-01`: the first day of the month after `t` (UTC).
pub(crate) fn first_of_next_month(t: SystemTime) -> String {
    let (y, m, _) = civil_from_days((unix_secs(t) / 86_400) as i64);
    let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    format!("{y:04}-{m:02}-01")
}

/// OpenAI's reset duration format: `17ms`, `1s`, `2.5s`, `1m30s`, `6m0s`, `1h2m3s`.
pub(crate) fn openai_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let secs = ms / 1000;
    let frac = ms % 1000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if frac == 0 {
        out.push_str(&format!("{s}s"));
    } else {
        let f = format!("{frac:03}");
        out.push_str(&format!("{s}.{}s", f.trim_end_matches('0')));
    }
    out
}

/// Whole seconds, rounded up, at least 1.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(first_of_next_month(t), "2023-12-01");
        let dec = UNIX_EPOCH + Duration::from_secs(1_703_000_000);
        assert_eq!(first_of_next_month(dec), "2024-01-01");
        assert_eq!(openai_duration(Duration::from_millis(17)), "17ms");
        assert_eq!(openai_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(openai_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(openai_duration(Duration::from_secs(360)), "6m0s");
        assert_eq!(openai_duration(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(ceil_secs(Duration::from_millis(1001)), 2);
        assert_eq!(ceil_secs(Duration::ZERO), 1);
    }
}
