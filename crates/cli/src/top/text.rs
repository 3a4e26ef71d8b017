//! How `spindle top` writes values: indexes as the API does, counts with thousands
//! separators, bytes in binary units, durations, hash ranges as shares of the hash space, and
//! fields it does not know by name.

use serde_json::Value;

/// The hash space, for ranges shown as shares of it.
const HASH_SPACE: f64 = 4_294_967_296.0;

/// Scalar fields of `obj` not in `known`, for fields a newer node reports.
pub fn extras<'a>(
    obj: &'a Value,
    known: &'a [&str],
) -> impl Iterator<Item = (String, String)> + 'a {
    obj.as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !known.contains(&k.as_str()))
        .filter_map(|(k, v)| {
            let shown = match v {
                // An object of scalars (e.g. latency percentiles) on one line.
                Value::Object(m) => {
                    let parts: Vec<String> = m
                        .iter()
                        .filter_map(|(k, v)| Some(format!("{k} {}", scalar(v)?)))
                        .collect();
                    (!parts.is_empty()).then(|| parts.join(", "))
                }
                v => scalar(v),
            }?;
            Some((k.replace('_', " "), shown))
        })
}

/// A number, string or boolean as text; `None` for anything else.
pub fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::Number(n) if n.is_u64() => n.as_u64().map(thousands),
        Value::Number(n) => n.as_f64().map(|x| format!("{x:.1}")),
        Value::String(s) => Some(s.clone()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A log index as the API writes it (no separators, so it can be compared and searched).
pub fn index(v: &Value) -> String {
    v.as_u64().map_or_else(|| "–".to_owned(), |n| n.to_string())
}

pub fn count(v: &Value) -> String {
    v.as_u64().map_or_else(|| "–".to_owned(), thousands)
}

pub fn text(v: &Value) -> String {
    v.as_str().map_or_else(|| "–".to_owned(), str::to_owned)
}

pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub fn per_second(n: f64) -> String {
    if n >= 100.0 {
        thousands(n.round() as u64)
    } else {
        format!("{n:.1}")
    }
}

pub fn bytes(n: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut n = n.max(0.0);
    let mut i = 0;
    while n >= 1024.0 && i < UNITS.len() - 1 {
        n /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n:.0} {}", UNITS[i])
    } else {
        format!("{n:.1} {}", UNITS[i])
    }
}

pub fn duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, s % 3600 / 60),
    }
}

/// `[lo, hi)` of the hash space (`[lo, hi]` or `{"lo", "hi"}`) as percentages.
pub fn range(v: &Value) -> String {
    let lo = v[0].as_f64().or_else(|| v["lo"].as_f64());
    let hi = v[1].as_f64().or_else(|| v["hi"].as_f64());
    let (Some(lo), Some(hi)) = (lo, hi) else {
        return "–".to_owned();
    };
    let pct = |x: f64| {
        let p = 100.0 * x / HASH_SPACE;
        if (p - p.round()).abs() < 0.05 {
            format!("{p:.0}%")
        } else {
            format!("{p:.1}%")
        }
    };
    format!("[{}, {})", pct(lo), pct(hi))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_bytes_durations_and_ranges_read_as_a_person_writes_them() {
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(999), "999");
        assert_eq!(index(&json!(1_234_567)), "1234567");
        assert_eq!(count(&json!(null)), "–");
        assert_eq!(per_second(1234.4), "1,234");
        assert_eq!(per_second(12.34), "12.3");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(1536.0), "1.5 KiB");
        assert_eq!(duration(42.0), "42 s");
        assert_eq!(duration(125.0), "2m 05s");
        assert_eq!(duration(7300.0), "2h 01m");
        assert_eq!(range(&json!([0, 1_073_741_824u64])), "[0%, 25%)");
        assert_eq!(
            range(&json!({"lo": 0, "hi": 4_294_967_296u64})),
            "[0%, 100%)"
        );
        assert_eq!(range(&json!([0, 1_431_655_765u64])), "[0%, 33.3%)");
    }

    #[test]
    fn unknown_fields_are_shown_by_name_and_known_ones_skipped() {
        let v = json!({"syncs": 3, "fsync_p50_us": 120, "compacting": true,
                       "latency_us": {"p50": 1, "p99": 2.5}, "volumes": [1, 2]});
        // Sorted: the order of an object's fields depends on serde_json's features.
        let mut got: Vec<_> = extras(&v, &["syncs"]).collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                ("compacting".to_owned(), "true".to_owned()),
                ("fsync p50 us".to_owned(), "120".to_owned()),
                ("latency us".to_owned(), "p50 1, p99 2.5".to_owned()),
            ]
        );
    }
}
