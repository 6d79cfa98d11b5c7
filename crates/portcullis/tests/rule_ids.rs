//! Every rule id a test is named after (`w8_…`, `d10_…`) is defined in the contract
//! pages (`crates/*/src/docs/**/*.md`), so a reader who meets a test can find its rule;
//! and every test a page cites as a rule's proof exists.
//! A rule is defined by a list item that starts with its id in bold: `- **W8.** …`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            let skip = name == "target"
                || name == ".git"
                || name.to_string_lossy().starts_with("mutants.out");
            if !skip {
                files(&p, ext, out);
            }
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The contract and guide pages.
fn pages() -> Vec<PathBuf> {
    let mut pages = Vec::new();
    let crates = std::fs::read_dir(workspace().join("crates")).expect("crates/");
    for krate in crates.flatten() {
        files(&krate.path().join("src/docs"), "md", &mut pages);
    }
    pages
}

/// Every Rust file of the workspace.
fn sources() -> Vec<PathBuf> {
    let mut sources = Vec::new();
    for dir in ["crates", "tests", "examples"] {
        files(&workspace().join(dir), "rs", &mut sources);
    }
    sources
}

fn shown(path: &Path) -> String {
    path.strip_prefix(workspace())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// `W8` from `- **W8.** …`; None for any other line.
fn defined_on(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("- **")?;
    let (id, _) = rest.split_once(".**")?;
    is_rule_id(id).then(|| id.to_owned())
}

/// One capital letter and a number: `W8`, `D10`.
fn is_rule_id(id: &str) -> bool {
    let mut c = id.chars();
    c.next().is_some_and(|l| l.is_ascii_uppercase())
        && id.len() > 1
        && c.all(|d| d.is_ascii_digit())
}

/// The rule id a name starts with: `w8_names_tier` → `W8`.
fn rule_of(name: &str) -> Option<String> {
    let (head, rest) = name.split_once('_')?;
    let id = head.to_ascii_uppercase();
    (is_rule_id(&id) && !rest.is_empty()).then_some(id)
}

/// The rule ids `fn` names start with in `text`: `fn w8_subscription…` → `W8`.
fn named_in(text: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for (i, _) in text.match_indices("fn ") {
        if i > 0 && text.as_bytes()[i - 1].is_ascii_alphanumeric() {
            continue;
        }
        let name: String = text[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        ids.extend(rule_of(&name));
    }
    ids
}

/// The names in backticks that look like a test named after a rule: `w8_names_tier`.
fn cited_in(page: &str) -> Vec<&str> {
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| {
            rule_of(c).is_some()
                && c.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        })
        .collect()
}

fn defined() -> BTreeSet<String> {
    pages()
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .expect("page")
                .lines()
                .filter_map(defined_on)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn rule_ids_in_test_names_are_defined_in_the_contract_pages() {
    let defined = defined();
    assert!(
        defined.len() > 50,
        "the contract pages define the rules: {defined:?}"
    );
    let mut undefined: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &sources() {
        let text = std::fs::read_to_string(f).expect("source");
        for id in named_in(&text) {
            if !defined.contains(&id) {
                undefined.entry(id).or_default().insert(shown(f));
            }
        }
    }
    assert!(
        undefined.is_empty(),
        "test names use rule ids that no page in crates/*/src/docs defines: {undefined:?}"
    );
}

/// A page that names a test as the proof of a rule names one that exists (tests get
/// renamed; the pages follow). A name that is not a test — a setting such as
/// `h2_idle_timeout` — is found in the sources as a string.
#[test]
fn tests_the_pages_cite_exist() {
    let code: String = sources()
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("source"))
        .collect();
    let mut missing = BTreeMap::<String, BTreeSet<String>>::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for name in cited_in(&text) {
            let found = code.contains(&format!("fn {name}("))
                || code.contains(&format!("fn {name}<"))
                || code.contains(&format!("\"{name}\""));
            if !found {
                missing
                    .entry(name.to_owned())
                    .or_default()
                    .insert(shown(&page));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "the pages cite tests that do not exist: {missing:?}"
    );
}

#[test]
fn a_rule_is_defined_by_a_bold_list_item_and_named_by_a_test_prefix() {
    assert_eq!(
        defined_on("- **W8.** A subscription…").as_deref(),
        Some("W8")
    );
    assert_eq!(defined_on("  - **D10.** Books").as_deref(), Some("D10"));
    assert_eq!(defined_on("**W8.** not a list item"), None);
    assert_eq!(defined_on("- **Note.** not an id"), None);
    // Put together here so that this file's own text names no undefined id.
    let source = [
        "w8_names_tier() {}",
        "d10_books() {}",
        "helper_x() {}",
        "q99_x() {}",
    ]
    .map(|f| ["fn ", f].concat())
    .join("\nasync ");
    assert_eq!(named_in(&source), ["W8", "D10", "Q99"]);
    assert!(named_in("fn t2() {} fn x1y_z() {} defn w8_x() {}").is_empty());
    assert_eq!(
        cited_in("Shown by: `w8_names_tier` and `d10_x` in `crates/a.rs`; `W8`, `t2`, `D9_x`"),
        ["w8_names_tier", "d10_x"]
    );
}
