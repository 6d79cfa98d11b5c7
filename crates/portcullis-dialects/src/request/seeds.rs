//! Readers of single JSON values that keep nothing of them: a key classified without
//! allocating, a string's length, a count, the approximate size of any value; and the
//! macros the visitors share (their paths are written out, so that they work wherever
//! they are used).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::marker::PhantomData;

/// A seed that is its own visitor, reading any JSON value.
macro_rules! any_seed {
    ($t:ty) => {
        impl<'de> serde::de::DeserializeSeed<'de> for $t {
            type Value = <Self as serde::de::Visitor<'de>>::Value;
            fn deserialize<D: serde::de::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                d.deserialize_any(self)
            }
        }
    };
}

/// Visitor methods that accept and ignore scalars.
macro_rules! ignore_scalars {
    ($value:expr) => {
        fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Visitor methods that accept and skip arrays.
macro_rules! ignore_seq {
    ($value:expr) => {
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok($value)
        }
    };
}

/// Visitor methods that accept and skip objects.
macro_rules! ignore_map {
    ($value:expr) => {
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            while map
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok($value)
        }
    };
}

/// Visitor method that accepts and ignores a string.
macro_rules! ignore_str {
    ($value:expr) => {
        fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Object keys classified without allocating.
pub(super) trait FromKey: Sized {
    /// The key's class and its name as a static string (for error paths).
    fn from_key(key: &str) -> (Self, &'static str);
}

macro_rules! keys {
    ($name:ident { $($variant:ident = [$($lit:literal),+ $(,)?]),* $(,)? }) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum $name { $($variant,)* Other }
        impl FromKey for $name {
            fn from_key(key: &str) -> (Self, &'static str) {
                match key {
                    $($($lit => (Self::$variant, $lit),)+)*
                    _ => (Self::Other, "?"),
                }
            }
        }
    };
}

pub(super) struct KeySeed<K>(PhantomData<K>);

impl<K> KeySeed<K> {
    pub(super) fn new() -> Self {
        KeySeed(PhantomData)
    }
}

impl<'de, K: FromKey> DeserializeSeed<'de> for KeySeed<K> {
    type Value = (K, &'static str);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: FromKey> Visitor<'de> for KeySeed<K> {
    type Value = (K, &'static str);
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(K::from_key(v))
    }
}

/// The byte length of a key.
pub(super) struct KeyLen;

impl<'de> DeserializeSeed<'de> for KeyLen {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
}

/// A non-negative integer (an integral float is accepted) or `null`. A visitor: serde's
/// `u64` rejects `1.0`, which clients (JavaScript ones) send.
pub(super) struct OptU64;

impl<'de> DeserializeSeed<'de> for OptU64 {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for OptU64 {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a non-negative integer")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        if v >= 0.0 && v.fract() == 0.0 && v.is_finite() {
            // Saturating conversion: a value beyond u64 is as good as u64::MAX here.
            Ok(Some(v as u64))
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// The byte length of a string (`null` = 0): measured, not copied (message text can be
/// megabytes; a `String` or an escaped `Cow` would copy it).
pub(super) struct TextLen;

any_seed!(TextLen);

impl<'de> Visitor<'de> for TextLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }
}

/// The byte length of a string; anything else is skipped as 0.
pub(super) struct LenientLen;

any_seed!(LenientLen);

impl<'de> Visitor<'de> for LenientLen {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64)
    }
    ignore_scalars!(0);
    ignore_seq!(0);
    ignore_map!(0);
}

/// Approximate compact-JSON size of any value (`null` = 0), for tool schemas, tool
/// calls and parts of unknown shape.
pub(super) struct Generic;

any_seed!(Generic);

fn digits(v: u64) -> u64 {
    u64::from(v.checked_ilog10().unwrap_or(0)) + 1
}

impl<'de> Visitor<'de> for Generic {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<u64, E> {
        Ok(if v { 4 } else { 5 })
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        Ok(digits(v.unsigned_abs()) + u64::from(v < 0))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(digits(v))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<u64, E> {
        Ok(8)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        Ok(v.len() as u64 + 2)
    }
    fn visit_unit<E: de::Error>(self) -> Result<u64, E> {
        Ok(0)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u64, A::Error> {
        let mut size: u64 = 2;
        while let Some(n) = seq.next_element_seed(Generic)? {
            size = size.saturating_add(n.max(4) + 1);
        }
        Ok(size)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut size: u64 = 2;
        while let Some(k) = map.next_key_seed(KeyLen)? {
            let v = map.next_value_seed(Generic)?;
            size = size.saturating_add(k + 3 + v.max(4) + 1);
        }
        Ok(size)
    }
}
