//! How much money a request holds while it runs (B8): the `[billing]` settings
//! `reserve`, `expected_output_share` / `expected_output_tokens` and `reserve_cap`, and
//! the one function that turns a request's facts and price into its hold.
//!
//! The hold is what the billing layer reserves in every budget the request draws on
//! (B3), what a policy's amount cap counts while it runs (W6) and what an attempt whose
//! outcome is unknown keeps pending (B4). It is never what is charged: the attempt
//! settles at its real cost, all of it, whether that is below the hold or above it.
//! Token windows (W5) and provider limits (U1) keep their own demand, the input estimate
//! plus the output upper bound; nothing here touches them.
//!
//! Imports go one way: [`crate::config`] builds a [`Reservation`], [`crate::prepare`]
//! asks it for each request's hold; this module reads neither.

use portcullis_core::{Money, Price, Usage};
use portcullis_dialects::RequestFacts;

/// Parts per million: the unit of [`ExpectedOutput::Share`].
pub const PER_MILLION: u32 = 1_000_000;

/// The default share of the max output an `estimate` hold expects: a quarter.
pub const DEFAULT_EXPECTED_OUTPUT_SHARE: ExpectedOutput = ExpectedOutput::Share(PER_MILLION / 4);

/// What a request's hold is made of, before the cap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reserve {
    /// The money upper bound: every input token at the dearest input rate and the
    /// max output of every choice (the default; no budget is ever overdrawn by a
    /// request it admitted).
    #[default]
    UpperBound,
    /// The expected cost: the input estimate at the plain input rate plus the
    /// expected output of every choice, never above the upper bound.
    Estimate(ExpectedOutput),
}

/// The output tokens per choice an `estimate` hold expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedOutput {
    /// This many parts per million of the request's max output, rounded up.
    Share(u32),
    /// This many tokens, or the max output when it is smaller.
    Tokens(u64),
}

impl ExpectedOutput {
    /// The output tokens of one choice expected of a request whose max output is
    /// `max_output`.
    pub fn of(self, max_output: u64) -> u64 {
        match self {
            ExpectedOutput::Share(ppm) => {
                let ppm = u128::from(ppm.min(PER_MILLION));
                let per_million = u128::from(PER_MILLION);
                let t = (u128::from(max_output) * ppm).div_ceil(per_million);
                u64::try_from(t).unwrap_or(max_output)
            }
            ExpectedOutput::Tokens(n) => n.min(max_output),
        }
    }
}

/// The `[billing]` hold policy: what a request holds, and the most any one holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reservation {
    /// What the hold is made of.
    pub reserve: Reserve,
    /// The most money one request holds (minor units); `None` = no cap.
    pub cap: Option<Money>,
}

impl Reservation {
    /// The money a request of `facts` under `price` holds while it runs (B8): the
    /// upper bound or the estimate, at most the cap — and never less than one minor
    /// unit when the request can cost anything, so a budget already spent to its limit
    /// refuses it. Zero only for a request that cannot cost anything.
    pub fn hold(&self, facts: &RequestFacts, price: &Price) -> Money {
        let upper = price.upper_bound(
            facts.input_tokens,
            facts.output_upper_bound(),
            facts.images,
            facts.videos,
        );
        self.hold_of(upper, estimate(facts, price))
    }

    /// [`Self::hold`] from the request's money `upper` bound and its `estimate`
    /// (asked for only under [`Reserve::Estimate`]).
    pub fn hold_of(&self, upper: Money, estimate: impl FnOnce(ExpectedOutput) -> Money) -> Money {
        let upper = upper.max(0);
        let base = match self.reserve {
            Reserve::UpperBound => upper,
            Reserve::Estimate(expected) => estimate(expected).clamp(0, upper),
        };
        let capped = self.cap.map_or(base, |cap| base.min(cap));
        if upper > 0 { capped.max(1) } else { 0 }
    }
}

/// The expected cost of a request of `facts` under `price` when each choice produces
/// `expected` output: the input estimate at the plain input rate (cache reads are
/// cheaper, cache writes dearer; the real mix is known at settlement), the expected
/// output of every choice at the output rate, and the images and videos.
fn estimate(facts: &RequestFacts, price: &Price) -> impl FnOnce(ExpectedOutput) -> Money {
    move |expected| {
        let output = expected
            .of(facts.max_output_tokens)
            .saturating_mul(facts.choices.max(1));
        price.cost(&Usage {
            input_tokens: facts.input_tokens,
            output_tokens: output,
            images: facts.images,
            videos: facts.videos,
            ..Usage::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use portcullis_dialects::Operation;

    /// An agent's turn: 150 000 tokens of context, `max_tokens` 32 000.
    fn agent(choices: u64) -> RequestFacts {
        RequestFacts {
            operation: Operation::Generate,
            model: "m".into(),
            continues: None,
            stream: true,
            input_tokens: 150_000,
            max_output_tokens: 32_000,
            choices,
            images: 0,
            videos: 0,
            has_tools: true,
            structured_output: false,
            usage_reported: true,
        }
    }

    /// 3 a token in, 3.75 written to cache, 15 out (micro-units).
    fn price() -> Price {
        Price {
            input_per_mtok: 3_000_000,
            cached_input_per_mtok: 300_000,
            cache_write_per_mtok: 3_750_000,
            output_per_mtok: 15_000_000,
            ..Price::default()
        }
    }

    const UPPER: Money = 150_000 * 375 / 100 + 32_000 * 15;

    #[test]
    fn b8_upper_bound_is_the_default_and_holds_the_worst_case() {
        let r = Reservation::default();
        assert_eq!(r.reserve, Reserve::UpperBound);
        assert_eq!(r.cap, None);
        assert_eq!(r.hold(&agent(1), &price()), UPPER);
        // Every choice's max output, every input token at the dearest rate.
        assert_eq!(r.hold(&agent(2), &price()), UPPER + 32_000 * 15);
    }

    #[test]
    fn b8_no_request_holds_more_than_the_cap() {
        let capped = |cap| Reservation {
            reserve: Reserve::UpperBound,
            cap: Some(cap),
        };
        assert_eq!(capped(250_000).hold(&agent(1), &price()), 250_000);
        assert_eq!(capped(250_000).hold(&agent(4), &price()), 250_000);
        // A cap above the hold changes nothing.
        assert_eq!(capped(10_000_000).hold(&agent(1), &price()), UPPER);
        let estimate = Reservation {
            reserve: Reserve::Estimate(DEFAULT_EXPECTED_OUTPUT_SHARE),
            cap: Some(250_000),
        };
        assert_eq!(estimate.hold(&agent(1), &price()), 250_000);
    }

    #[test]
    fn b8_an_estimate_is_the_input_at_its_plain_rate_and_the_expected_output() {
        let with = |expected| Reservation {
            reserve: Reserve::Estimate(expected),
            cap: None,
        };
        // A quarter of 32 000 out, per choice.
        let input = 150_000 * 3;
        assert_eq!(
            with(DEFAULT_EXPECTED_OUTPUT_SHARE).hold(&agent(1), &price()),
            input + 8_000 * 15
        );
        assert_eq!(
            with(DEFAULT_EXPECTED_OUTPUT_SHARE).hold(&agent(3), &price()),
            input + 3 * 8_000 * 15
        );
        assert_eq!(
            with(ExpectedOutput::Tokens(2_000)).hold(&agent(1), &price()),
            input + 2_000 * 15
        );
        // Never above the upper bound: a fixed count above the max output is the max.
        assert_eq!(
            with(ExpectedOutput::Tokens(1_000_000)).hold(&agent(1), &price()),
            input + 32_000 * 15
        );
        assert_eq!(
            with(ExpectedOutput::Share(PER_MILLION)).hold(&agent(1), &price()),
            input + 32_000 * 15
        );
        assert!(with(ExpectedOutput::Share(PER_MILLION)).hold(&agent(1), &price()) <= UPPER);
        // A share rounds up: a third of 32 000 is 10 667 tokens.
        assert_eq!(ExpectedOutput::Share(PER_MILLION / 3).of(32_000), 10_667);
        assert_eq!(ExpectedOutput::Share(0).of(32_000), 0);
        assert_eq!(ExpectedOutput::Share(PER_MILLION).of(u64::MAX), u64::MAX);
    }

    #[test]
    fn b8_a_request_that_can_cost_anything_holds_at_least_one_minor_unit() {
        let r = Reservation {
            reserve: Reserve::Estimate(ExpectedOutput::Share(0)),
            cap: Some(1),
        };
        let free_input = Price {
            output_per_mtok: 15_000_000,
            ..Price::default()
        };
        // Expected cost 0 (input is free, no output expected), upper bound positive.
        assert_eq!(r.hold(&agent(1), &free_input), 1);
        assert_eq!(r.hold_of(5, |_| 0), 1);
        assert_eq!(
            r.hold_of(5, |_| -7),
            1,
            "a negative estimate holds one unit"
        );
        // A request that cannot cost anything holds nothing, under any policy.
        assert_eq!(r.hold(&agent(1), &Price::default()), 0);
        assert_eq!(Reservation::default().hold_of(0, |_| 9), 0);
        assert_eq!(Reservation::default().hold_of(-3, |_| 9), 0);
    }
}
