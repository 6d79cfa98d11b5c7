//! The crates publish: every library crate and the CLI package cleanly, with the
//! metadata crates.io shows, and nothing a published crate needs is unpublishable.
//! Only the examples and these black-box tests stay out of the registry.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// The crates a user can `cargo add` (or `cargo install`).
const PUBLISHED: [&str; 8] = [
    "portcullis",
    "portcullis-core",
    "portcullis-redis",
    "portcullis-records",
    "portcullis-proxy",
    "portcullis-dialects",
    "portcullis-fake-upstream",
    "portcullis-cli",
];

/// What stays in the repository.
const UNPUBLISHED: [&str; 3] = [
    "portcullis-examples",
    "portcullis-tests",
    "portcullis-test-support",
];

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// Runs cargo in the workspace with `args`; fails the test, with cargo's error output,
/// unless it succeeds. Returns its output.
fn cargo<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .current_dir(workspace())
        .args(args)
        .output()
        .expect("cargo runs");
    let line = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy())
        .collect::<Vec<_>>();
    assert!(
        out.status.success(),
        "cargo {} failed:\n{}",
        line.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn metadata() -> Value {
    let out = cargo(&[
        "metadata",
        "--format-version",
        "1",
        "--no-deps",
        "--offline",
    ]);
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// `cargo package --workspace --no-verify` of everything but the examples and the tests
/// succeeds and writes one `.crate` per published crate, with no warning (a manifest
/// without documentation, homepage or repository, an unpublishable dependency …).
#[test]
fn every_published_crate_packages_without_a_warning() {
    let dir = std::env::temp_dir().join(format!("portcullis-package-{}", std::process::id()));
    let mut args: Vec<std::ffi::OsString> = [
        "package",
        "--offline",
        "--workspace",
        "--no-verify",
        "--allow-dirty",
    ]
    .map(Into::into)
    .into();
    for c in UNPUBLISHED {
        args.extend(["--exclude".into(), c.into()]);
    }
    args.extend(["--target-dir".into(), dir.clone().into_os_string()]);
    let out = cargo(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert!(
        warnings.is_empty(),
        "cargo package warned:\n{}",
        warnings.join("\n")
    );
    let version = env!("CARGO_PKG_VERSION");
    for name in PUBLISHED {
        let file = dir.join("package").join(format!("{name}-{version}.crate"));
        assert!(file.is_file(), "{} was not packaged", file.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each published crate carries its readme and both license texts (MIT and Apache-2.0,
/// the `license` the manifests name), not only the workspace root.
#[test]
fn every_published_crate_ships_its_readme_and_license_texts() {
    for name in PUBLISHED {
        let out = cargo(&[
            "package",
            "--list",
            "--offline",
            "--allow-dirty",
            "-p",
            name,
        ]);
        let files = String::from_utf8_lossy(&out.stdout);
        for file in ["README.md", "LICENSE-MIT", "LICENSE-APACHE"] {
            assert!(
                files.lines().any(|l| l == file),
                "{name} does not ship {file}"
            );
        }
    }
}

/// Each published crate carries what crates.io and docs.rs show: a description, a
/// license, the repository, its documentation, a readme that is in the crate, keywords
/// and categories; the examples and tests are marked unpublishable.
#[test]
fn every_published_crate_has_its_registry_metadata() {
    let meta = metadata();
    let packages = meta["packages"].as_array().expect("packages");
    let named: Vec<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    for name in PUBLISHED.iter().chain(&UNPUBLISHED) {
        assert!(named.contains(name), "{name} is not a workspace member");
    }
    for p in packages {
        let name = p["name"].as_str().unwrap();
        if UNPUBLISHED.contains(&name) {
            assert_eq!(
                p["publish"],
                serde_json::json!([]),
                "{name} must not publish"
            );
            continue;
        }
        assert!(
            PUBLISHED.contains(&name),
            "{name}: a new crate, published or not?"
        );
        assert!(p["publish"].is_null(), "{name} is marked unpublishable");
        for field in [
            "description",
            "license",
            "repository",
            "documentation",
            "readme",
        ] {
            let v = p[field].as_str().unwrap_or_default();
            assert!(!v.is_empty(), "{name} has no {field}");
        }
        let readme = Path::new(p["manifest_path"].as_str().unwrap())
            .parent()
            .unwrap()
            .join(p["readme"].as_str().unwrap());
        assert!(
            readme.is_file(),
            "{name}'s readme {} is missing",
            readme.display()
        );
        for field in ["keywords", "categories"] {
            let n = p[field].as_array().map_or(0, Vec::len);
            assert!(
                (1..=5).contains(&n),
                "{name} has {n} {field} (crates.io takes 1 to 5)"
            );
        }
        // A published crate depends on published crates only: every workspace crate it
        // needs at run time is in the published list.
        for d in p["dependencies"].as_array().unwrap() {
            let dep = d["name"].as_str().unwrap();
            if dep.starts_with("portcullis") && d["kind"].is_null() {
                assert!(PUBLISHED.contains(&dep), "{name} needs unpublished {dep}");
            }
        }
    }
}
