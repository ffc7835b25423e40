//! `linerate serve`'s log: one line per event on stderr, time-stamped in RFC 3339 UTC with
//! milliseconds, as text or as one JSON object per line (`serve --log-format json`) for log
//! shippers. Every serve log line goes through [`Log::emit`], so the two formats never drift.

use serde_json::Value;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// How log lines are written (`serve --log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `2026-11-24T12:00:00.123Z linerate serve: MESSAGE`.
    #[default]
    Text,
    /// `{"ts":"2026-11-24T12:00:00.123Z","level":"info","msg":"MESSAGE",…fields}`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(format!("unknown log format '{s}' (text or json)")),
        }
    }
}

/// How much an event matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Normal operation: listening, a session's summary.
    Info,
    /// A client's failure or a refusal: the server goes on.
    Warn,
    /// The server itself cannot go on.
    Error,
}

impl Level {
    /// The name in a JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        }
    }
}

/// A structured field of a log line: a name and a JSON value (text lines carry the message only,
/// which already says what the fields say).
pub type Field<'a> = (&'a str, Value);

/// The serve log's writer.
#[derive(Debug, Clone, Copy, Default)]
pub struct Log {
    /// Text or JSON.
    pub format: LogFormat,
}

impl Log {
    /// A log writing `format`.
    pub fn new(format: LogFormat) -> Log {
        Log { format }
    }

    /// Write one line now on stderr, in a single write so concurrent sessions never interleave.
    pub fn emit(&self, level: Level, msg: &str, fields: &[Field<'_>]) {
        let mut line = self.line(SystemTime::now(), level, msg, fields);
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    /// The line for an event at `at` (without its newline).
    pub fn line(&self, at: SystemTime, level: Level, msg: &str, fields: &[Field<'_>]) -> String {
        let ms = at.duration_since(UNIX_EPOCH).map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let ts = linerate_model::time::rfc3339_millis(ms);
        match self.format {
            // Control characters are escaped where messages are made; a newline would still
            // split a line, so it is shown as `\n`.
            LogFormat::Text => format!("{ts} linerate serve: {}", msg.replace('\n', "\\n")),
            LogFormat::Json => {
                let s = |v: &str| Value::from(v).to_string();
                let mut out = format!("{{\"ts\":{},\"level\":{},\"msg\":{}", s(&ts), s(level.name()), s(msg));
                for (k, v) in fields.iter().filter(|(k, _)| !matches!(*k, "ts" | "level" | "msg")) {
                    out.push_str(&format!(",{}:{v}", s(k)));
                }
                out.push('}');
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn text_lines_start_with_a_millisecond_utc_time_stamp() {
        let line = Log::new(LogFormat::Text).line(at(1_795_326_436_123), Level::Info, "listening on x", &[]);
        assert_eq!(line, "2026-11-22T05:47:16.123Z linerate serve: listening on x");
        let two = Log::new(LogFormat::Text).line(at(0), Level::Warn, "a\nb", &[]);
        assert_eq!(two, "1970-01-01T00:00:00.000Z linerate serve: a\\nb");
    }

    #[test]
    fn json_lines_parse_back_with_ts_level_msg_and_fields() {
        let fields = [
            ("peer", Value::from("127.0.0.1:5000")),
            ("bytes", Value::from(12_345u64)),
            ("rate_bps", Value::from(1.5e9)),
            ("msg", Value::from("a field may not replace the message")),
        ];
        let msg = "127.0.0.1:5000: \"quoted\" \u{1b}[31m and a newline\n";
        let line = Log::new(LogFormat::Json).line(at(951_868_799_999), Level::Warn, msg, &fields);
        assert!(!line.contains('\n'), "{line}");
        assert!(line.starts_with("{\"ts\":\"2000-02-29T23:59:59.999Z\",\"level\":\"warn\","), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["ts"], "2000-02-29T23:59:59.999Z");
        assert_eq!(v["level"], "warn");
        assert_eq!(v["msg"], msg);
        assert_eq!(v["peer"], "127.0.0.1:5000");
        assert_eq!(v["bytes"], 12_345);
        assert_eq!(v["rate_bps"], 1.5e9);
        assert_eq!(v.as_object().map(|o| o.len()), Some(6), "{line}");
    }

    #[test]
    fn log_formats_parse_from_their_flag_values() {
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("JSON".parse::<LogFormat>().is_err());
    }
}
