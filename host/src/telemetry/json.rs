//! `--log-format json`: one JSON object per line.
//!
//! Every line has `ts` (RFC 3339, UTC, microseconds), `level`, `target`,
//! `node` (once the node knows its id) and `message`, then the event's
//! own fields, then the fields of the spans it happened in, innermost
//! last (a field an inner span or the event sets wins). A line inside a
//! job's span therefore carries `job_id`, `attempt`, `trace_id` and the
//! span's name as `span`: what ties a line to a job is structural, not
//! up to each call site.

use serde_json::{Map, Value};
use std::fmt;
use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The event formatter of JSON lines (with [`JsonFields`] as the field
/// formatter, which keeps each span's fields as a JSON object).
pub struct Lines;

impl<S> FormatEvent<S, JsonFields> for Lines
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = Map::new();
        line.insert(
            "ts".into(),
            Value::String(timestamp(std::time::SystemTime::now())),
        );
        line.insert("level".into(), Value::String(meta.level().to_string()));
        line.insert("target".into(), Value::String(meta.target().to_string()));
        let node = super::node();
        if !node.is_empty() {
            line.insert("node".into(), Value::String(node.to_string()));
        }
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<JsonFields>>()
                    && let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(fields)
                {
                    line.extend(fields);
                }
                line.insert("span".into(), Value::String(span.name().to_string()));
            }
        }
        let mut visitor = Fields(&mut line);
        event.record(&mut visitor);
        let text = serde_json::to_string(&line).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// Records an event's fields into the line.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), Value::from(value));
    }
}

/// `at` as RFC 3339 in UTC with microseconds.
fn timestamp(at: std::time::SystemTime) -> String {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil from days (Howard Hinnant's algorithm), for 1970 on.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_micros()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00.000000Z");
        let at = UNIX_EPOCH + Duration::from_micros(1_795_435_408_123_456);
        assert_eq!(timestamp(at), "2026-11-23T12:03:28.123456Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(timestamp(leap), "2000-02-29T00:00:00.000000Z");
    }
}
