//! The npm dependencies of a JavaScript or TypeScript job: what
//! `package.json` declares, installed from its `package-lock.json` where
//! only the build sees them, and the Node.js built-ins a job cannot have.
//!
//! # Design
//!
//! * **The lock decides, as `npm ci` would.** A project with dependencies
//!   builds from its `package-lock.json`: the lock's own record of the
//!   project's dependencies must be `package.json`'s ([`lock_matches`]).
//!   Without `--locked`, a missing or outdated lock is made anew with
//!   `npm install --package-lock-only` (resolving, installing nothing) and
//!   written into the project; with `--locked`, either is an error.
//! * **Installed once per lock, outside the project.** The lock's packages
//!   are installed (`npm install --ignore-scripts` beside a copy of the
//!   lock: the locked versions, no install scripts) into a directory of
//!   the toolchains named after the manifest and the lock, in a scratch
//!   directory renamed into place. `npm ci` itself is not used: it refuses
//!   a lock made on another platform over the optional packages of native
//!   binaries (esbuild's, for one) that it lists without a version, which a
//!   Wasm job never loads anyway; they are left out (`--omit=optional`).
//!   esbuild finds the packages through `NODE_PATH`; a `node_modules` in
//!   the project still comes first, as it always does for esbuild.
//! * **Node.js built-ins are build errors.** A job runs in StarlingMonkey
//!   on WASI, which has no `fs`, `net` or `child_process`. esbuild, bundling
//!   for a neutral platform, cannot resolve them; [`node_builtin`] turns
//!   its message into one that names the built-in and the package (or the
//!   job's own file) that imports it.

use super::{install_once, npm, scratch_in, short_hash};
use anyhow::{Context, bail};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// npm's lock file, in the project directory.
pub const LOCK_FILE: &str = "package-lock.json";

/// The fields of `package.json` that declare what npm installs.
const DECLARING: &[&str] = &["dependencies", "devDependencies", "optionalDependencies"];

/// Installs the dependencies `package.json` (`manifest`) declares, from
/// the project's lock (made anew unless `locked`); answers the
/// `node_modules` to resolve them from, or `None` when it declares none.
pub fn install(
    project: &Path,
    toolchains: &Path,
    manifest: &Value,
    locked: bool,
) -> anyhow::Result<Option<PathBuf>> {
    if !declares_any(manifest)? {
        return Ok(None);
    }
    let lock_path = project.join(LOCK_FILE);
    let lock = match fs::read_to_string(&lock_path) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", lock_path.display())),
    };
    let matching = lock
        .as_deref()
        .is_some_and(|lock| lock_matches(manifest, lock));
    let lock = match lock {
        Some(lock) if matching => lock,
        Some(_) if locked => bail!(
            "--locked: {} does not match the dependencies package.json declares; run \
             `npm install` (or `cohort build` without --locked) to update it",
            lock_path.display()
        ),
        None if locked => bail!(
            "--locked: {} is missing; run `npm install --package-lock-only` (or `cohort build` \
             without --locked) to make it",
            lock_path.display()
        ),
        _ => relock(project, toolchains, &lock_path)?,
    };
    let manifest_text = serde_json::to_string(manifest)?;
    let dir = toolchains.join(format!("jsdeps-{}", short_hash(&[&manifest_text, &lock])));
    install_once(toolchains, &dir, "the job's npm dependencies", |scratch| {
        fs::write(scratch.join("package.json"), &manifest_text)?;
        fs::write(scratch.join(LOCK_FILE), &lock)?;
        npm_run(
            Command::new(npm())
                .current_dir(scratch)
                .args(["install", "--ignore-scripts", "--omit=optional"])
                .args(NPM_QUIET),
        )
        .with_context(|| format!("installing what {} pins failed", lock_path.display()))
    })?;
    Ok(Some(dir.join("node_modules")))
}

/// Whether `manifest` declares any dependency. Every declaring field it
/// has must be an object of package names to version strings, empty or
/// not: a field npm would refuse is an error here, not a field skipped.
fn declares_any(manifest: &Value) -> anyhow::Result<bool> {
    let mut any = false;
    for field in DECLARING {
        let Some(deps) = manifest.get(*field) else {
            continue;
        };
        match deps.as_object() {
            Some(deps) if deps.values().all(Value::is_string) => any |= !deps.is_empty(),
            _ => bail!("package.json: \"{field}\" is not an object of package names and versions"),
        }
    }
    Ok(any)
}

/// npm without its advice: no audit, no funding notes, errors only.
const NPM_QUIET: &[&str] = &["--no-audit", "--no-fund", "--loglevel=error"];

/// Whether `lock` records the dependencies `manifest` declares (what
/// `npm ci` checks before it installs anything).
fn lock_matches(manifest: &Value, lock: &str) -> bool {
    let Ok(lock) = serde_json::from_str::<Value>(lock) else {
        return false;
    };
    let root = &lock["packages"][""];
    let empty = Value::Object(Default::default());
    DECLARING.iter().all(|field| {
        let declared = manifest.get(*field).unwrap_or(&empty);
        let locked = root.get(*field).unwrap_or(&empty);
        declared == locked
    })
}

/// Makes the project's lock anew (`npm install --package-lock-only` in a
/// scratch copy of `package.json` and the old lock, so nothing is
/// installed and the project gets only the new lock); answers it.
fn relock(project: &Path, toolchains: &Path, lock_path: &Path) -> anyhow::Result<String> {
    eprintln!("cohort build: resolving the npm dependencies (npm install --package-lock-only)");
    let scratch = scratch_in(toolchains, ".locking-", "npm")?;
    fs::copy(
        project.join("package.json"),
        scratch.path().join("package.json"),
    )?;
    if lock_path.is_file() {
        fs::copy(lock_path, scratch.path().join(LOCK_FILE))?;
    }
    npm_run(
        Command::new(npm())
            .current_dir(scratch.path())
            .args(["install", "--package-lock-only", "--ignore-scripts"])
            .args(NPM_QUIET),
    )?;
    let lock = fs::read_to_string(scratch.path().join(LOCK_FILE)).context("npm wrote no lock")?;
    let writing = lock_path.with_extension("json.writing");
    fs::write(&writing, &lock)
        .and_then(|()| fs::rename(&writing, lock_path))
        .with_context(|| format!("cannot write {}", lock_path.display()))?;
    eprintln!("cohort build: wrote {}", lock_path.display());
    Ok(lock)
}

/// Runs npm; a failure carries what it said, and names a package the
/// registry does not have.
fn npm_run(command: &mut Command) -> anyhow::Result<()> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .context("cannot run npm (needs Node.js >= 18 with npm)")?;
    if out.status.success() {
        return Ok(());
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = said.lines().filter(|l| !l.trim().is_empty()).collect();
    let said = lines[lines.len().saturating_sub(NPM_LINES)..].join("\n");
    // `npm error 404  The requested resource 'name@^1' could not be found
    // ...` (npm 11; `'name@^1' is not in this registry.` before).
    if let Some(missing) = lines.iter().find_map(|line| {
        let rest = line.split("404").nth(1)?;
        let quoted = rest.split('\'').nth(1)?;
        let not_found =
            rest.contains("could not be found") || rest.contains("is not in this registry");
        not_found.then(|| quoted.to_string())
    }) {
        bail!("the dependency `{missing}` is not on the npm registry: {said}");
    }
    if said.contains("ETARGET") {
        bail!("a dependency has no version that matches what package.json asks: {said}");
    }
    if ["ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN"]
        .iter()
        .any(|sign| said.contains(sign))
    {
        bail!("the npm registry cannot be reached (npm's `registry` setting says which): {said}");
    }
    bail!("npm failed ({}):\n{said}", out.status)
}

/// The most lines of npm's own words an error repeats.
const NPM_LINES: usize = 20;

/// esbuild's complaint (`said`) about a Node.js built-in it could not
/// resolve, as an error naming the built-in and who imports it: a
/// package under `node_modules`, or the job's own file.
pub fn node_builtin(said: &str) -> Option<anyhow::Error> {
    let lines: Vec<&str> = said.lines().collect();
    let at = (lines.iter()).position(|line| line.contains("Could not resolve \""))?;
    let builtin = lines[at].split('"').nth(1)?;
    let rest = &lines[at..lines.len().min(at + 12)];
    let built_in =
        builtin.starts_with("node:") || rest.iter().any(|line| line.contains("is built into node"));
    if !built_in {
        return None;
    }
    // The first non-empty line after the message: `file:line:column:`.
    let location = (rest.iter().skip(1))
        .map(|line| line.trim())
        .find(|line| !line.is_empty())
        .map(|line| line.trim_end_matches(':'))
        .unwrap_or("?");
    let importer = match location.rsplit_once("node_modules/") {
        Some((_, inner)) => {
            let mut parts = inner.split('/');
            let first = parts.next().unwrap_or("?");
            let package = match first.starts_with('@') {
                true => format!("{first}/{}", parts.next().unwrap_or("?")),
                false => first.to_string(),
            };
            format!("the package `{package}` ({location})")
        }
        None => format!("the job's own code ({location})"),
    };
    Some(anyhow::anyhow!(
        "`{builtin}` is a Node.js built-in, which a job cannot import (a job runs in a WASI \
         sandbox, not in Node.js): imported by {importer}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_lock_matches_when_it_records_what_package_json_declares() {
        let manifest = json!({"name": "j", "dependencies": {"zod": "^3.23.8"}});
        let lock = json!({"packages": {"": {"name": "j", "dependencies": {"zod": "^3.23.8"}}}});
        assert!(lock_matches(&manifest, &lock.to_string()));
        let other = json!({"packages": {"": {"dependencies": {"zod": "^3.0.0"}}}});
        assert!(!lock_matches(&manifest, &other.to_string()));
        let more =
            json!({"name": "j", "dependencies": {"zod": "^3.23.8"}, "devDependencies": {"x": "1"}});
        assert!(!lock_matches(&more, &lock.to_string()));
        assert!(!lock_matches(&manifest, "not json"));
    }

    #[test]
    fn every_declaring_field_is_checked_before_any_is_used() {
        assert!(!declares_any(&json!({"name": "j"})).unwrap());
        assert!(!declares_any(&json!({"dependencies": {}, "devDependencies": {}})).unwrap());
        assert!(declares_any(&json!({"devDependencies": {"zod": "^3"}})).unwrap());
        for bad in [
            json!({"dependencies": ["zod"]}),
            json!({"dependencies": "zod"}),
            json!({"dependencies": {"zod": "^3"}, "optionalDependencies": {"x": 1}}),
            json!({"devDependencies": null}),
        ] {
            let error = declares_any(&bad).unwrap_err().to_string();
            assert!(
                error.contains("is not an object of package names and versions"),
                "{error}"
            );
        }
    }

    #[test]
    fn a_node_builtin_is_named_with_its_importer() {
        let said = "\u{2718} [ERROR] Could not resolve \"fs\"\n\n    node_modules/@acme/files/lib/read.js:1:15:\n      1 \u{2502} import fs from \"fs\";\n\n  The package \"fs\" wasn't found on the file system but is built into node.\n";
        let error = node_builtin(said).unwrap().to_string();
        assert!(error.starts_with("`fs` is a Node.js built-in"), "{error}");
        assert!(
            error.contains("the package `@acme/files` (node_modules/@acme/files/lib/read.js:1:15)"),
            "{error}"
        );
        let own = "\u{2718} [ERROR] Could not resolve \"node:net\"\n\n    src/index.ts:3:20:\n";
        let error = node_builtin(own).unwrap().to_string();
        assert!(
            error.contains("`node:net`")
                && error.contains("the job's own code (src/index.ts:3:20)"),
            "{error}"
        );
        let missing = "\u{2718} [ERROR] Could not resolve \"left-pad\"\n\n    index.js:1:7:\n";
        assert!(node_builtin(missing).is_none());
    }
}
