//! Money in integer minor units: never floats (B2).

/// An amount of money in minor units (e.g. micro-dollars). Signed so a balance can end
/// slightly below zero (B2).
pub type Money = i64;

/// The largest amount any store is required to hold exactly: 2^53 − 1 minor units.
///
/// The Redis store keeps money in Lua numbers (IEEE doubles), exact up to 2^53, and
/// refuses anything beyond (`portcullis_redis::MAX_EXACT_MONEY`, the same value); the
/// in-memory store holds any [`Money`]. A caller that must not turn an oversized amount
/// into a store failure (a money upper bound from a huge `max_tokens`) checks against
/// this bound before asking any store. It lives here, in the crate every store and
/// every caller shares, so a caller need not depend on one store's crate to know it.
pub const MAX_STORABLE_MONEY: Money = (1 << 53) - 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_storable_money_is_2_pow_53_minus_1() {
        assert_eq!(MAX_STORABLE_MONEY, 9_007_199_254_740_991);
    }
}
