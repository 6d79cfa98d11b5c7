//! Bad configuration never panics: it is refused with a position and a reason (P3).

use portcullis_proxy::Config;
use proptest::prelude::*;

const DEMO: &str = include_str!("../../../examples/demo.toml");

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn p3_arbitrary_text_is_refused_cleanly(text in ".{0,400}") {
        if let Err(e) = Config::parse(&text) {
            prop_assert!(!e.reason.is_empty());
        }
    }

    #[test]
    fn p3_mutated_demo_config_never_panics(cut in 0usize..DEMO.len(), insert in ".{0,12}") {
        let mut s = DEMO.to_owned();
        let cut = (0..=cut).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s.insert_str(cut, &insert);
        match Config::parse(&s) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(!e.reason.is_empty());
                if let Some(line) = e.line {
                    prop_assert!(line >= 1 && line <= s.lines().count() + 1, "line {line}");
                }
            }
        }
    }
}

#[test]
fn p3_the_bundled_demo_config_is_valid() {
    Config::parse(DEMO).expect("examples/demo.toml");
}

#[test]
fn p3_the_bundled_bench_config_is_valid() {
    Config::parse(include_str!("../../../examples/bench.toml")).expect("examples/bench.toml");
}
