//! How the file writes a duration (`"1m"`, `"250ms"`): the [`Span`] the file's own
//! shape reads, and the `deserialize_with` readers of the settings read straight into
//! a [`Duration`].

use serde::Deserialize;
use std::time::Duration;

/// Duration written as `"1m"`, `"1h"`, `"24h"`, `"1d"`, `"90s"`, `"250ms"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Span(pub(super) Duration);

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s)
            .map(Span)
            .map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
    }
}

/// A duration setting read straight into a [`Duration`], written as a [`Span`] is
/// (`#[serde(deserialize_with = "duration")]`).
pub(super) fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    Span::deserialize(d).map(|s| s.0)
}

/// An optional duration setting: when present, a duration as [`duration`] reads it.
pub(super) fn optional_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    duration(d).map(Some)
}
