//! Jobs in Python and JavaScript/TypeScript, end to end: `cohort new` and
//! `cohort build` with the pinned toolchains (installed from PyPI and npm
//! on first use; a missing toolchain fails these tests, it never skips
//! them), the examples against their Rust twins byte for byte, uncaught
//! errors, refused modules, a kill-and-resume on a cluster, and outbound
//! HTTP (Python's `cohort_job.http`, JavaScript's `fetch`) to a loopback
//! server, granted and refused by deployment name, and the webhook examples
//! with a secret their grant adds.

mod support;

use cohort::api::types::{JobResponse, SubmitRequest};
use cohort::client::Node as Api;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock};
use support::faults::check_job;
use support::http::{Seen, Server, respond};
use support::{
    CONVERGE, Node, cohort, converge, guest, run_bounded, running_with_checkpoint, runtime, settle,
    start, token_at,
};

/// The repository root.
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
/// Where these tests keep toolchains, builds and compiled modules between
/// runs (inside `target/`).
const SCRATCH: &str = env!("CARGO_TARGET_TMPDIR");

/// The tests here build and run Python and JavaScript components, which
/// keeps both CPUs of a small machine busy. They share it (`shared`); the
/// one with a cluster of real nodes has it alone (`alone`): while others
/// compiled components, its workers' gossip starved and they fell out of
/// the cluster again and again, past the test's bound.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

fn toolchains() -> String {
    format!("{SCRATCH}/toolchains")
}

/// `cohort exec`'s compile cache: the one the tests' nodes share, so a
/// module compiled by an exec here is not compiled again by a node.
fn exec_cache() -> String {
    support::NODE_CACHE.to_owned()
}

/// Builds the project at `project` (relative to the repository root) once
/// per test process, with `cohort build`; returns the component's path.
fn built(project: &str) -> PathBuf {
    static BUILDS: OnceLock<Mutex<HashMap<String, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let cell = BUILDS
        .get_or_init(Default::default)
        .lock()
        .unwrap()
        .entry(project.to_string())
        .or_default()
        .clone();
    cell.get_or_init(|| {
        let out = PathBuf::from(format!(
            "{SCRATCH}/languages/{}.wasm",
            project.replace('/', "_")
        ));
        build(&Path::new(ROOT).join(project), &out);
        out
    })
    .clone()
}

/// `cohort build DIR -o OUT`, asserting success.
fn build(dir: &Path, out: &Path) {
    let output = cohort(
        &[
            "build",
            dir.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--toolchains",
            &toolchains(),
        ],
        b"",
    );
    assert!(
        output.status.success(),
        "cohort build {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        out.to_str().unwrap(),
        "cohort build prints the component's path, and only that"
    );
}

/// `cohort exec MODULE` on `input` (plus `extra` arguments): (exit code,
/// stdout, stderr).
fn exec(module: &Path, input: &[u8], extra: &[&str]) -> (i32, Vec<u8>, String) {
    let mut args = vec!["exec", module.to_str().unwrap(), "-i", "-", "--cache-dir"];
    let cache = exec_cache();
    args.push(&cache);
    args.extend_from_slice(extra);
    let output = cohort(&args, input);
    (
        output.status.code().unwrap_or(-1),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Appends code point `c` to inclusive `ranges`, merging with the last.
fn push_range(ranges: &mut Vec<(u32, u32)>, c: char) {
    match ranges.last_mut() {
        Some(last) if last.1 + 1 == c as u32 => last.1 = c as u32,
        _ => ranges.push((c as u32, c as u32)),
    }
}

fn range_list(ranges: &[(u32, u32)]) -> String {
    ranges
        .iter()
        .map(|(a, b)| format!("[{a},{b}]"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The generated Unicode tables the Python and JS `wordcount` use, as they
/// must read: Rust's `char::is_alphanumeric` as inclusive code-point
/// ranges, and (for JS, whose `toLowerCase` has no final-sigma rule) the
/// word characters Rust's final-sigma rule takes as cased or skips as
/// case-ignorable, found by asking `to_lowercase` itself (std has no public
/// Cased/Case_Ignorable tables).
fn word_tables() -> [(&'static str, String); 3] {
    let (mut alnum, mut cased, mut ignorable) = (Vec::new(), Vec::new(), Vec::new());
    for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
        if c.is_alphanumeric() {
            push_range(&mut alnum, c);
        }
        if !(c.is_alphanumeric() || c == '\'') {
            continue;
        }
        // "cΣ" ends in a final sigma iff c is cased and not case-ignorable;
        // "AcΣ" also does iff c is case-ignorable (skipped).
        if format!("{c}Σ").to_lowercase().ends_with('ς') {
            push_range(&mut cased, c);
        } else if format!("A{c}Σ").to_lowercase().ends_with('ς') {
            push_range(&mut ignorable, c);
        }
    }
    let (major, minor, update) = char::UNICODE_VERSION;
    let unicode = format!("Unicode {major}.{minor}.{update}");
    let header = format!(
        "Generated from Rust's char::is_alphanumeric ({unicode}) by tests/languages.rs; COHORT_BLESS=1 rewrites it. Do not edit."
    );
    let list = range_list(&alnum);
    [
        (
            "examples/wordcount-py/alnum.py",
            format!("# {header}\nRANGES = [{list}]\n"),
        ),
        (
            "examples/wordcount-js/alnum.js",
            format!("// {header}\nexport const RANGES = [{list}];\n"),
        ),
        (
            "examples/wordcount-js/casing.js",
            format!(
                "// Generated from Rust's str::to_lowercase ({unicode}) by tests/languages.rs; COHORT_BLESS=1 rewrites it. \
                 The word characters (alphanumeric or ') that its final-sigma rule takes as cased, and those it skips as case-ignorable. Do not edit.\n\
                 export const CASED = [{}];\n\
                 export const CASE_IGNORABLE = [{}];\n",
                range_list(&cased),
                range_list(&ignorable)
            ),
        ),
    ]
}

#[test]
fn the_word_tables_of_python_and_js_are_rusts() {
    let _machine = shared();
    for (file, expected) in word_tables() {
        let path = Path::new(ROOT).join(file);
        if std::env::var_os("COHORT_BLESS").is_some() {
            std::fs::write(&path, &expected).unwrap();
        }
        let actual = std::fs::read_to_string(&path).unwrap();
        assert!(
            actual == expected,
            "{file} is not Rust's table for this Unicode version: run `COHORT_BLESS=1 cargo test --test languages`"
        );
    }
}

#[test]
fn the_module_list_names_each_components_language_and_world() {
    let _machine = shared();
    for (project, language) in [
        ("tests/fixtures/echo-py", "python"),
        ("tests/fixtures/echo-js", "javascript"),
        ("examples/primes-ts", "javascript"),
    ] {
        let wasm = std::fs::read(built(project)).unwrap();
        let (found, world) = cohort::modules::describe(&wasm);
        assert_eq!(found, language, "{project}");
        assert_eq!(world.as_deref(), Some("cohort:job/job@0.2.0"), "{project}");
    }
    let rust = std::fs::read(guest("fixture_echo")).unwrap();
    assert_eq!(cohort::modules::describe(&rust).0, "rust");
}

#[test]
fn new_jobs_build_and_run_as_they_are_in_every_language() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    for lang in ["rust", "python", "js"] {
        let project = dir.path().join(format!("hello-{lang}"));
        let out = cohort(&["new", "--lang", lang, project.to_str().unwrap()], b"");
        assert!(out.status.success(), "{out:?}");
        let component = dir.path().join(format!("hello-{lang}.wasm"));
        if lang == "rust" {
            // Its own target directory, kept between runs.
            let output = run_bounded(
                Command::new(env!("CARGO_BIN_EXE_cohort"))
                    .args(["build", project.to_str().unwrap(), "-o"])
                    .arg(&component)
                    .env("CARGO_TARGET_DIR", format!("{SCRATCH}/new-rust-target")),
                b"",
            );
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
        } else {
            build(&project, &component);
        }
        let (code, stdout, stderr) = exec(&component, br#"{"name": "Ada"}"#, &[]);
        assert_eq!(code, 0, "{lang}: {stderr}");
        assert_eq!(stdout, br#"{"greeting":"Hello, Ada!"}"#, "{lang}");
        assert!(stderr.contains("greeting Ada"), "{lang} logs: {stderr}");
        let (code, _, stderr) = exec(&component, b"{}", &[]);
        assert_eq!(code, 1, "{lang}: {stderr}");
        assert!(stderr.contains("bad_input"), "{lang}: {stderr}");
    }
    // Refusals name the problem.
    let taken = cohort(
        &["new", "--lang", "python", dir.path().to_str().unwrap()],
        b"",
    );
    assert!(!taken.status.success());
    let bad = cohort(&["new", "--lang", "js", "Not A Name"], b"");
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("job name"), "{stderr}");
    let empty = tempfile::tempdir().unwrap();
    let none = cohort(&["build", empty.path().to_str().unwrap()], b"");
    let stderr = String::from_utf8_lossy(&none.stderr);
    assert!(stderr.contains("is not a job project"), "{stderr}");
}

/// `cohort build PROJECT -o OUT` with the tests' toolchains and `extra`
/// arguments: its output, success or not.
fn try_build(project: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    try_build_with(project, out, extra, &[])
}

/// [`try_build`] with the environment variables `env` set too.
fn try_build_with(
    project: &Path,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut args = vec![
        "build",
        project.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--toolchains",
    ];
    let toolchains = toolchains();
    args.push(&toolchains);
    args.extend_from_slice(extra);
    support::cohort_with_env(&args, env, b"")
}

/// Copies the example at `example` (relative to the repository root)
/// into `dir`, without what builds leave in it (`dist`, `__pycache__`,
/// `node_modules`).
fn copy_example(example: &str, dir: &Path) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name();
            if ["dist", "__pycache__", "node_modules"].contains(&name.to_str().unwrap()) {
                continue;
            }
            match entry.file_type().unwrap().is_dir() {
                true => copy(&entry.path(), &to.join(&name)),
                false => drop(std::fs::copy(entry.path(), to.join(&name)).unwrap()),
            }
        }
    }
    let from = Path::new(ROOT).join(example);
    let to = dir.join(from.file_name().unwrap());
    copy(&from, &to);
    to
}

/// [`try_build`], asserting success.
fn build_ok(project: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let built = try_build(project, out, extra);
    let stderr = String::from_utf8_lossy(&built.stderr);
    assert!(
        built.status.success(),
        "cohort build {}: {stderr}",
        project.display()
    );
    built
}

/// A Python project of one `app.py` declaring `dependencies`.
fn python_project(dir: &Path, name: &str, dependencies: &[&str], app: &str) -> PathBuf {
    let project = dir.join(name);
    std::fs::create_dir_all(&project).unwrap();
    let dependencies: Vec<String> = dependencies.iter().map(|d| format!("{d:?}")).collect();
    std::fs::write(
        project.join("pyproject.toml"),
        format!(
            "[project]\nname = \"{name}\"\nversion = \"0.1.0\"\ndependencies = [{}]\n",
            dependencies.join(", ")
        ),
    )
    .unwrap();
    std::fs::write(project.join("app.py"), app).unwrap();
    project
}

/// What the build said on stderr, asserting it failed.
fn build_error(output: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "the build succeeded: {stderr}");
    stderr
}

/// A Python job's dependencies come from its `pyproject.toml`, from PyPI:
/// the example with two of them builds from its committed lock
/// (`--locked`) and runs; a rebuild with nothing changed is the same
/// bytes; nothing is written into the project; a lock that no longer
/// matches, or none, fails `--locked`; a package with only platform
/// wheels (MarkupSafe, under jinja2), one that does not exist and a
/// conflict are build errors naming them; and what the builder's own
/// Python has installed (pip) is not bundled.
#[test]
fn python_dependencies_are_locked_installed_for_the_job_and_refused_by_name() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let project = copy_example("examples/due-dates-py", dir.path());
    let lock = std::fs::read_to_string(project.join("cohort.lock")).unwrap();
    let out = dir.path().join("due-dates.wasm");
    build_ok(&project, &out, &["--locked"]);
    let input = br#"{"start": "2026-01-31", "months": 4, "amount": 250}"#;
    let (code, stdout, stderr) = exec(&out, input, &[]);
    assert_eq!(code, 0, "{stderr}");
    let table = String::from_utf8(stdout).unwrap();
    let dates: Vec<&str> = (table.lines().skip(2))
        .map(|line| line.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        dates,
        ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"],
        "{table}"
    );
    assert!(table.contains("Saturday"), "{table}");
    let (code, _, stderr) = exec(&out, br#"{"start": "someday"}"#, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("bad_input"), "{stderr}");
    // The project holds what it held: no __pycache__, the lock as it was.
    let mut left: Vec<String> = std::fs::read_dir(&project)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["README.md", "app.py", "cohort.lock", "pyproject.toml"]
    );
    assert_eq!(
        std::fs::read_to_string(project.join("cohort.lock")).unwrap(),
        lock
    );
    // Unchanged: the same component.
    let again = dir.path().join("again.wasm");
    let rebuilt = build_ok(&project, &again, &["--locked"]);
    let said = String::from_utf8_lossy(&rebuilt.stderr);
    assert!(said.contains("unchanged"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
    // A dependency added: the lock no longer matches.
    let manifest = std::fs::read_to_string(project.join("pyproject.toml")).unwrap();
    let added = manifest.replace(
        "\"tabulate>=0.9\",",
        "\"tabulate>=0.9\",\n    \"humanize\",",
    );
    assert_ne!(added, manifest);
    std::fs::write(project.join("pyproject.toml"), added).unwrap();
    let stale = build_error(&try_build(&project, &out, &["--locked"]));
    assert!(stale.contains("does not match"), "{stale}");
    std::fs::remove_file(project.join("cohort.lock")).unwrap();
    let missing = build_error(&try_build(&project, &out, &["--locked"]));
    assert!(missing.contains("cohort.lock is missing"), "{missing}");
    // Without --locked the lock is made again, with what was added; the
    // next build installs nothing more and is the same component.
    build_ok(&project, &out, &[]);
    let relocked = std::fs::read_to_string(project.join("cohort.lock")).unwrap();
    assert!(relocked.contains("\nhumanize=="), "{relocked}");
    let rebuilt = build_ok(&project, &again, &["--locked"]);
    let said = String::from_utf8_lossy(&rebuilt.stderr);
    assert!(
        said.contains("unchanged") && !said.contains("installing"),
        "{said}"
    );
    // An unknown optional group.
    let group = build_error(&try_build(&project, &out, &["--extra", "plots"]));
    assert!(
        group.contains("no optional dependency group `plots`"),
        "{group}"
    );

    let app = "from cohort_job import job\n\n@job\ndef run(data):\n    return data\n";
    let native = python_project(dir.path(), "native", &["jinja2"], app);
    let error = build_error(&try_build(&native, &out, &[]));
    assert!(error.to_lowercase().contains("`markupsafe"), "{error}");
    assert!(error.contains("only platform wheels"), "{error}");
    assert!(
        !native.join("cohort.lock").exists(),
        "no lock of a failed resolution"
    );
    let nowhere = "cohort-test-no-such-package-4f1d";
    let unknown = python_project(dir.path(), "unknown", &[nowhere], app);
    let error = build_error(&try_build(&unknown, &out, &[]));
    assert!(
        error.contains(&format!("`{nowhere}` is not on the package index")),
        "{error}"
    );
    let both = ["tabulate==0.9.0", "tabulate==0.10.0"];
    let conflict = python_project(dir.path(), "conflict", &both, app);
    let error = build_error(&try_build(&conflict, &out, &[]));
    assert!(error.contains("the dependencies conflict"), "{error}");
    // pip is in the builder's Python, not in the job's.
    let undeclared = "import pip\n".to_string() + app;
    let hermetic = python_project(dir.path(), "hermetic", &[], &undeclared);
    let error = build_error(&try_build(&hermetic, &out, &[]));
    assert!(error.contains("No module named 'pip'"), "{error}");
}

/// A JavaScript project of one `index.js` (`code`) declaring
/// `dependencies` (name, version range).
fn js_project(dir: &Path, name: &str, dependencies: &[(&str, &str)], code: &str) -> PathBuf {
    let project = dir.join(name);
    std::fs::create_dir_all(&project).unwrap();
    let dependencies: serde_json::Map<String, Value> = (dependencies.iter())
        .map(|(name, range)| (name.to_string(), json!(range)))
        .collect();
    let manifest = json!({"name": name, "type": "module", "dependencies": dependencies});
    std::fs::write(project.join("package.json"), manifest.to_string()).unwrap();
    std::fs::write(project.join("index.js"), code).unwrap();
    project
}

/// A TypeScript job's dependencies come from its `package-lock.json`, as
/// `npm ci` would install them but outside the project: the example with
/// date-fns and zod builds `--locked` (type-checked against them) and
/// runs; a rebuild with nothing changed is the same bytes; a lock that no
/// longer matches, or none, fails `--locked`, and without it the lock is
/// made anew; a Node.js built-in imported by the job or by a package, and
/// a package the registry does not have, are build errors naming them.
#[test]
fn js_dependencies_come_from_the_lock_and_node_builtins_are_refused_by_name() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    let project = copy_example("examples/due-dates-ts", dir.path());
    let out = dir.path().join("due-dates.wasm");
    build_ok(&project, &out, &["--locked"]);
    let input = br#"{"start": "2026-01-31", "months": 4, "amount": 250}"#;
    let (code, stdout, stderr) = exec(&out, input, &[]);
    assert_eq!(code, 0, "{stderr}");
    let answer: Value = serde_json::from_slice(&stdout).unwrap();
    let dates: Vec<&str> = (answer["due"].as_array().unwrap().iter())
        .map(|due| due["date"].as_str().unwrap())
        .collect();
    assert_eq!(
        dates,
        ["2026-01-31", "2026-02-28", "2026-03-31", "2026-04-30"],
        "{answer}"
    );
    assert_eq!(answer["due"][0]["weekday"], "Saturday");
    // zod's message for a bad input.
    let (code, _, stderr) = exec(&out, br#"{"start": "2026-01-31", "months": 0}"#, &[]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("bad_input") && stderr.contains("months"),
        "{stderr}"
    );
    // Nothing installed into the project.
    assert!(!project.join("node_modules").exists());
    let again = dir.path().join("again.wasm");
    let rebuilt = build_ok(&project, &again, &["--locked"]);
    let said = String::from_utf8_lossy(&rebuilt.stderr);
    assert!(said.contains("unchanged"), "{said}");
    assert!(said.contains("types checked before"), "{said}");
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
    // The lock out of date, then missing: `--locked` refuses; without it,
    // the lock is made again.
    let manifest = std::fs::read_to_string(project.join("package.json")).unwrap();
    let loosened = manifest.replace("\"zod\": \"^3.23.8\"", "\"zod\": \"^3.22.0\"");
    assert_ne!(loosened, manifest);
    std::fs::write(project.join("package.json"), &loosened).unwrap();
    let stale = build_error(&try_build(&project, &out, &["--locked"]));
    assert!(stale.contains("does not match"), "{stale}");
    std::fs::write(project.join("package.json"), &manifest).unwrap();
    std::fs::remove_file(project.join("package-lock.json")).unwrap();
    let missing = build_error(&try_build(&project, &out, &["--locked"]));
    assert!(
        missing.contains("package-lock.json is missing"),
        "{missing}"
    );
    build_ok(&project, &out, &[]);
    let lock = std::fs::read_to_string(project.join("package-lock.json")).unwrap();
    assert!(lock.contains("node_modules/date-fns") && lock.contains("node_modules/zod"));

    let own = js_project(
        dir.path(),
        "own-fs",
        &[],
        "import { readFileSync } from \"fs\";\nimport { job } from \"cohort-job\";\n\
         export const run = job((input) => readFileSync(\"/etc/hostname\"));\n",
    );
    let error = build_error(&try_build(&own, &out, &[]));
    assert!(error.contains("`fs` is a Node.js built-in"), "{error}");
    assert!(error.contains("the job's own code (index.js:1:"), "{error}");
    let imports_fs = js_project(
        dir.path(),
        "package-fs",
        &[("fs-extra", "11.2.0")],
        "import fse from \"fs-extra\";\nimport { job } from \"cohort-job\";\n\
         export const run = job((input) => fse.readFileSync(\"/etc/hostname\"));\n",
    );
    let error = build_error(&try_build(&imports_fs, &out, &[]));
    assert!(error.contains("is a Node.js built-in"), "{error}");
    assert!(error.contains("imported by the package `"), "{error}");
    let nowhere = "cohort-test-no-such-package-4f1d";
    let unknown = js_project(dir.path(), "unknown", &[(nowhere, "^1.0.0")], "");
    let error = build_error(&try_build(&unknown, &out, &[]));
    assert!(
        error.contains(&format!("`{nowhere}@^1.0.0` is not on the npm registry")),
        "{error}"
    );
    assert!(!unknown.join("package-lock.json").exists());
}

/// A package index or registry that cannot be reached (a loopback port
/// nothing listens on) fails the build saying so, for Python and for
/// JavaScript, and leaves no lock behind.
#[test]
fn an_index_that_cannot_be_reached_fails_the_build_saying_so() {
    let _machine = shared();
    // The toolchains come from the real index and registry first: only
    // the job's dependencies are asked of the closed ones.
    built("tests/fixtures/echo-py");
    built("tests/fixtures/echo-js");
    let dir = tempfile::tempdir().unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let out = dir.path().join("out.wasm");
    let build = |project: &Path, env: &[(&str, &str)]| {
        build_error(&try_build_with(project, &out, &[], env))
    };
    let app = "from cohort_job import job\n\n@job\ndef run(data):\n    return data\n";
    let python = python_project(dir.path(), "offline-py", &["tabulate"], app);
    let index = format!("http://127.0.0.1:{port}/simple");
    let error = build(&python, &[("PIP_INDEX_URL", &index)]);
    assert!(
        error.contains("the package index cannot be reached"),
        "{error}"
    );
    assert!(!python.join("cohort.lock").exists());
    let js = js_project(dir.path(), "offline-js", &[("zod", "^3.23.8")], "");
    let registry = format!("http://127.0.0.1:{port}/");
    let env = [
        ("npm_config_registry", registry.as_str()),
        ("npm_config_fetch_retries", "0"),
    ];
    let error = build(&js, &env);
    assert!(
        error.contains("the npm registry cannot be reached"),
        "{error}"
    );
    assert!(!js.join("package-lock.json").exists());
}

#[test]
fn wordcount_gives_the_same_bytes_in_rust_python_and_javascript() {
    let _machine = shared();
    let rust = guest("wordcount");
    let python = built("examples/wordcount-py");
    let js = built("examples/wordcount-js");
    let text = support::text::sample(support::text::SAMPLE_BYTES);
    let inputs: [&[u8]; 7] = [
        text.as_bytes(),
        b"",
        b"'' ' '''",
        "ΟΔΟΣ ΟΔΟΣ σοφίαΣ".as_bytes(),
        "İstanbul İSTANBUL".as_bytes(),
        "𝒜 𝒜b 𝒜 a Z z 𐐀 ﬀ".as_bytes(),
        "don't 'quoted' 'tis rock'n'roll".as_bytes(),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (n, input) in inputs.into_iter().enumerate() {
        let (code, expected, stderr) = exec(&rust, input, &[]);
        assert_eq!(code, 0, "{stderr}");
        for (language, module) in [("Python", &python), ("JavaScript", &js)] {
            let (code, output, stderr) = exec(module, input, &[]);
            assert_eq!(code, 0, "{language}: {stderr}");
            assert!(
                output == expected,
                "{language} wordcount differs from Rust's on {:?}:\n{}\n{}",
                String::from_utf8_lossy(&input[..input.len().min(60)]),
                String::from_utf8_lossy(&output),
                String::from_utf8_lossy(&expected)
            );
            assert!(stderr.contains("counted "), "{language} logs: {stderr}");
        }
        // The same text as an input blob, streamed: the same answer, and
        // the same table of counts in every language.
        let file = dir.path().join(format!("text-{n}"));
        std::fs::write(&file, input).unwrap();
        let mut tables = Vec::new();
        for (language, module) in [("Rust", &rust), ("Python", &python), ("JavaScript", &js)] {
            let outputs = dir.path().join(format!("out-{n}-{language}"));
            let (code, output, stderr) = exec(
                module,
                b"",
                &[
                    "--input-blob",
                    file.to_str().unwrap(),
                    "--outputs",
                    outputs.to_str().unwrap(),
                ],
            );
            assert_eq!(code, 0, "{language} streaming: {stderr}");
            assert!(
                output == expected,
                "{language} wordcount streaming differs from inline on {:?}:\n{}\n{}",
                String::from_utf8_lossy(&input[..input.len().min(60)]),
                String::from_utf8_lossy(&output),
                String::from_utf8_lossy(&expected)
            );
            let table = std::fs::read(outputs.join("counts.tsv")).unwrap();
            tables.push((language, table));
        }
        let (_, rust_table) = &tables[0];
        let answer: Value = serde_json::from_slice(&expected).unwrap();
        assert_eq!(
            String::from_utf8_lossy(rust_table).lines().count() as u64,
            answer["unique"].as_u64().unwrap()
        );
        for (language, table) in &tables[1..] {
            assert!(
                table == rust_table,
                "{language}'s counts.tsv differs from Rust's on {:?}",
                String::from_utf8_lossy(&input[..input.len().min(60)]),
            );
        }
    }
    // Invalid UTF-8 is refused by every language alike.
    for module in [&rust, &python, &js] {
        let (code, _, stderr) = exec(module, b"caf\xe9", &[]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("bad_input"), "{stderr}");
    }
}

/// The Rust and Python `wordcount`s stream an input blob larger than their
/// memory limit (160 MiB within 64 MiB, in a sandbox process, as a node
/// runs it), and count it as they count one copy of its text times the
/// number of copies. JavaScript is not here: its engine's collector grows
/// the heap with the work done, varying with the machine's load, so its
/// memory is not bounded by the input's size (BENCHMARKS.md, "Streaming
/// jobs' peak memory by language").
#[test]
fn wordcount_streams_an_input_larger_than_its_memory_in_rust_and_python() {
    // Alone: it streams 160 MiB through three sandbox processes.
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let piece = support::text::sample(1 << 20);
    let write = |copies: u64| {
        let big = dir.path().join(format!("big-{copies}.txt"));
        let mut file = std::io::BufWriter::new(std::fs::File::create(&big).unwrap());
        for _ in 0..copies {
            file.write_all(piece.as_bytes()).unwrap();
        }
        file.flush().unwrap();
        big
    };
    for (language, module, memory, copies) in [
        ("Rust", guest("wordcount"), "64MiB", 160u64),
        ("Python", built("examples/wordcount-py"), "64MiB", 160),
    ] {
        let limit = cohort::runtime::job_limits::parse_bytes(memory).unwrap();
        assert!(piece.len() as u64 * copies > limit, "{language}");
        let big = write(copies);
        let (code, one, stderr) = exec(&module, piece.as_bytes(), &[]);
        assert_eq!(code, 0, "{language}: {stderr}");
        let one: Value = serde_json::from_slice(&one).unwrap();
        let outputs = dir.path().join(language);
        let (code, all, stderr) = exec(
            &module,
            b"",
            &[
                "--input-blob",
                big.to_str().unwrap(),
                "--outputs",
                outputs.to_str().unwrap(),
                "--memory",
                memory,
                "--timeout",
                "10m",
                "--isolation",
                "process",
            ],
        );
        assert_eq!(code, 0, "{language}: {stderr}");
        let all: Value = serde_json::from_slice(&all).unwrap();
        let mut expected = one.clone();
        expected["words"] = json!(one["words"].as_u64().unwrap() * copies);
        for entry in expected["top"].as_array_mut().unwrap() {
            entry["count"] = json!(entry["count"].as_u64().unwrap() * copies);
        }
        assert_eq!(all, expected, "{language}");
        assert!(outputs.join("counts.tsv").is_file(), "{language}");
        std::fs::remove_file(&big).unwrap();
    }
}

#[test]
fn primes_in_python_and_typescript_count_like_rust_and_resume_from_checkpoints() {
    let _machine = shared();
    let dir = tempfile::tempdir().unwrap();
    for (language, module) in [
        ("Python", built("examples/primes-py")),
        ("TypeScript", built("examples/primes-ts")),
    ] {
        for limit in [1u64, 2, 100, 1_000_000] {
            let input = format!(r#"{{"limit": {limit}}}"#);
            let (code, output, stderr) = exec(&module, input.as_bytes(), &[]);
            assert_eq!(code, 0, "{language}: {stderr}");
            let expected = format!(
                r#"{{"limit":{limit},"count":{}}}"#,
                primes::count_primes(limit)
            );
            assert_eq!(String::from_utf8_lossy(&output), expected, "{language}");
        }
        // A checkpoint saved by one run is where the next one resumes.
        let checkpoint = dir.path().join(format!("{language}.checkpoint"));
        let input = br#"{"limit": 3000000}"#;
        let (code, first, stderr) = exec(
            &module,
            input,
            &["--save-checkpoint", checkpoint.to_str().unwrap()],
        );
        assert_eq!(code, 0, "{language}: {stderr}");
        let (code, resumed, stderr) =
            exec(&module, input, &["--resume", checkpoint.to_str().unwrap()]);
        assert_eq!(code, 0, "{language}: {stderr}");
        assert!(stderr.contains("resuming at"), "{language}: {stderr}");
        assert_eq!(resumed, first, "{language}");
        for bad in [
            &b"not json"[..],
            br#"{"limit": -1}"#,
            br#"{"limit": 2199023255553}"#,
        ] {
            let (code, _, stderr) = exec(&module, bad, &[]);
            assert_eq!(code, 1, "{language}: {stderr}");
            assert!(stderr.contains("bad_input"), "{language}: {stderr}");
        }
    }
}

#[test]
fn uncaught_exceptions_and_throws_are_job_errors_not_traps() {
    let _machine = shared();
    let python = built("tests/fixtures/echo-py");
    let js = built("tests/fixtures/echo-js");
    for (module, input, message) in [
        (&python, &b"raise"[..], "ValueError: asked to raise"),
        (&js, b"throw-string", "boom"),
        (&js, b"throw-error", "TypeError: asked to throw"),
    ] {
        let (code, _, stderr) = exec(module, input, &[]);
        assert_eq!(code, 1, "a job error, not a trap: {stderr}");
        assert!(stderr.contains("uncaught_exception"), "{stderr}");
        assert!(stderr.contains(message), "{stderr}");
    }
    // The same components echo otherwise.
    for module in [&python, &js] {
        let (code, output, stderr) = exec(module, "héllo".as_bytes(), &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(output, "héllo".as_bytes());
    }
}

#[test]
fn the_python_sdk_passes_its_unit_tests_in_plain_cpython() {
    let _machine = shared();
    let sdk = Path::new(ROOT).join("guest-sdk/python");
    let out = run_bounded(
        Command::new("python3")
            .args(["-m", "unittest", "discover", "-v", "-s"])
            .arg(sdk.join("tests"))
            .env("PYTHONPATH", &sdk)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("\nOK"), "{stderr}");
}

#[test]
fn the_js_sdk_passes_its_unit_tests_in_node() {
    let _machine = shared();
    let tests = Path::new(ROOT).join("guest-sdk/js/test/sdk.test.js");
    let out = run_bounded(Command::new("node").arg("--test").arg(&tests), b"");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("# fail 0"), "{stdout}");
}

#[test]
fn the_js_sdk_types_are_what_jco_generates_from_the_wit() {
    let _machine = shared();
    let sdk = Path::new(ROOT).join("guest-sdk/js");
    let generated = tempfile::tempdir().unwrap();
    // The jco pinned in guest-sdk/js/types-tool, installed where
    // .ci/install-toolchains puts it (here if it has not). Later jcos fail to
    // read WIT paths; this one needs the WIT named relative to its working
    // directory.
    let jco = Path::new(SCRATCH).join("jco");
    let bin = jco.join("node_modules/.bin/jco");
    if !bin.exists() {
        std::fs::create_dir_all(&jco).unwrap();
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(sdk.join("types-tool").join(file), jco.join(file)).unwrap();
        }
        let out = run_bounded(
            Command::new("npm").current_dir(&jco).args([
                "install",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ]),
            b"",
        );
        assert!(
            out.status.success(),
            "installing jco from npm: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    job_wit(generated.path());
    let out = run_bounded(
        Command::new(&bin).current_dir(generated.path()).args([
            "guest-types",
            "wit",
            "-n",
            "job",
            "-q",
            "-o",
            "types",
        ]),
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = |dir: &Path| -> Vec<String> {
        let mut files: Vec<String> = ["", "interfaces"]
            .iter()
            .flat_map(|sub| {
                (std::fs::read_dir(dir.join(sub)).unwrap().flatten())
                    .filter(|entry| entry.path().is_file())
                    .map(|entry| format!("{sub}/{}", entry.file_name().to_string_lossy()))
                    .map(|path| path.trim_start_matches('/').to_string())
                    .collect::<Vec<_>>()
            })
            .collect();
        files.sort();
        files
    };
    let files = listed(&sdk.join("types"));
    assert_eq!(
        files,
        listed(&generated.path().join("types")),
        "guest-sdk/js/types holds other files than jco generates from wit/job.wit: regenerate it (guest-sdk/js/README.md)"
    );
    for file in files {
        let committed = std::fs::read_to_string(sdk.join("types").join(&file)).unwrap();
        let fresh = std::fs::read_to_string(generated.path().join("types").join(&file)).unwrap();
        assert!(
            committed == fresh,
            "guest-sdk/js/types/{file} is not what jco generates from wit/job.wit: regenerate it (guest-sdk/js/README.md)"
        );
    }
}

#[test]
fn a_component_importing_wasi_http_loads_and_its_requests_are_refused() {
    let _machine = shared();
    // Built by componentize-js with all its HTTP support left in, as stock
    // tools do: it imports wasi:http and also exports the fetch event's
    // wasi:http/incoming-handler (which `cohort build` never adds).
    built("tests/fixtures/echo-js"); // Installs the JS toolchain.
    let tools = std::fs::read_dir(toolchains())
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("js-")
        })
        .expect("the JS toolchain is installed");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("fetcher.js"),
        r#"
        export async function run(input) {
          let outcome;
          try {
            await fetch("http://127.0.0.1:9/");
            outcome = "fetched";
          } catch (error) {
            outcome = `refused: ${error}`;
          }
          return new TextEncoder().encode(outcome);
        }
        "#,
    )
    .unwrap();
    let component = dir.path().join("fetcher.wasm");
    let out = run_bounded(
        Command::new(tools.join("node_modules/.bin/componentize-js"))
            .current_dir(dir.path())
            .args(["fetcher.js", "-n", "job", "--wit"])
            .arg(job_wit(dir.path()))
            .arg("-o")
            .arg(&component),
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, output, stderr) = exec(&component, b"", &[]);
    assert_eq!(code, 0, "it loads and runs: {stderr}");
    let output = String::from_utf8_lossy(&output);
    assert!(output.starts_with("refused: "), "{output}");
}

#[test]
fn a_memory_limit_below_the_language_runtime_is_memory_limit() {
    let _machine = shared();
    // CPython's initial memory is over 1 MiB: refused as the job's limit
    // being hit, not as an internal error.
    let python = built("tests/fixtures/echo-py");
    let (code, _, stderr) = exec(&python, b"tiny", &["--memory", "1MiB"]);
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("memory_limit"), "{stderr}");
}

#[test]
fn python_and_typescript_jobs_resume_on_another_node_after_a_kill() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let python = std::fs::read(built("examples/primes-py")).unwrap();
    let typescript = std::fs::read(built("examples/primes-ts")).unwrap();
    let n1 = start(&dir, "n1", "back-end,front-end", None);
    let n2 = start(&dir, "n2", "worker", Some(&n1));
    let n3 = start(&dir, "n3", "worker", Some(&n1));
    runtime().block_on(async {
        converge(&n1, "both workers", |c| c.workers.len() == 2).await;
        let client = Api::new(&n1.url);
        let mut ids = Vec::new();
        for (language, wasm, limit) in [
            ("Python", &python, PRIMES_PY_LONG),
            ("TypeScript", &typescript, PRIMES_TS_LONG),
        ] {
            let digest = client.upload(wasm.clone()).await.unwrap();
            // Two of each keep both workers busy with both languages.
            for _ in 0..2 {
                let request = SubmitRequest {
                    // Runs of seconds on a loaded 2-CPU machine; this test
                    // is about resuming, not about timeouts.
                    timeout_ms: Some(JOB_TIMEOUT_MS),
                    // Room for attempts lost to the load itself (three
                    // nodes compiling Python and JS components and running
                    // them on two CPUs: a worker's heartbeats can lag past
                    // the failure detector), beyond the one the kill costs.
                    max_attempts: Some(JOB_ATTEMPTS),
                    ..support::job(&digest, &format!(r#"{{"limit": {limit}}}"#))
                };
                ids.push((language, limit, client.submit(&request).await.unwrap().id));
            }
        }
        // Kill a worker once one of its attempts (of either language) has
        // saved a checkpoint; the first job on each worker compiles the
        // component there, hence the longer wait.
        let all: Vec<u64> = ids.iter().map(|(_, _, id)| *id).collect();
        let workers = ["n2", "n3"];
        let job = running_with_checkpoint(&client, &all, &workers, CONVERGE * 4, |_| true).await;
        let checkpointed = job.id;
        let language = ids.iter().find(|(_, _, id)| *id == checkpointed).unwrap().0;
        let (mut victim, survivor) = if job.attempts.last().unwrap().worker == "n2" {
            ((n2, "n2"), (n3, "n3"))
        } else {
            ((n3, "n3"), (n2, "n2"))
        };
        victim.0.kill();
        for (_, limit, id) in &ids {
            let expected = format!(
                r#"{{"limit":{limit},"count":{}}}"#,
                primes::count_primes(*limit)
            );
            check_job(&client, *id, expected.as_bytes()).await;
        }
        let job = client.job(checkpointed, 0).await.unwrap();
        let last = job.attempts.last().unwrap();
        assert_eq!(last.worker, survivor.1, "{language}: {job:?}");
        assert!(
            last.log_tail.contains("resuming at"),
            "{language} job resumed from its checkpoint: {job:?}"
        );
        drop(survivor);
    });
}

#[test]
fn a_cold_worker_compiling_a_python_module_keeps_its_attempts_lease() {
    let _machine = alone();
    let dir = tempfile::tempdir().unwrap();
    let python = std::fs::read(built("examples/primes-py")).unwrap();
    // A lease of 1 s of timeout and 1 s of grace, and a worker with a
    // compile cache of its own: compiling the Python component for its
    // first attempt takes longer than the whole lease (seconds), so the
    // attempt lives only if the worker renews it while compiling.
    let n1 = support::start_with(
        &dir,
        "n1",
        "back-end,front-end",
        None,
        &["--lease-grace", "1s"],
    );
    let cold = dir.path().join("cold-cache");
    let n2 = support::start_with(
        &dir,
        "n2",
        "worker",
        Some(&n1),
        &["--cache-dir", cold.to_str().unwrap()],
    );
    runtime().block_on(async {
        converge(&n1, "the worker", |c| c.workers.len() == 1).await;
        let client = Api::new(&n1.url);
        let digest = client.upload(python).await.unwrap();
        let request = SubmitRequest {
            timeout_ms: Some(1_000),
            max_attempts: Some(1),
            ..support::job(&digest, r#"{"limit": 1000}"#)
        };
        let id = client.submit(&request).await.unwrap().id;
        let expected = format!(r#"{{"limit":1000,"count":{}}}"#, primes::count_primes(1000));
        let job = check_job(&client, id, expected.as_bytes()).await;
        assert_eq!(job.attempts.len(), 1, "{job:?}");
        // The attempt outlived the lease it was assigned with (so it was
        // renewed), while the job itself ran within its timeout.
        let attempt = &job.attempts[0];
        let held = attempt.ended_at.unwrap() - attempt.started_at;
        assert!(
            held > 2_000 && attempt.duration_ms.unwrap() < 1_000,
            "compiling took longer than the first lease (2 s) and the run under 1 s: held {held} ms, {attempt:?}"
        );
        let renewed = support::metric(&Api::new(&n2.url), "cohort_worker_leases_renewed_total").await;
        assert!(renewed >= 1, "n2 renewed the lease: {renewed}");
    });
    drop(n2);
}

/// Limits that keep `primes` busy for several seconds in each language
/// (so a kill lands mid-run), measured in BENCHMARKS.md.
const PRIMES_PY_LONG: u64 = 2_000_000_000;
const PRIMES_TS_LONG: u64 = 100_000_000;
/// The kill test's job timeout: far above the longest run seen.
const JOB_TIMEOUT_MS: u64 = 600_000;
/// The kill test's attempts per job.
const JOB_ATTEMPTS: u32 = 10;

#[test]
fn modules_for_another_job_version_or_with_foreign_imports_are_refused() {
    let _machine = shared();
    for (fixture, code, names) in [
        (
            "fixture_future_job",
            "module_job_version",
            "cohort:job/host@0.3.0",
        ),
        (
            "fixture_foreign_import",
            "module_unsupported_import",
            "acme:db/query",
        ),
    ] {
        let (status, _, stderr) = exec(&guest(fixture), b"", &[]);
        assert_eq!(status, 2, "{stderr}");
        assert!(stderr.contains(&format!("[{code}]")), "{stderr}");
        assert!(stderr.contains(names), "{stderr}");
    }
}

/// The job world with its `wasi:io` dependency, alone in `dir/wit` (the
/// repository's `wit/` also holds the master's package, which the JS
/// tools would read too); returns that directory.
fn job_wit(dir: &Path) -> PathBuf {
    let wit = dir.join("wit");
    std::fs::create_dir_all(wit.join("deps")).unwrap();
    for file in ["job.wit", "deps/io.wit"] {
        std::fs::copy(Path::new(ROOT).join("wit").join(file), wit.join(file)).unwrap();
    }
    wit
}

/// The names a component imports (its top-level import section).
fn imports(module: &Path) -> Vec<String> {
    use wasmparser::{Parser, Payload};
    let wasm = std::fs::read(module).unwrap();
    let (mut names, mut depth) = (Vec::new(), 0);
    for payload in Parser::new(0).parse_all(&wasm) {
        match payload.unwrap() {
            Payload::ComponentImportSection(section) if depth == 0 => {
                names.extend(
                    section
                        .into_iter()
                        .map(|i| i.unwrap().name.name.to_string()),
                );
            }
            // The sections of nested modules and components, up to their
            // `End`, are not the component's own.
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth -= 1,
            _ => {}
        }
    }
    names
}

fn imports_wasi_http(module: &Path) -> bool {
    imports(module)
        .iter()
        .any(|name| name.starts_with("wasi:http/outgoing-handler@0.2."))
}

#[test]
fn js_jobs_import_wasi_http_only_when_their_code_names_fetch() {
    let _machine = shared();
    // A JavaScript job that never names fetch imports what it always did;
    // one that does imports wasi:http. Python jobs always may call out.
    let echo_js = built("tests/fixtures/echo-js");
    let http_js = built("tests/fixtures/http-js");
    assert!(!imports_wasi_http(&echo_js), "{:?}", imports(&echo_js));
    assert!(
        !imports(&echo_js)
            .iter()
            .any(|name| name.starts_with("wasi:http/")),
        "{:?}",
        imports(&echo_js)
    );
    assert!(imports_wasi_http(&http_js), "{:?}", imports(&http_js));
    for python in ["tests/fixtures/echo-py", "tests/fixtures/http-py"] {
        let module = built(python);
        assert!(
            imports_wasi_http(&module),
            "{python}: {:?}",
            imports(&module)
        );
        let wasm = std::fs::read(&module).unwrap();
        assert_eq!(
            cohort::modules::describe(&wasm).1.as_deref(),
            Some("cohort:job/job@0.2.0"),
            "{python} is still a job"
        );
    }
    // Reached by a computed name, fetch rejects in a job built without
    // wasi:http (rather than trapping in the engine).
    let (code, output, stderr) = exec(&echo_js, b"call-out", &[]);
    assert_eq!(code, 0, "{stderr}");
    let output = String::from_utf8_lossy(&output);
    assert!(
        output.starts_with("TypeError: fetch: this job was built without HTTP support"),
        "{output}"
    );
    // `cohort exec` grants nothing: the Python client reports the refusal
    // as the job error `http_denied`, naming the call.
    let server = echo_server();
    let input = json!({"url": format!("http://127.0.0.1:{}/echo", server.port()), "body": {}});
    let (code, _, stderr) = exec(
        &built("tests/fixtures/http-py"),
        input.to_string().as_bytes(),
        &[],
    );
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("egress_denied"), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "http_denied: POST http://127.0.0.1:{}: the node did not allow this request",
            server.port()
        )),
        "{stderr}"
    );
    assert!(server.seen().is_empty());
    // A refused `fetch` with a body rejects, whoever wins the race between
    // the node's refusal and the engine writing the body (the node reads
    // the body of a call it refused): never a trap.
    let http_js = built("tests/fixtures/http-js");
    for _ in 0..5 {
        let (code, _, stderr) = exec(&http_js, input.to_string().as_bytes(), &[]);
        assert_eq!(code, 1, "{stderr}");
        assert!(stderr.contains("error[job_error]"), "{stderr}");
        assert!(stderr.contains("egress_denied"), "{stderr}");
    }
    assert!(server.seen().is_empty());
}

/// A job deployed by name, in Python and in JavaScript, POSTs JSON to a
/// local server its name is granted and gets the answer; a URL it is not
/// granted fails the job with an error that says so, the attempt records
/// the call as `egress_denied`, and nothing reaches that server.
#[test]
fn python_and_javascript_jobs_call_what_their_name_is_granted() {
    let _machine = shared();
    let modules = [
        ("http-js", "js", built("tests/fixtures/http-js")),
        ("http-py", "python", built("tests/fixtures/http-py")),
    ];
    let granted = echo_server();
    let other = echo_server();
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(dir.path(), &["--slots", "2"]);
    let grant = format!("http://127.0.0.1:{}/", granted.port());
    for (name, _, module) in &modules {
        cli_ok(&node, &["deploy", name, module.to_str().unwrap()]);
        let shown = cli_ok(
            &node,
            &["grant", name, "--http", &grant, "--methods", "POST"],
        );
        assert!(shown.contains(&format!("{grant} (POST)")), "{shown}");
    }
    let client = Api::new(&node.url);
    runtime().block_on(async {
        for (name, header, _) in &modules {
            let body = json!({"job": name, "text": "héllo", "n": [1, 2]});
            let url = format!("{grant}echo/{name}?q=1");
            let done = run_once(&client, name, json!({"url": url, "body": body})).await;
            assert_eq!(done.state, "succeeded", "{name}: {done:?}");
            let output: Value =
                serde_json::from_slice(&client.result(done.id).await.unwrap()).unwrap();
            assert_eq!(
                output,
                json!({
                    "status": 201,
                    "answer": "yes",
                    "body": {"method": "POST", "path": format!("/echo/{name}?q=1"), "got": body},
                }),
                "{name}"
            );
            let seen = granted.seen();
            let request = seen.last().unwrap();
            assert_eq!(
                request.header("x-cohort-test"),
                Some(*header),
                "{request:?}"
            );
            assert_eq!(
                request.header("content-type"),
                Some("application/json"),
                "{request:?}"
            );
            assert_eq!(request.host, format!("127.0.0.1:{}", granted.port()));
            let calls = &done.attempts.last().unwrap().calls;
            assert_eq!(calls.len(), 1, "{calls:?}");
            assert_eq!(
                (
                    calls[0].method.as_str(),
                    calls[0].status,
                    calls[0].error.as_deref()
                ),
                ("POST", Some(201), None),
                "{calls:?}"
            );
            assert_eq!(
                calls[0].origin,
                format!("http://127.0.0.1:{}", granted.port())
            );
        }
        assert_eq!(granted.seen().len(), modules.len());

        // Another origin: not granted, whatever the method and path.
        let origin = format!("http://127.0.0.1:{}", other.port());
        for (name, _, _) in &modules {
            let url = format!("{origin}/echo/{name}");
            let done = run_once(&client, name, json!({"url": url, "body": {"n": 1}})).await;
            assert_eq!(done.state, "failed", "{name}: {done:?}");
            let attempt = done.attempts.last().unwrap();
            assert_eq!(attempt.outcome.as_deref(), Some("job_error"), "{attempt:?}");
            let message = attempt.message.clone().unwrap_or_default();
            let expected = if *name == "http-py" {
                format!(
                    "http_denied: POST {origin}: the node did not allow this request: \
                     no HTTP grant of this job covers it (HTTP-request-denied)"
                )
            } else {
                format!(
                    "uncaught_exception: TypeError: fetch POST {origin} failed: \
                     the node did not allow the call"
                )
            };
            assert!(message.starts_with(&expected), "{name}: {message}");
            assert!(
                attempt.log_tail.contains(&format!(
                    "egress_denied: POST {origin} is not granted to this job"
                )),
                "{name}: {}",
                attempt.log_tail
            );
            let errors: Vec<_> = attempt.calls.iter().map(|c| c.error.as_deref()).collect();
            assert_eq!(
                errors,
                [Some("egress_denied")],
                "{name}: {:?}",
                attempt.calls
            );
            assert_eq!(attempt.calls[0].origin, origin);
        }
        assert!(other.seen().is_empty(), "{:?}", other.seen());
    });
}

/// The webhook example in Python and in TypeScript, as their READMEs run
/// it: deployed by name, a secret set, the name granted a local server with
/// `Authorization: Bearer {secret:HOOK_TOKEN}`. Each POSTs its event as JSON
/// with the Rust job's idempotency key (the SHA-256 of its input), the
/// server gets the secret in the header the node set, the job succeeds with
/// the status, and a refusal fails it `webhook_rejected`; the secret is in
/// none of the jobs' results, errors or logs. Then the HTTP fixtures read
/// a secret granted them by name (`--secret`), masked in their logs.
#[test]
fn python_and_typescript_webhooks_post_with_a_granted_secret_they_never_hold() {
    const SECRET: &str = "whsec_Tq7Vn2Lx9Rk4Mz8P";
    let _machine = shared();
    let modules = [
        ("webhook-py", built("examples/webhook-py")),
        ("webhook-ts", built("examples/webhook-ts")),
    ];
    let hooks = hook_server();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("cluster.key");
    std::fs::write(&key, cohort::security::key::generate()).unwrap();
    let node = Node::start(
        &dir.path().join("data"),
        &["--slots", "2", "--cluster-key", key.to_str().unwrap()],
    );
    let admin = token_at(&node.url, &key, "admin");
    let as_admin = |args: &[&str], stdin: &[u8]| {
        let mut all = args.to_vec();
        all.extend(["--token", &admin]);
        let out = node.cli(&all, stdin);
        assert!(out.status.success(), "cohort {args:?}: {out:?}");
    };
    as_admin(
        &["secret", "set", "HOOK_TOKEN"],
        format!("{SECRET}\n").as_bytes(),
    );
    let granted = format!("http://127.0.0.1:{}/hooks/", hooks.port());
    for (name, module) in &modules {
        as_admin(&["deploy", name, module.to_str().unwrap()], b"");
        as_admin(
            &[
                "grant",
                name,
                "--http",
                &granted,
                "--methods",
                "POST",
                "--header",
                "Authorization: Bearer {secret:HOOK_TOKEN}",
            ],
            b"",
        );
    }
    let client = Api::with_options(&node.url, Some(&admin), None).unwrap();
    let holds_secret = |bytes: &[u8]| bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
    runtime().block_on(async {
        for (name, _) in &modules {
            let event = json!({"type": "deploy", "job": name, "text": "héllo", "n": [1, 2]});
            let input = json!({"url": format!("{granted}{name}"), "event": event});
            let done = run_once(&client, name, input.clone()).await;
            assert_eq!(done.state, "succeeded", "{name}: {done:?}");
            let result = client.result(done.id).await.unwrap();
            assert_eq!(&result[..], br#"{"status":204}"#, "{name}");
            let seen = hooks.seen();
            let delivery = seen.last().unwrap();
            assert_eq!(
                (delivery.method.as_str(), delivery.path.as_str()),
                ("POST", format!("/hooks/{name}").as_str())
            );
            let body: Value = serde_json::from_slice(&delivery.body).unwrap();
            assert_eq!(body, event, "{name}");
            assert_eq!(
                delivery.header("authorization"),
                Some(format!("Bearer {SECRET}").as_str()),
                "{name}: {delivery:?}"
            );
            assert_eq!(
                delivery.header("content-type"),
                Some("application/json"),
                "{name}: {delivery:?}"
            );
            let key = hex(&Sha256::digest(input.to_string().as_bytes()));
            assert_eq!(delivery.header("idempotency-key"), Some(key.as_str()));
            assert!(!holds_secret(&result), "{name}");
            assert!(!format!("{done:?}").contains(SECRET), "{name}: {done:?}");

            // A webhook's refusal is the job's failure, named.
            let input = json!({"url": format!("{granted}reject"), "event": {"n": 1}});
            let done = run_once(&client, name, input).await;
            assert_eq!(done.state, "failed", "{name}: {done:?}");
            let error = done.error.as_ref().expect("an error");
            assert!(
                error
                    .message
                    .starts_with("webhook_rejected: the server answered 500: no such hook"),
                "{name}: {done:?}"
            );
            assert!(!format!("{done:?}").contains(SECRET), "{name}: {done:?}");
        }
    });
    let seen = hooks.seen();
    assert_eq!(seen.len(), 2 * modules.len(), "{seen:?}");

    // A secret a job reads itself: only once its name is granted it, and
    // its value masked in the job's log.
    let readers = [
        ("reader-py", built("tests/fixtures/http-py")),
        ("reader-js", built("tests/fixtures/http-js")),
    ];
    for (name, module) in &readers {
        as_admin(&["deploy", name, module.to_str().unwrap()], b"");
    }
    as_admin(&["grant", "reader-py", "--secret", "HOOK_TOKEN"], b"");
    as_admin(&["grant", "reader-js", "--secret", "HOOK_TOKEN"], b"");
    runtime().block_on(async {
        for (name, _) in &readers {
            let done = run_once(&client, name, json!({"secret": "HOOK_TOKEN"})).await;
            assert_eq!(done.state, "succeeded", "{name}: {done:?}");
            let result = client.result(done.id).await.unwrap();
            assert_eq!(&result[..], br#"{"secret_read":true}"#, "{name}");
            let log = &done.attempts.last().unwrap().log_tail;
            assert!(
                log.contains("secret HOOK_TOKEN is [secret:HOOK_TOKEN]"),
                "{name}: {log}"
            );
            assert!(!format!("{done:?}").contains(SECRET), "{name}: {done:?}");
            // Another name: not readable, and the log says so.
            let done = run_once(&client, name, json!({"secret": "OTHER"})).await;
            let result = client.result(done.id).await.unwrap();
            assert_eq!(&result[..], br#"{"secret_read":false}"#, "{name}");
            let log = &done.attempts.last().unwrap().log_tail;
            assert!(
                log.contains(r#"[cohort] secret "OTHER" is not one this job may read"#),
                "{name}: {log}"
            );
        }
    });
}

/// Lowercase hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A webhook on 127.0.0.1: `500 no such hook` for a path ending in
/// `/reject`, `204 No Content` for any other; it records what it read.
fn hook_server() -> Server {
    Server::start(|seen: &Seen, writer: &mut dyn Write, _: &AtomicBool| {
        if seen.path.ends_with("/reject") {
            respond(writer, "500 Internal Server Error", &[], b"no such hook\n")
        } else {
            respond(writer, "204 No Content", &[], b"")
        }
    })
}

/// Submits `input` to the deployment `name` for one attempt (a job error is
/// never retried anyway; a lost attempt should fail the test, not hide);
/// returns the settled job.
async fn run_once(client: &Api, name: &str, input: Value) -> JobResponse {
    let request = SubmitRequest {
        max_attempts: Some(1),
        // Covers compiling the component on a loaded machine too.
        timeout_ms: Some(JOB_TIMEOUT_MS),
        ..support::job(name, &input.to_string())
    };
    let id = client.submit(&request).await.unwrap().id;
    settle(client, id).await
}

fn cli_ok(node: &Node, args: &[&str]) -> String {
    let out = node.cli(args, b"");
    assert!(out.status.success(), "cohort {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A server on 127.0.0.1 that answers every request `201` with an
/// `x-answer: yes` header and, as JSON, its method, path and body (parsed
/// as JSON when it is), and records what it read.
fn echo_server() -> Server {
    Server::start(|seen: &Seen, writer: &mut dyn Write, _: &AtomicBool| {
        let got = serde_json::from_slice::<Value>(&seen.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&seen.body).into_owned()));
        let answer = json!({"method": seen.method, "path": seen.path, "got": got}).to_string();
        let headers = [("content-type", "application/json"), ("x-answer", "yes")];
        respond(writer, "201 Created", &headers, answer.as_bytes())
    })
}
