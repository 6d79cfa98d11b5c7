//! Prices: the cost of a request from its usage, and the money upper bound of a
//! demand (W6, B2, B3). Integer minor units throughout; never floats.

use crate::demand::{Demand, Usage};
use crate::money::Money;

/// Price of one model, in minor units. Token prices are per million tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default, deny_unknown_fields))]
pub struct Price {
    /// Per million input tokens not served from cache.
    pub input_per_mtok: Money,
    /// Per million input tokens read from cache.
    pub cached_input_per_mtok: Money,
    /// Per million input tokens written to cache.
    pub cache_write_per_mtok: Money,
    /// Per million output tokens.
    pub output_per_mtok: Money,
    /// Per image.
    pub per_image: Money,
    /// Per video.
    pub per_video: Money,
}

/// `Σ count × per_million / 1e6`, rounded up once, so a cost is never understated and
/// an upper bound computed the same way is never below it.
fn tokens_cost(parts: &[(u64, Money)]) -> Money {
    let micro: i128 = parts
        .iter()
        .map(|&(count, price)| i128::from(count) * i128::from(price.max(0)))
        .sum();
    Money::try_from((micro + 999_999) / 1_000_000).unwrap_or(Money::MAX)
}

impl Price {
    fn units_cost(&self, images: u64, videos: u64) -> Money {
        let n = |v: u64| Money::try_from(v).unwrap_or(Money::MAX);
        self.per_image
            .max(0)
            .saturating_mul(n(images))
            .saturating_add(self.per_video.max(0).saturating_mul(n(videos)))
    }

    /// The cost of `usage`.
    pub fn cost(&self, usage: &Usage) -> Money {
        tokens_cost(&[
            (usage.input_tokens, self.input_per_mtok),
            (usage.cached_input_tokens, self.cached_input_per_mtok),
            (usage.cache_write_tokens, self.cache_write_per_mtok),
            (usage.output_tokens, self.output_per_mtok),
        ])
        .saturating_add(self.units_cost(usage.images, usage.videos))
    }

    /// The most a request of `input` input tokens and at most `max_output` output
    /// tokens can cost: every input token at the dearest input rate (a cache write
    /// may cost more than a plain read).
    pub fn upper_bound(&self, input: u64, max_output: u64, images: u64, videos: u64) -> Money {
        let dearest_input = self
            .input_per_mtok
            .max(self.cached_input_per_mtok)
            .max(self.cache_write_per_mtok);
        tokens_cost(&[(input, dearest_input), (max_output, self.output_per_mtok)])
            .saturating_add(self.units_cost(images, videos))
    }

    /// Every rate the dearer of `self` and `other`: a price whose upper bound covers a
    /// request served at either (a model whose channels serve it as differently
    /// priced models).
    pub fn dearest(&self, other: &Price) -> Price {
        Price {
            input_per_mtok: self.input_per_mtok.max(other.input_per_mtok),
            cached_input_per_mtok: self.cached_input_per_mtok.max(other.cached_input_per_mtok),
            cache_write_per_mtok: self.cache_write_per_mtok.max(other.cache_write_per_mtok),
            output_per_mtok: self.output_per_mtok.max(other.output_per_mtok),
            per_image: self.per_image.max(other.per_image),
            per_video: self.per_video.max(other.per_video),
        }
    }

    /// A demand with its money upper bound filled in.
    pub fn demand(&self, input: u64, max_output: u64, images: u64, videos: u64) -> Demand {
        Demand {
            tokens: input.saturating_add(max_output),
            images,
            videos,
            money: self.upper_bound(input, max_output, images, videos),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn b1_the_dearest_of_two_prices_bounds_a_request_at_either() {
        let a = Price {
            input_per_mtok: 3_000_000,
            cached_input_per_mtok: 300_000,
            cache_write_per_mtok: 3_750_000,
            output_per_mtok: 15_000_000,
            per_image: 0,
            per_video: 7,
        };
        let b = Price {
            input_per_mtok: 5_000_000,
            cached_input_per_mtok: 100_000,
            cache_write_per_mtok: 0,
            output_per_mtok: 10_000_000,
            per_image: 40_000,
            per_video: 0,
        };
        let d = a.dearest(&b);
        assert_eq!(d, b.dearest(&a));
        assert_eq!(
            (
                d.input_per_mtok,
                d.cached_input_per_mtok,
                d.cache_write_per_mtok
            ),
            (5_000_000, 300_000, 3_750_000)
        );
        assert_eq!(
            (d.output_per_mtok, d.per_image, d.per_video),
            (15_000_000, 40_000, 7)
        );
        for (input, output, images, videos) in [(1_000, 500, 0, 0), (10, 90_000, 2, 1)] {
            let bound = d.upper_bound(input, output, images, videos);
            assert!(bound >= a.upper_bound(input, output, images, videos));
            assert!(bound >= b.upper_bound(input, output, images, videos));
        }
    }

    use super::*;

    #[test]
    fn b2_cost_rounds_up_in_integer_minor_units() {
        let p = Price {
            input_per_mtok: 2_500_000, // $2.50 per Mtok in micro-dollars
            cached_input_per_mtok: 1_250_000,
            output_per_mtok: 10_000_000,
            ..Price::default()
        };
        let u = Usage {
            input_tokens: 1000,
            cached_input_tokens: 1,
            output_tokens: 333,
            ..Usage::default()
        };
        // ceil(2500 + 1.25 + 3330)
        assert_eq!(p.cost(&u), 5832);
    }

    #[test]
    fn w6_upper_bound_is_never_below_the_actual_cost() {
        let p = Price {
            input_per_mtok: 3,
            cached_input_per_mtok: 1,
            cache_write_per_mtok: 4,
            output_per_mtok: 15,
            per_image: 7,
            per_video: 0,
        };
        let ub = p.upper_bound(1000, 500, 1, 0);
        for cached in [0, 500, 1000] {
            for write in [0, 1000 - cached] {
                let u = Usage {
                    input_tokens: 1000 - cached - write,
                    cached_input_tokens: cached,
                    cache_write_tokens: write,
                    output_tokens: 500,
                    images: 1,
                    ..Usage::default()
                };
                assert!(p.cost(&u) <= ub);
            }
        }
    }

    #[test]
    fn b2_images_and_videos_cost_their_unit_price_on_top_of_tokens() {
        let p = Price {
            output_per_mtok: 1_000_000,
            per_image: 40,
            per_video: 500,
            ..Price::default()
        };
        let u = Usage {
            output_tokens: 3,
            images: 2,
            videos: 1,
            ..Usage::default()
        };
        assert_eq!(p.cost(&u), 3 + 2 * 40 + 500);
        // A negative unit price is free, never a credit; a count past what money can
        // hold saturates instead of wrapping.
        let negative = Price {
            per_image: -5,
            ..Price::default()
        };
        let images = Usage {
            images: 4,
            ..Usage::default()
        };
        assert_eq!(negative.cost(&images), 0);
        let videos = Usage {
            videos: u64::MAX,
            ..Usage::default()
        };
        assert_eq!(p.cost(&videos), Money::MAX);
    }

    #[test]
    fn w6_a_demand_carries_its_tokens_media_and_money_upper_bound() {
        let p = Price {
            input_per_mtok: 2_000_000,
            cache_write_per_mtok: 3_000_000,
            output_per_mtok: 8_000_000,
            per_image: 10,
            per_video: 1_000,
            ..Price::default()
        };
        // Input at the dearest input rate (the cache write), output at its rate, and
        // each image and video at its unit price.
        assert_eq!(
            p.demand(100, 50, 2, 1),
            Demand {
                tokens: 150,
                images: 2,
                videos: 1,
                money: 300 + 400 + 20 + 1_000,
            }
        );
    }
}
