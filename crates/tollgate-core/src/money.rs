//! Money in integer minor units: never floats (B2).

/// An amount of money in minor units (e.g. micro-dollars). Signed so a balance can end
/// slightly below zero (B2).
pub type Money = i64;
