//! The current time as RFC 3339 UTC, for run ids and `created` fields; the calendar arithmetic
//! is [`linerate_model::time`].

pub(crate) use linerate_model::time::{civil, rfc3339};

/// The current time as RFC 3339 UTC.
pub(crate) fn now_rfc3339() -> String {
    rfc3339(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()))
}
