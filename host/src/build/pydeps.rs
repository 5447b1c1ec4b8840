//! The Python dependencies of a job: what `[project] dependencies` (and
//! the optional groups asked for) declare, resolved for the component's
//! interpreter, pinned in `cohort.lock` and installed where only the
//! build sees them.
//!
//! # Design
//!
//! * **For the interpreter that runs the job, not the builder's.** A job
//!   runs in componentize-py's CPython 3.14 on WASI, so pip resolves for
//!   that ([`TARGET`]): pure-Python wheels (`py3-none-any`) or WASI wheels,
//!   never a source distribution (nothing here compiles C for WASI) and
//!   never a wheel built for the builder's OS. A package with only such
//!   wheels fails the build with its name and why ([`why_not`]).
//! * **A lock, pinned by hash.** The first build resolves and writes
//!   `cohort.lock` in the project: a pip requirements file of exact
//!   versions with their sha256, under a header naming the hash of the
//!   requirements it was resolved from. A later build installs from the
//!   lock (`--require-hashes --no-deps`) while the header matches the
//!   manifest, and resolves anew (rewriting the lock) when it does not;
//!   `cohort build --locked` refuses to resolve: a lock that is missing
//!   or does not match is an error.
//! * **Installed once per lock, never into the user's environment.** What
//!   a lock pins is installed by pip `--target` into a directory named
//!   after the lock's hash under the toolchains directory (in a scratch
//!   directory renamed into place, under the install lock, so a failed
//!   install leaves nothing a later build would use). A second build with
//!   the same lock installs nothing.
//! * **Nothing from the builder's site-packages.** componentize-py bundles
//!   the `site-packages` of the environment it runs in; the build runs it
//!   with `VIRTUAL_ENV` set to the lock's directory (an empty one for a
//!   job without dependencies), so what the job imports is its own code,
//!   the SDK and what its lock pins: the same project builds the same on
//!   every machine.

use super::{install_once, python, scratch_in, short_hash};
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The lock file, in the project directory.
pub const LOCK_FILE: &str = "cohort.lock";

/// The first line of a lock: what it is.
const LOCK_TITLE: &str =
    "# cohort.lock: the Python dependencies of this job, pinned by `cohort build`";

/// The header line naming the hash of the requirements a lock was
/// resolved from ([`Wanted::hash`]).
const LOCK_MANIFEST: &str = "# manifest-sha256: ";

/// What pip resolves and installs for: the CPython 3.14 componentize-py
/// bundles, on WASI; only wheels, pure-Python or WASI ones.
const TARGET: &[&str] = &[
    "--only-binary",
    ":all:",
    "--implementation",
    "cp",
    "--python-version",
    "3.14",
    "--abi",
    "cp314",
    "--abi",
    "abi3",
    "--abi",
    "none",
    "--platform",
    "any",
    "--platform",
    "wasi_0_0_0_wasm32",
];

/// The `site-packages` of a dependencies directory, where a venv has it
/// (componentize-py looks for it under `VIRTUAL_ENV`).
const SITE_PACKAGES: &str = "lib/python3.14/site-packages";

/// pip's network patience: one retry, 30 s a connection, so an index that
/// cannot be reached fails the build in about a minute, not five.
const PIP_NETWORK: &[&str] = &["--retries", "1", "--timeout", "30"];

/// The `[project]` fields about dependencies.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Declared {
    /// `[project] dependencies`.
    #[serde(default)]
    pub dependencies: Vec<String>,
    /// `[project.optional-dependencies]`.
    #[serde(default, rename = "optional-dependencies")]
    pub optional: BTreeMap<String, Vec<String>>,
}

/// The requirements a build installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The requirements, as declared, in their order.
    pub requirements: Vec<String>,
    /// The hash a lock resolved from them names (of the requirements,
    /// sorted, and of [`TARGET`]).
    pub hash: String,
}

/// The requirements of `declared` with the optional groups `extras`.
pub fn wanted(declared: &Declared, extras: &[String]) -> anyhow::Result<Wanted> {
    let mut requirements = declared.dependencies.clone();
    for extra in extras {
        let Some(group) = declared.optional.get(extra) else {
            let known: Vec<&str> = declared.optional.keys().map(String::as_str).collect();
            bail!(
                "pyproject.toml has no optional dependency group `{extra}` \
                 ([project.optional-dependencies] has {})",
                match known.as_slice() {
                    [] => "none".to_string(),
                    known => known.join(", "),
                }
            );
        };
        requirements.extend(group.iter().cloned());
    }
    for requirement in &requirements {
        check_requirement(requirement)?;
    }
    let mut sorted: Vec<&str> = requirements.iter().map(|r| r.trim()).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = sorted;
    parts.push("\0target");
    parts.extend_from_slice(TARGET);
    Ok(Wanted {
        hash: short_hash(&parts),
        requirements,
    })
}

/// Refuses what is not a requirement from the package index: an empty
/// one, a line break or pip option (which a requirements file would
/// obey), a direct reference (`name @ URL`, a path or a VCS checkout,
/// which no lock pins by version).
fn check_requirement(requirement: &str) -> anyhow::Result<()> {
    let text = requirement.trim();
    if text.is_empty() {
        bail!("pyproject.toml: an empty dependency");
    }
    if text.contains(['\n', '\r']) || text.starts_with('-') || text.contains(" -") {
        bail!(
            "pyproject.toml: the dependency {requirement:?} is not a requirement (pip options are not accepted)"
        );
    }
    if text.contains('@') || text.contains("://") {
        bail!(
            "pyproject.toml: the dependency {requirement:?} is a direct reference; \
             declare a name and version from the package index"
        );
    }
    Ok(())
}

/// Installs what `wanted` needs (from the project's lock, or resolved
/// and locked anew unless `locked`), and answers the directory the build
/// gives componentize-py as `VIRTUAL_ENV`.
pub fn install(
    project: &Path,
    toolchains: &Path,
    wanted: &Wanted,
    locked: bool,
) -> anyhow::Result<PathBuf> {
    let lock_path = project.join(LOCK_FILE);
    let lock = match fs::read_to_string(&lock_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", lock_path.display())),
    };
    let pins = match lock.as_deref().map(|text| (manifest_hash(text), text)) {
        Some((Some(hash), text)) if hash == wanted.hash => text.to_string(),
        _ if wanted.requirements.is_empty() && lock.is_none() => String::new(),
        Some(_) if locked => bail!(
            "--locked: {} does not match the dependencies pyproject.toml declares; \
             run `cohort build` without --locked to resolve them anew",
            lock_path.display()
        ),
        None if locked => bail!(
            "--locked: {} is missing; run `cohort build` without --locked once to resolve \
             the dependencies and write it",
            lock_path.display()
        ),
        _ => {
            let pins = resolve(toolchains, wanted)?;
            // The lock as written, so that this build and the next, which
            // reads it, install into the same directory.
            let lock = write_lock(&lock_path, &pins)
                .with_context(|| format!("cannot write {}", lock_path.display()))?;
            eprintln!("cohort build: wrote {}", lock_path.display());
            lock
        }
    };
    let dir = toolchains.join(format!(
        "pydeps-{}",
        short_hash(&[&pins, "\0", &TARGET.join(" ")])
    ));
    install_once(
        toolchains,
        &dir,
        "the job's Python dependencies",
        |scratch| {
            let site = scratch.join(SITE_PACKAGES);
            fs::create_dir_all(&site)?;
            if pins.trim().is_empty() {
                return Ok(());
            }
            let requirements = scratch.join("requirements.txt");
            fs::write(&requirements, &pins)?;
            let mut pip = pip();
            pip.args(["install", "--no-deps", "--require-hashes"])
                .args(TARGET)
                .arg("--target")
                .arg(&site)
                .arg("-r")
                .arg(&requirements);
            pip_run(&mut pip).with_context(|| {
                format!(
                    "installing the dependencies {} pins failed",
                    lock_path.display()
                )
            })
        },
    )?;
    Ok(dir)
}

/// The hash a lock's header names.
fn manifest_hash(lock: &str) -> Option<&str> {
    lock.lines()
        .find_map(|line| line.strip_prefix(LOCK_MANIFEST))
        .map(str::trim)
}

/// Writes a lock: its header, then `pins` (whose first line, when it has
/// one, is the manifest line); answers its text.
fn write_lock(path: &Path, pins: &str) -> std::io::Result<String> {
    let text = format!(
        "{LOCK_TITLE}\n# from [project] dependencies; `cohort build` rewrites it when they change\n{pins}"
    );
    let scratch = path.with_extension("lock.writing");
    fs::write(&scratch, &text)?;
    fs::rename(&scratch, path)?;
    Ok(text)
}

/// Resolves `wanted` with pip (`--dry-run --report`) and answers the pins
/// of a lock: the manifest line, then one `name==version --hash=...` per
/// package, by name.
fn resolve(toolchains: &Path, wanted: &Wanted) -> anyhow::Result<String> {
    let manifest = format!("{LOCK_MANIFEST}{}\n", wanted.hash);
    if wanted.requirements.is_empty() {
        return Ok(manifest);
    }
    eprintln!(
        "cohort build: resolving the Python dependencies ({})",
        wanted.requirements.join(", ")
    );
    let scratch = scratch_in(toolchains, ".resolving-", "pip")?;
    let requirements = scratch.path().join("requirements.txt");
    fs::write(&requirements, wanted.requirements.join("\n") + "\n")?;
    let report = scratch.path().join("report.json");
    let mut pip = pip();
    // pip takes the target's platform only with `--target`, even when it
    // installs nothing.
    pip.args(["install", "--dry-run", "--ignore-installed", "--report"])
        .arg(&report)
        .args(TARGET)
        .arg("--target")
        .arg(scratch.path().join("site"))
        .arg("-r")
        .arg(&requirements);
    if let Err(error) = pip_run(&mut pip) {
        return Err(why_not(&error.to_string(), wanted, scratch.path()).unwrap_or(error));
    }
    let report = fs::read_to_string(&report).context("pip wrote no report")?;
    let pins = pins_of(&report).context("pip's report is not what this build reads")?;
    Ok(manifest + &pins)
}

/// The pins of pip's installation report: `name==version` with the hash
/// of the file chosen, sorted by name.
fn pins_of(report: &str) -> anyhow::Result<String> {
    let report: serde_json::Value = serde_json::from_str(report)?;
    let install = report["install"].as_array().context("no `install` list")?;
    let mut pins = Vec::with_capacity(install.len());
    for item in install {
        let name = item["metadata"]["name"]
            .as_str()
            .context("a package without a name")?;
        let version = (item["metadata"]["version"].as_str())
            .with_context(|| format!("{name} without a version"))?;
        let archive = &item["download_info"]["archive_info"];
        let sha256 = (archive["hashes"]["sha256"].as_str())
            .or_else(|| archive["hash"].as_str()?.strip_prefix("sha256="))
            .with_context(|| format!("{name} {version}: the index gave no sha256 of it"))?;
        let name = normalize(name);
        pins.push(format!(
            "{name}=={version} \\\n    --hash=sha256:{sha256}\n"
        ));
    }
    pins.sort();
    Ok(pins.concat())
}

/// A package name as PEP 503 normalizes it.
fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '-' | '_' | '.' if out.ends_with('-') => {}
            '-' | '_' | '.' => out.push('-'),
            c => out.push(c.to_ascii_lowercase()),
        }
    }
    out
}

/// pip, as the builder's Python runs it, never asking (its output is
/// read, not shown: [`pip_run`]).
fn pip() -> Command {
    let mut command = Command::new(python());
    command
        .args(["-m", "pip", "--disable-pip-version-check", "--no-input"])
        .args(PIP_NETWORK)
        .env("PIP_ROOT_USER_ACTION", "ignore")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null());
    command
}

/// Runs pip; a failure carries what pip said.
fn pip_run(command: &mut Command) -> anyhow::Result<()> {
    let out = command
        .output()
        .context("cannot run pip (needs python3 with pip)")?;
    if out.status.success() {
        return Ok(());
    }
    let lines = |bytes: &[u8]| -> Vec<String> {
        (String::from_utf8_lossy(bytes).lines())
            .filter(|line| !line.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    // Its last lines say why (the first may be a long list of retries);
    // what a conflict is caused by goes to stdout.
    let said = lines(&out.stderr);
    let mut why: Vec<String> = said[said.len().saturating_sub(PIP_LINES)..].to_vec();
    let stdout = lines(&out.stdout);
    if let Some(at) = (stdout.iter()).position(|line| line.contains("The conflict is caused by")) {
        why.extend(stdout[at..].iter().take(PIP_LINES).cloned());
    }
    bail!("pip failed ({}):\n{}", out.status, why.join("\n"))
}

/// The most lines of pip's own words a build error repeats.
const PIP_LINES: usize = 20;

/// A clearer account of why pip could not resolve `wanted`, when its
/// words (`said`) tell: the index cannot be reached, a package has no
/// wheel a job can use (naming it, and whether it has one for the
/// builder's platform: a C extension), or the requirements conflict.
fn why_not(said: &str, wanted: &Wanted, scratch: &Path) -> Option<anyhow::Error> {
    let unreachable = [
        "NewConnectionError",
        "Failed to establish a new connection",
        "ConnectTimeoutError",
        "Temporary failure in name resolution",
        "Network is unreachable",
    ];
    if unreachable.iter().any(|sign| said.contains(sign)) {
        return Some(anyhow::anyhow!(
            "the package index cannot be reached to resolve the dependencies \
             (PIP_INDEX_URL and pip's configuration say which index): {said}"
        ));
    }
    if let Some(missing) = said.lines().find_map(|line| {
        let rest = line.split("No matching distribution found for ").nth(1)?;
        Some(rest.trim().to_string())
    }) {
        return Some(unusable(&missing, scratch).unwrap_or_else(|| {
            anyhow::anyhow!("the dependency `{missing}` cannot be installed: {said}")
        }));
    }
    if !said.contains("ResolutionImpossible") {
        return None;
    }
    // pip names what each candidate depends on; a dependency that has no
    // wheel a job can use makes every candidate fail, which pip calls a
    // conflict. Ask about each (the first few) before calling it one.
    let mut named: Vec<&str> = (said.lines())
        .filter_map(|line| line.split(" depends on ").nth(1))
        .filter_map(|requirement| {
            requirement
                .split([' ', ';', '<', '>', '=', '!', '~', '['])
                .next()
        })
        .filter(|name| !name.is_empty())
        .collect();
    named.sort_unstable();
    named.dedup();
    for name in named.into_iter().take(PROBES_MAX) {
        if let Some(error) = unusable(name, scratch) {
            return Some(error);
        }
    }
    Some(anyhow::anyhow!(
        "the dependencies conflict: no set of versions satisfies every requirement \
         ({}): {said}",
        wanted.requirements.join(", ")
    ))
}

/// How many dependencies named in a conflict [`why_not`] asks pip about.
const PROBES_MAX: usize = 5;

/// Why `requirement` cannot be installed for a job, if it cannot: it has
/// only wheels for the builder's kind of machine (a C extension), or none
/// at all on the index. `None` when it has a wheel a job can use.
fn unusable(requirement: &str, scratch: &Path) -> Option<anyhow::Error> {
    let probe = |target: bool| {
        let mut pip = pip();
        pip.args(["install", "--dry-run", "--ignore-installed", "--no-deps"])
            .args(["--only-binary", ":all:"]);
        if target {
            pip.args(TARGET).arg("--target").arg(scratch.join("probe"));
        }
        pip.arg(requirement)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if probe(true) {
        return None;
    }
    Some(if probe(false) {
        anyhow::anyhow!(
            "the dependency `{requirement}` has only platform wheels (a C extension, or a \
             wheel built for an operating system) and neither a pure-Python nor a WASI wheel: \
             a job runs in CPython on WASI and cannot load it"
        )
    } else {
        anyhow::anyhow!(
            "the dependency `{requirement}` is not on the package index as a wheel: no such \
             package or version, or only a source distribution (which `cohort build` does \
             not compile)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(dependencies: &[&str], optional: &[(&str, &[&str])]) -> Declared {
        Declared {
            dependencies: dependencies.iter().map(|d| d.to_string()).collect(),
            optional: (optional.iter())
                .map(|(name, group)| {
                    (
                        name.to_string(),
                        group.iter().map(|d| d.to_string()).collect(),
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn the_requirements_hash_ignores_order_and_counts_the_groups_asked_for() {
        let one = wanted(&declared(&["jinja2>=3", "python-dateutil"], &[]), &[]).unwrap();
        let other = wanted(&declared(&["python-dateutil", "jinja2>=3"], &[]), &[]).unwrap();
        assert_eq!(one.hash, other.hash);
        let groups = declared(&["jinja2>=3"], &[("dates", &["python-dateutil"])]);
        let with = wanted(&groups, &["dates".into()]).unwrap();
        assert_eq!(with.hash, one.hash);
        assert_eq!(with.requirements, ["jinja2>=3", "python-dateutil"]);
        let without = wanted(&groups, &[]).unwrap();
        assert_ne!(without.hash, one.hash);
        let error = wanted(&groups, &["plots".into()]).unwrap_err().to_string();
        assert!(
            error.contains("`plots`") && error.contains("dates"),
            "{error}"
        );
    }

    #[test]
    fn what_is_not_an_index_requirement_is_refused() {
        for bad in [
            "",
            "  ",
            "--index-url http://example.com",
            "jinja2 --hash=sha256:00",
            "jinja2\n--extra-index-url http://x",
            "pkg @ https://example.com/pkg.whl",
            "pkg @ file:///home/me/pkg",
            "git+https://example.com/pkg",
        ] {
            assert!(wanted(&declared(&[bad], &[]), &[]).is_err(), "{bad:?}");
        }
        for good in [
            "jinja2",
            "jinja2==3.1.4",
            "python-dateutil>=2.8,<3",
            "tomli; python_version < '3.11'",
        ] {
            wanted(&declared(&[good], &[]), &[]).unwrap();
        }
    }

    #[test]
    fn pins_come_from_pips_report_sorted_with_their_hashes() {
        let report = r#"{"version": "1", "install": [
            {"metadata": {"name": "MarkupSafe", "version": "3.0.2"},
             "download_info": {"url": "https://x/m.whl",
                "archive_info": {"hash": "sha256=bb", "hashes": {"sha256": "bb"}}}},
            {"metadata": {"name": "Jinja2", "version": "3.1.4"},
             "download_info": {"url": "https://x/j.whl", "archive_info": {"hash": "sha256=aa"}}}
        ]}"#;
        assert_eq!(
            pins_of(report).unwrap(),
            "jinja2==3.1.4 \\\n    --hash=sha256:aa\nmarkupsafe==3.0.2 \\\n    --hash=sha256:bb\n"
        );
        let unhashed = r#"{"install": [{"metadata": {"name": "a", "version": "1"},
            "download_info": {"url": "https://x/a.whl", "archive_info": {}}}]}"#;
        assert!(pins_of(unhashed).is_err());
        assert!(pins_of("not json").is_err());
    }

    #[test]
    fn names_normalize_as_pep_503_says() {
        assert_eq!(normalize("Jinja2"), "jinja2");
        assert_eq!(normalize("python_dateutil"), "python-dateutil");
        assert_eq!(normalize("zope.interface"), "zope-interface");
        assert_eq!(normalize("a-_.b"), "a-b");
    }

    #[test]
    fn a_lock_names_the_hash_it_was_resolved_from() {
        let lock = format!("{LOCK_TITLE}\n# other\n{LOCK_MANIFEST}abc123\njinja2==3.1.4\n");
        assert_eq!(manifest_hash(&lock), Some("abc123"));
        assert_eq!(manifest_hash("jinja2==3.1.4\n"), None);
    }
}
