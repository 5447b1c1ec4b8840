//! The crate's layers, checked: every module imports only modules on a
//! lower layer than its own (ARCHITECTURE.md, "The map"). A module that
//! reaches up (replication importing the master's service, the proxy
//! importing the API) fails this test, naming the file, the line and both
//! layers, before it can make a circle.

use std::path::Path;

/// The crate's top-level modules, bottom layer first. A module may use
/// those on earlier lines, and itself.
const LAYERS: &[&[&str]] = &[
    &["contract", "limits", "codes", "events", "guests", "labels"],
    &["runtime", "journal", "build", "telemetry"],
    &["exec", "modules", "blobs", "fault"],
    &["security"],
    &["peer", "membership"],
    &["replication"],
    &["master"],
    &["cluster", "metrics", "replay"],
    &["worker"],
    &["api"],
    &["cli", "demo", "node"],
];

fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|line| line.contains(&module))
}

/// The top-level module a source file belongs to (`None`: `lib.rs`,
/// `main.rs` and this file).
fn module_of(relative: &Path) -> Option<String> {
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    let name = name.strip_suffix("_tests").unwrap_or(name);
    (!matches!(name, "lib" | "main" | "layers")).then(|| name.to_string())
}

/// Every `crate::<module>` named on a line of code (not a comment).
fn crate_paths(line: &str) -> Vec<&str> {
    let code = line.trim_start();
    if code.starts_with("//") {
        return Vec::new();
    }
    code.match_indices("crate::")
        .filter(|(at, _)| !code[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_'))
        .filter_map(|(at, _)| {
            let rest = &code[at + "crate::".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            (end > 0).then(|| &rest[..end])
        })
        .collect()
}

fn sources(dir: &Path, found: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn no_module_imports_a_higher_layer() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    files.sort();
    let mut reaching_up = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap();
        let Some(module) = module_of(relative) else {
            continue;
        };
        let own = layer(&module).unwrap_or_else(|| {
            panic!(
                "{} is in no layer: add `{module}` to LAYERS",
                relative.display()
            )
        });
        let text = std::fs::read_to_string(file).unwrap();
        // Unit tests (a `#[cfg(test)]` module at the end of a file, or a
        // `*_tests.rs` file) may reach anywhere: they are not the graph.
        let lines: Vec<&str> = text.lines().collect();
        let tests_start = if relative.to_string_lossy().ends_with("_tests.rs") {
            0
        } else {
            (0..lines.len())
                .find(|&i| {
                    lines[i].trim() == "#[cfg(test)]"
                        && lines.get(i + 1).is_some_and(|next| next.contains("mod "))
                })
                .unwrap_or(lines.len())
        };
        for (number, line) in lines[..tests_start].iter().enumerate() {
            for used in crate_paths(line) {
                checked += 1;
                let Some(theirs) = layer(used) else {
                    continue; // an item of lib.rs (`crate::client`, `crate::doc_section`)
                };
                if used != module && theirs >= own {
                    reaching_up.push(format!(
                        "{}:{}: {module} (layer {own}) uses crate::{used} (layer {theirs})",
                        relative.display(),
                        number + 1
                    ));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} crate paths were read: is the walk broken?"
    );
    assert!(
        reaching_up.is_empty(),
        "imports that reach up:\n{}",
        reaching_up.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let lib = include_str!("lib.rs");
    for line in lib.lines() {
        if let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|r| r.strip_suffix(';'))
        {
            assert!(
                layer(name).is_some(),
                "`{name}` is in no layer: add it to LAYERS"
            );
        }
    }
}

#[test]
fn crate_paths_are_read_from_code_only() {
    assert_eq!(
        crate_paths("use crate::contract::{MasterError, now_ms};"),
        ["contract"]
    );
    assert_eq!(
        crate_paths("    let x = crate::api::json(crate::codes::X);"),
        ["api", "codes"]
    );
    assert!(crate_paths("/// See [`crate::master::service`].").is_empty());
    assert!(crate_paths("use cohort_master::master::X;").is_empty());
}
