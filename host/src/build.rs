//! `cohort build`, `cohort new` and `cohort toolchain`: from source to a job
//! component with one command, in Rust, Python or JavaScript/TypeScript.
//!
//! # Design
//!
//! * **Detect, don't ask.** A directory with `Cargo.toml` is a Rust job,
//!   `pyproject.toml` a Python job, `package.json` a JavaScript or
//!   TypeScript job. Two of them at once is ambiguous and `--lang` decides.
//! * **Pinned toolchains, installed on first use.** Python jobs are built by
//!   componentize-py and JavaScript jobs by componentize-js (after esbuild
//!   bundles them), at the exact versions pinned in
//!   `guest-sdk/python/toolchain/requirements.txt` (with hashes) and
//!   `guest-sdk/js/toolchain/package-lock.json`. Both files are compiled
//!   into this binary; the tools are installed from PyPI and npm into a
//!   directory named after the pins' hash under [`toolchains_dir`], so a
//!   change of pin installs afresh and two versions never mix. Installs
//!   happen in a scratch directory renamed into place, under a file lock:
//!   concurrent builds wait for one install instead of racing.
//! * **The SDK and the WIT travel in the binary.** The Python and JS guest
//!   SDKs and `wit/job.wit` are embedded too and written next to the
//!   toolchains, so `cohort build` works anywhere the binary is, with no
//!   checkout. Rust jobs depend on the `cohort-guest` crate instead.
//! * **Jobs may call out.** Python jobs are built for a world that adds
//!   `wasi:http/outgoing-handler` to the job world (the SDK's
//!   `cohort_job.http` calls it); a JavaScript job whose code names `fetch`
//!   is built with the engine's fetch over `wasi:http`, any other without
//!   it (so its imports stay what they were). A node links `wasi:http` for
//!   every job and sends only what the job's deployment name is granted.
//! * **Only the component's path on stdout.** The tools' own output goes to
//!   stderr, so `cohort submit $(cohort build .)` works.

mod cache;
mod jsdeps;
mod pydeps;

use anyhow::{Context, bail};
use sha2::Digest as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The Rust target job components are built for.
pub const RUST_TARGET: &str = "wasm32-wasip2";
/// Rust jobs are built with Wasm SIMD: every cohort node's engine runs it,
/// and loops LLVM vectorizes (a matrix product) run up to 1.5x faster in
/// a sandbox process
/// (BENCHMARKS.md, "CPU-bound kernels"). Given as the target's `rustflags`,
/// which cargo joins with a project's own `target.wasm32-wasip2.rustflags`
/// (and which, as cargo always does, takes the place of `build.rustflags`).
const RUST_SIMD_CONFIG: &str = r#"target.wasm32-wasip2.rustflags=["-Ctarget-feature=+simd128"]"#;
/// The pip requirements (with hashes) of the Python toolchain.
const PYTHON_REQUIREMENTS: &str = include_str!("../../guest-sdk/python/toolchain/requirements.txt");
/// The npm manifest and lock file of the JavaScript toolchain.
const JS_TOOLCHAIN_MANIFEST: &str = include_str!("../../guest-sdk/js/toolchain/package.json");
const JS_TOOLCHAIN_LOCK: &str = include_str!("../../guest-sdk/js/toolchain/package-lock.json");
/// The WIT directory JavaScript jobs are built against: `job.wit` and, in
/// `deps/`, the `wasi:io` its `blobs` interface uses. componentize-js
/// reads a WIT file's dependencies only when given its directory.
const JS_WIT_DIR: &str = "wit";
/// The job world every component is built against.
const JOB_WIT: &str = include_str!("../../wit/job.wit");

/// The world Python jobs are built for (`cohort:python/job`: the job world
/// plus `wasi:http/outgoing-handler`, for `cohort_job.http`), in a WIT
/// directory of its own, outside the Python path componentize-py bundles.
const PYTHON_WIT_DIR: &str = "python-wit";

/// The `--import-interface-name` options of componentize-py for the Python
/// world: both `cohort:job/types` and `wasi:http/types` are `types`, and
/// without these componentize-py would name neither so (the SDK imports
/// `wit_world.imports.types` and `wit_world.imports.http_types`).
const PYTHON_INTERFACE_NAMES: &[&str] = &[
    "cohort:job/types@0.2.0=types",
    "wasi:http/types@0.2.12=http_types",
];

/// The guest SDK files written next to the toolchains: (path, contents).
const SDK_FILES: &[(&str, &str)] = &[
    ("wit/job.wit", JOB_WIT),
    ("wit/deps/io.wit", include_str!("../../wit/deps/io.wit")),
    (
        "python-wit/job.wit",
        include_str!("../../guest-sdk/python/wit/job.wit"),
    ),
    ("python-wit/deps/job.wit", JOB_WIT),
    (
        "python-wit/deps/http.wit",
        include_str!("../../guest-sdk/python/wit/deps/http.wit"),
    ),
    (
        "python-wit/deps/io.wit",
        include_str!("../../wit/deps/io.wit"),
    ),
    (
        "python-wit/deps/clocks.wit",
        include_str!("../../guest-sdk/python/wit/deps/clocks.wit"),
    ),
    (
        "python/cohort_job/__init__.py",
        include_str!("../../guest-sdk/python/cohort_job/__init__.py"),
    ),
    (
        "python/cohort_job/http.py",
        include_str!("../../guest-sdk/python/cohort_job/http.py"),
    ),
    (
        "python/cohort_job/blobs.py",
        include_str!("../../guest-sdk/python/cohort_job/blobs.py"),
    ),
    (
        "python/cohort_job/py.typed",
        include_str!("../../guest-sdk/python/cohort_job/py.typed"),
    ),
    (
        "js/package.json",
        include_str!("../../guest-sdk/js/package.json"),
    ),
    ("js/index.js", include_str!("../../guest-sdk/js/index.js")),
    ("js/fetch.js", include_str!("../../guest-sdk/js/fetch.js")),
    (
        "js/no-fetch.js",
        include_str!("../../guest-sdk/js/no-fetch.js"),
    ),
    (
        "js/index.d.ts",
        include_str!("../../guest-sdk/js/index.d.ts"),
    ),
    (
        "js/types/job.d.ts",
        include_str!("../../guest-sdk/js/types/job.d.ts"),
    ),
    (
        "js/types/interfaces/cohort-job-host.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/cohort-job-host.d.ts"),
    ),
    (
        "js/types/interfaces/cohort-job-types.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/cohort-job-types.d.ts"),
    ),
    (
        "js/types/interfaces/cohort-job-blobs.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/cohort-job-blobs.d.ts"),
    ),
    (
        "js/types/interfaces/wasi-io-error.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/wasi-io-error.d.ts"),
    ),
    (
        "js/types/interfaces/wasi-io-poll.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/wasi-io-poll.d.ts"),
    ),
    (
        "js/types/interfaces/wasi-io-streams.d.ts",
        include_str!("../../guest-sdk/js/types/interfaces/wasi-io-streams.d.ts"),
    ),
];

/// A job's source language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust, built by cargo for `wasm32-wasip2` with the `cohort-guest` crate.
    Rust,
    /// Python, built by componentize-py with the `cohort_job` package.
    Python,
    /// JavaScript or TypeScript, bundled by esbuild and built by
    /// componentize-js with the `cohort-job` package.
    Js,
}

impl Lang {
    /// The file that marks a project of this language.
    fn marker(self) -> &'static str {
        match self {
            Lang::Rust => "Cargo.toml",
            Lang::Python => "pyproject.toml",
            Lang::Js => "package.json",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
        }
    }
}

/// Where toolchains live: `--toolchains`, else `$COHORT_TOOLCHAINS`, else
/// `$XDG_CACHE_HOME/cohort/toolchains`, else `~/.cache/cohort/toolchains`.
pub fn toolchains_dir(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = flag {
        return Ok(dir.to_path_buf());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .context("cannot tell where to install toolchains: set COHORT_TOOLCHAINS or HOME")?;
    Ok(cache.join("cohort").join("toolchains"))
}

/// Arguments of `cohort build`.
#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The job's project directory.
    #[arg(default_value = ".")]
    pub path: PathBuf,
    /// Where to write the component [default: `dist/<name>.wasm` in the
    /// project (Rust: cargo's `target/wasm32-wasip2/release/<name>.wasm`)].
    #[arg(long, short)]
    pub output: Option<PathBuf>,
    /// The language, when the directory has markers of several.
    #[arg(long, value_enum)]
    pub lang: Option<Lang>,
    /// Where the pinned Python and JS toolchains are installed.
    #[arg(long, env = "COHORT_TOOLCHAINS")]
    pub toolchains: Option<PathBuf>,
    /// Build with the dependencies the lock pins and never resolve anew: a
    /// missing or outdated lock is an error (Python: `cohort.lock`;
    /// JavaScript: `package-lock.json`; Rust: cargo's `--locked`).
    #[arg(long)]
    pub locked: bool,
    /// Python: also install this group of `[project.optional-dependencies]`
    /// (repeatable).
    #[arg(long, value_name = "GROUP")]
    pub extra: Vec<String>,
}

/// `cohort build`: prints the built component's path on stdout.
pub fn build(args: BuildArgs) -> anyhow::Result<()> {
    let project = args
        .path
        .canonicalize()
        .with_context(|| format!("cannot open the project directory {}", args.path.display()))?;
    let lang = match args.lang {
        Some(lang) => lang,
        None => detect(&project)?,
    };
    let toolchains = toolchains_dir(args.toolchains.as_deref())?;
    if !args.extra.is_empty() && lang != Lang::Python {
        bail!("--extra names a group of a Python project's optional dependencies");
    }
    let built = match lang {
        Lang::Rust => build_rust(&project, args.output.as_deref(), args.locked)?,
        Lang::Python => build_python(&project, &args, &toolchains)?,
        Lang::Js => build_js(&project, &args, &toolchains)?,
    };
    println!("{}", built.display());
    Ok(())
}

/// The language of the project in `dir`, from its marker file.
pub fn detect(dir: &Path) -> anyhow::Result<Lang> {
    let found: Vec<Lang> = [Lang::Rust, Lang::Python, Lang::Js]
        .into_iter()
        .filter(|lang| dir.join(lang.marker()).is_file())
        .collect();
    match found.as_slice() {
        [lang] => Ok(*lang),
        [] => bail!(
            "{} is not a job project: it has no Cargo.toml (Rust), pyproject.toml (Python) or \
             package.json (JavaScript/TypeScript); `cohort new --lang rust|python|js NAME` starts one",
            dir.display()
        ),
        several => bail!(
            "{} has {}: pass --lang to say which one to build",
            dir.display(),
            several
                .iter()
                .map(|lang| lang.marker())
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}

// ---------------------------------------------------------------- Rust

fn build_rust(project: &Path, output: Option<&Path>, locked: bool) -> anyhow::Result<PathBuf> {
    ensure_rust_target()?;
    eprintln!("cohort build: cargo build --release --target {RUST_TARGET} ({RUST_SIMD_CONFIG})");
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo
        .current_dir(project)
        .args(["build", "--release", "--target", RUST_TARGET])
        .args(["--config", RUST_SIMD_CONFIG])
        .args(["--message-format", "json-render-diagnostics"])
        .args(locked.then_some("--locked"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    // A target set for the host (by the environment) must not leak in.
    for var in ["CARGO_BUILD_TARGET", "CARGO_ENCODED_RUSTFLAGS", "RUSTFLAGS"] {
        cargo.env_remove(var);
    }
    let out = cargo
        .output()
        .context("cannot run cargo (is the Rust toolchain installed?)")?;
    if !out.status.success() {
        bail!(
            "cargo build failed ({}); its messages are above",
            out.status
        );
    }
    let wasm = cdylib_artifact(&String::from_utf8_lossy(&out.stdout)).context(
        "cargo built no .wasm library: a Rust job needs `[lib] crate-type = [\"cdylib\"]` in Cargo.toml",
    )?;
    deliver(&wasm, output)
}

/// The `.wasm` file of the last cdylib artifact in cargo's JSON messages
/// (the job itself: dependencies are built before it).
fn cdylib_artifact(messages: &str) -> Option<PathBuf> {
    messages
        .lines()
        .rev()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| {
            message["target"]["crate_types"]
                .as_array()
                .is_some_and(|types| types.iter().any(|t| t == "cdylib"))
        })
        .filter_map(|message| {
            message["filenames"].as_array()?.iter().find_map(|name| {
                name.as_str()
                    .filter(|name| name.ends_with(".wasm"))
                    .map(PathBuf::from)
            })
        })
        .next()
}

/// Installs the `wasm32-wasip2` standard library with rustup if missing.
fn ensure_rust_target() -> anyhow::Result<()> {
    let libdir = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", RUST_TARGET])
        .output()
        .context("cannot run rustc (is the Rust toolchain installed?)")?;
    let path = PathBuf::from(String::from_utf8_lossy(&libdir.stdout).trim());
    let installed = libdir.status.success()
        && fs::read_dir(&path).is_ok_and(|entries| {
            entries.flatten().any(|entry| {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                name.starts_with("libstd-") && name.ends_with(".rlib")
            })
        });
    if installed {
        return Ok(());
    }
    eprintln!("cohort build: the {RUST_TARGET} target is missing; rustup target add {RUST_TARGET}");
    let status = Command::new("rustup")
        .args(["target", "add", RUST_TARGET])
        .stdout(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() => Ok(()),
        _ => bail!(
            "the {RUST_TARGET} target is missing and rustup could not add it: run `rustup target add {RUST_TARGET}`"
        ),
    }
}

// ---------------------------------------------------------------- Python

/// What `cohort build` reads from `pyproject.toml`.
#[derive(Debug, serde::Deserialize)]
struct PyProject {
    project: Option<PyProjectTable>,
    tool: Option<PyTools>,
}

#[derive(Debug, serde::Deserialize)]
struct PyProjectTable {
    name: Option<String>,
    #[serde(flatten)]
    declared: pydeps::Declared,
}

#[derive(Debug, serde::Deserialize)]
struct PyTools {
    cohort: Option<PyCohort>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PyCohort {
    /// The module (importable from the project directory) that defines the job.
    module: Option<String>,
}

fn build_python(project: &Path, args: &BuildArgs, toolchains: &Path) -> anyhow::Result<PathBuf> {
    let pyproject: PyProject = read_manifest(project, Lang::Python, |text| {
        toml::from_str(text).map_err(anyhow::Error::from)
    })?;
    let (name, declared) = match pyproject.project {
        Some(table) => (table.name, table.declared),
        None => (None, pydeps::Declared::default()),
    };
    let wanted = pydeps::wanted(&declared, &args.extra)?;
    let name = name
        .or_else(|| dir_name(project))
        .context("the project has no name: set `[project] name` in pyproject.toml")?;
    let module = pyproject
        .tool
        .and_then(|tool| tool.cohort)
        .and_then(|cohort| cohort.module)
        .unwrap_or_else(|| "app".to_string());
    if !valid_python_module(&module) {
        bail!("`[tool.cohort] module = {module:?}` is not a Python module name");
    }
    let file = project.join(format!("{}.py", module.replace('.', "/")));
    let package = project.join(module.replace('.', "/")).join("__init__.py");
    if !file.is_file() && !package.is_file() {
        bail!(
            "the job module `{module}` is missing: write {} (or set `[tool.cohort] module` in pyproject.toml)",
            file.display()
        );
    }
    let tools = ensure_python(toolchains)?;
    let sdk = ensure_sdk(toolchains)?;
    let deps = pydeps::install(project, toolchains, &wanted, args.locked)?;
    let out = output_path(project, &name, args.output.as_deref())?;
    // Built from a copy: componentize-py's interpreter writes __pycache__
    // where it imports from (see `cache`).
    let scratch = scratch_in(toolchains, ".building-", "the build")?;
    let sources = scratch.path().join(&name);
    let files = cache::copy_sources(project, &sources)?;
    let inputs = [
        "python",
        PYTHON_REQUIREMENTS,
        &sdk.to_string_lossy(),
        &deps.to_string_lossy(),
        &module,
        &PYTHON_INTERFACE_NAMES.join(" "),
    ];
    let key = cache::key(&files, &inputs);
    let built = cache::Cache::new(toolchains.join("python-builds"));
    if built.get(&key, &out) {
        eprintln!("cohort build: unchanged since an earlier build of the same sources and lock");
        return Ok(out);
    }
    eprintln!("cohort build: componentize-py (Python job `{name}`, module `{module}`)");
    let mut command = python_tool(&tools);
    command
        // componentize-py bundles the site-packages of `VIRTUAL_ENV`, else
        // of the Python it finds: the job's own dependencies, never the
        // builder's.
        .env("VIRTUAL_ENV", &deps)
        .current_dir(&sources)
        .arg("-d")
        .arg(sdk.join(PYTHON_WIT_DIR))
        .args(["-w", "job"]);
    for name in PYTHON_INTERFACE_NAMES {
        command.args(["--import-interface-name", name]);
    }
    run(command
        .args(["componentize", &module, "-p"])
        .arg(&sources)
        .arg("-p")
        .arg(sdk.join("python"))
        .arg("-o")
        .arg(&out)
        .stdout(to_stderr()))
    .context("componentize-py failed; its messages are above")?;
    built.put(&key, &out);
    Ok(out)
}

fn valid_python_module(name: &str) -> bool {
    !name.is_empty()
        && name.split('.').all(|part| {
            part.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
                && part.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
}

/// A command that runs the installed componentize-py.
fn python_tool(site: &Path) -> Command {
    let mut command = Command::new(python());
    command
        .env("PYTHONPATH", site)
        // componentize-py is Rust: a backtrace set for cohort's own
        // debugging would bury its build errors under 30 frames.
        .env("RUST_BACKTRACE", "0")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args([
            "-c",
            "import sys; sys.argv[0] = 'componentize-py'; \
             from componentize_py import script; sys.exit(script())",
        ]);
    command
}

fn python() -> String {
    std::env::var("COHORT_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// The directory componentize-py is installed in (installing it if needed).
fn ensure_python(toolchains: &Path) -> anyhow::Result<PathBuf> {
    let dir = toolchains.join(format!("python-{}", short_hash(&[PYTHON_REQUIREMENTS])));
    install_once(
        toolchains,
        &dir,
        "the Python toolchain (componentize-py)",
        |scratch| {
            let requirements = scratch.join("requirements.txt");
            fs::write(&requirements, PYTHON_REQUIREMENTS)?;
            run(Command::new(python())
                .args([
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                ])
                .args(["--no-input", "--require-hashes", "--only-binary", ":all:"])
                .arg("--target")
                .arg(scratch.join("site"))
                .arg("-r")
                .arg(&requirements)
                .env("PIP_ROOT_USER_ACTION", "ignore"))
            .context(
                "installing componentize-py from PyPI failed (needs python3 with pip, and PyPI)",
            )
        },
    )?;
    Ok(dir.join("site"))
}

// ---------------------------------------------------------------- JS

/// What `cohort build` reads from `package.json`.
#[derive(Debug, serde::Deserialize)]
struct PackageJson {
    name: Option<String>,
    main: Option<String>,
}

fn build_js(project: &Path, args: &BuildArgs, toolchains: &Path) -> anyhow::Result<PathBuf> {
    let manifest: serde_json::Value = read_manifest(project, Lang::Js, |text| {
        serde_json::from_str(text).map_err(anyhow::Error::from)
    })?;
    let package: PackageJson = serde_json::from_value(manifest.clone())
        .with_context(|| format!("{} is not valid", project.join("package.json").display()))?;
    let name = package
        .name
        .map(|name| name.rsplit('/').next().unwrap_or(&name).to_string())
        .or_else(|| dir_name(project))
        .context("the project has no name: set \"name\" in package.json")?;
    let main = package.main.unwrap_or_else(|| "index.js".into());
    let entry = project.join(&main);
    if !entry.is_file() {
        bail!(
            "the job's entry {} is missing (package.json \"main\" names it)",
            entry.display()
        );
    }
    let tools = ensure_js(toolchains)?;
    let sdk = ensure_sdk(toolchains)?;
    let deps = jsdeps::install(project, toolchains, &manifest, args.locked)?;
    let out = output_path(project, &name, args.output.as_deref())?;
    let bin = tools.join("node_modules/.bin");
    let scratch = tempfile::Builder::new()
        .prefix(".cohort-build-")
        .tempdir_in(out.parent().unwrap_or(project))
        .context("cannot create a scratch directory next to the output")?;
    let typescript = main.ends_with(".ts") || main.ends_with(".mts");
    if typescript && project.join("tsconfig.json").is_file() {
        // The project's own settings, with `cohort-job` resolved to the
        // SDK installed here (a checkout's relative path would not be).
        // The job's dependencies, installed outside the project, are found
        // through a catch-all path (after the project's own node_modules).
        let wrapper = scratch.path().join("tsconfig.json");
        let mut paths = serde_json::json!({ "cohort-job": [sdk.join("js")] });
        if let Some(modules) = &deps {
            paths["*"] = serde_json::json!([modules.join("*"), modules.join("@types").join("*")]);
        }
        let config = serde_json::json!({
            "extends": project.join("tsconfig.json"),
            "compilerOptions": { "paths": paths },
        });
        fs::write(&wrapper, config.to_string())?;
        // Types are erased from the bundle, so the check has its own key:
        // every source file, the dependencies, the SDK and the toolchain (a
        // project with its own node_modules, which the key leaves out, is
        // always checked).
        let files = cache::digest_sources(project)?;
        let modules = deps
            .as_deref()
            .map(Path::to_string_lossy)
            .unwrap_or_default();
        let inputs = ["tsc", JS_TOOLCHAIN_LOCK, &sdk.to_string_lossy(), &modules];
        let key = cache::key(&files, &inputs);
        let checked = cache::Cache::new(toolchains.join("js-checked"));
        if !project.join("node_modules").exists() && checked.marked(&key) {
            eprintln!("cohort build: types checked before, the sources unchanged");
        } else {
            eprintln!("cohort build: tsc --noEmit (type check)");
            run(Command::new(bin.join("tsc"))
                .current_dir(project)
                .arg("--noEmit")
                .arg("-p")
                .arg(&wrapper)
                .stdout(to_stderr()))
            .context("the TypeScript type check failed; its messages are above")?;
            checked.mark(&key);
        }
    }
    // Named after the job and built from inside the scratch directory, so
    // stack traces say `<name>.js:12:5`, not a temporary path.
    let bundle = format!("{name}.js");
    eprintln!("cohort build: esbuild (bundle {main})");
    let http = bundle_js(
        &bin.join("esbuild"),
        project,
        &entry,
        &sdk.join("js"),
        deps.as_deref(),
        &scratch.path().join(&bundle),
    )?;
    // componentize-js does not give the same bytes twice; esbuild does. A
    // bundle built before (with the same toolchain and world) is that
    // build's component (see `cache`).
    let code = fs::read(scratch.path().join(&bundle))
        .with_context(|| format!("cannot read the bundle {bundle}"))?;
    let digest: [u8; 32] = sha2::Sha256::digest(&code).into();
    let files = [(bundle.clone(), digest)];
    let inputs = [
        "js",
        JS_TOOLCHAIN_LOCK,
        &sdk.to_string_lossy(),
        if http { "http" } else { "no http" },
    ];
    let key = cache::key(&files, &inputs);
    let built = cache::Cache::new(toolchains.join("js-builds"));
    if built.get(&key, &out) {
        eprintln!("cohort build: unchanged since an earlier build of the same bundle");
        return Ok(out);
    }
    eprintln!(
        "cohort build: componentize-js (JavaScript job `{name}`, {})",
        if http {
            "with fetch over wasi:http"
        } else {
            "no fetch"
        }
    );
    // `fetch-event` (an exported wasi:http/incoming-handler) is never
    // wanted: a job is called through `run`.
    let disabled: &[&str] = if http {
        &["fetch-event"]
    } else {
        &["http", "fetch-event"]
    };
    run(Command::new(bin.join("componentize-js"))
        .current_dir(scratch.path())
        .arg(&bundle)
        .arg("--wit")
        .arg(sdk.join(JS_WIT_DIR))
        .args(["-n", "job", "-d"])
        .args(disabled)
        .arg("-o")
        .arg(&out)
        .stdout(to_stderr()))
    .context("componentize-js failed; its messages are above")?;
    built.put(&key, &out);
    Ok(out)
}

/// Bundles the job's `entry` (and what it imports, `cohort-job` being the
/// SDK in `sdk_js`) into `bundle` with esbuild. Returns whether the code
/// calls out: whether it names `fetch`.
fn bundle_js(
    esbuild: &Path,
    project: &Path,
    entry: &Path,
    sdk_js: &Path,
    node_modules: Option<&Path>,
    bundle: &Path,
) -> anyhow::Result<bool> {
    let esbuild = |extra: &[String]| {
        let mut command = Command::new(esbuild);
        if let Some(modules) = node_modules {
            command.env("NODE_PATH", modules);
        }
        run_esbuild(
            command
                .current_dir(project)
                .arg(entry)
                .args([
                    "--bundle",
                    "--format=esm",
                    "--platform=neutral",
                    "--log-level=warning",
                ])
                // `neutral` reads no `main` field by default: npm dependencies
                // that have only `main` would not resolve.
                .arg("--main-fields=module,main")
                .arg(format!("--alias:cohort-job={}", sdk_js.display()))
                .arg("--external:cohort:job/*")
                .arg(format!("--outfile={}", bundle.display()))
                .args(extra)
                .stdout(to_stderr()),
        )
    };
    // First without comments (esbuild keeps some, and names files in
    // others), to see whether the code, the job's own or its
    // dependencies', names `fetch`. Such a job gets the engine's fetch
    // over wasi:http; any other is built without wasi:http, importing what
    // it always did. (Its warnings are the second run's.)
    esbuild(&[
        "--minify-whitespace".into(),
        "--legal-comments=none".into(),
        "--log-level=error".into(),
    ])?;
    let code = fs::read_to_string(bundle)
        .with_context(|| format!("cannot read the bundle {}", bundle.display()))?;
    let http = names_fetch(&code);
    // Then the bundle itself, the SDK's fetch module first: its fetch
    // explains failures (with wasi:http), or rejects (without, where the
    // engine's would trap).
    let fetch_module = sdk_js.join(if http { "fetch.js" } else { "no-fetch.js" });
    esbuild(&[format!("--inject:{}", fetch_module.display())])?;
    Ok(http)
}

/// Runs esbuild, its messages passed on; a Node.js built-in it could not
/// resolve is an error naming it and its importer ([`jsdeps::node_builtin`]).
fn run_esbuild(command: &mut Command) -> anyhow::Result<()> {
    let out = command
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot run esbuild")?;
    let said = String::from_utf8_lossy(&out.stderr);
    eprint!("{said}");
    if out.status.success() {
        return Ok(());
    }
    Err(jsdeps::node_builtin(&said).unwrap_or_else(|| {
        anyhow::anyhow!("esbuild could not bundle the job; its messages are above")
    }))
}

/// Whether bundled JavaScript (without comments) names `fetch`: the word,
/// not part of a longer name (`prefetch`, `fetchAll`), as code that calls
/// it (`fetch(url)`, `globalThis.fetch`, `self["fetch"]`) must.
fn names_fetch(code: &str) -> bool {
    let part_of_name = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    code.match_indices("fetch").any(|(at, word)| {
        !code[..at].chars().next_back().is_some_and(part_of_name)
            && !code[at + word.len()..]
                .chars()
                .next()
                .is_some_and(part_of_name)
    })
}

/// The directory the JS tools are installed in (installing them if needed).
fn ensure_js(toolchains: &Path) -> anyhow::Result<PathBuf> {
    let dir = toolchains.join(format!(
        "js-{}",
        short_hash(&[JS_TOOLCHAIN_MANIFEST, JS_TOOLCHAIN_LOCK])
    ));
    install_once(
        toolchains,
        &dir,
        "the JavaScript toolchain (componentize-js, esbuild, tsc)",
        |scratch| {
            fs::write(scratch.join("package.json"), JS_TOOLCHAIN_MANIFEST)?;
            fs::write(scratch.join("package-lock.json"), JS_TOOLCHAIN_LOCK)?;
            run(Command::new(npm())
            .current_dir(scratch)
            // `install` with the lock file present installs the locked
            // versions; `npm ci` (npm 11) refuses this lock over optional
            // packages of other platforms it lists without a version.
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .stdout(to_stderr()))
        .context("installing the JavaScript toolchain from npm failed (needs Node.js >= 18 with npm)")
        },
    )?;
    Ok(dir)
}

fn npm() -> String {
    std::env::var("COHORT_NPM").unwrap_or_else(|_| "npm".into())
}

// ---------------------------------------------------------------- shared

/// The embedded SDKs and WIT, written once per content hash.
fn ensure_sdk(toolchains: &Path) -> anyhow::Result<PathBuf> {
    let contents: Vec<&str> = SDK_FILES.iter().flat_map(|(p, c)| [*p, *c]).collect();
    let dir = toolchains.join(format!("sdk-{}", short_hash(&contents)));
    install_once(toolchains, &dir, "the guest SDKs", |scratch| {
        for (path, contents) in SDK_FILES {
            let file = scratch.join(path);
            fs::create_dir_all(file.parent().expect("SDK files are in folders"))?;
            fs::write(file, contents)?;
        }
        Ok(())
    })?;
    Ok(dir)
}

/// A new scratch directory in `toolchains` (created if need be), named
/// `prefix...`, removed when dropped; `what` it is for says the error.
fn scratch_in(toolchains: &Path, prefix: &str, what: &str) -> anyhow::Result<tempfile::TempDir> {
    fs::create_dir_all(toolchains)
        .with_context(|| format!("cannot create {}", toolchains.display()))?;
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(toolchains)
        .with_context(|| {
            format!(
                "cannot create a scratch directory for {what} in {}",
                toolchains.display()
            )
        })
}

/// Creates `dir` with `install` unless it is there already. Works in a
/// scratch directory renamed into place, under a lock, so an interrupted
/// install leaves nothing half-made and concurrent builds install once.
fn install_once(
    toolchains: &Path,
    dir: &Path,
    what: &str,
    install: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    let scratch = scratch_in(toolchains, ".installing-", what)?;
    let lock = fs::File::create(toolchains.join(".install.lock"))
        .with_context(|| format!("cannot create a lock file in {}", toolchains.display()))?;
    lock.lock()
        .with_context(|| format!("cannot lock {}", toolchains.display()))?;
    if dir.is_dir() {
        return Ok(()); // Installed while this one waited.
    }
    eprintln!("cohort build: installing {what} into {}", dir.display());
    install(scratch.path())?;
    fs::rename(scratch.path(), dir)
        .with_context(|| format!("cannot move the install into {}", dir.display()))?;
    std::mem::forget(scratch); // Renamed: nothing left to clean up.
    Ok(())
}

/// The project's marker file for `lang`, read and parsed by `parse`.
fn read_manifest<T>(
    project: &Path,
    lang: Lang,
    parse: impl FnOnce(&str) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let manifest = project.join(lang.marker());
    let text = fs::read_to_string(&manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    parse(&text).with_context(|| format!("{} is not valid", manifest.display()))
}

/// `dist/<name>.wasm` in the project unless `output` says otherwise; the
/// parent directory is created.
fn output_path(project: &Path, name: &str, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let out = match output {
        Some(path) => path.to_path_buf(),
        None => project.join("dist").join(format!("{name}.wasm")),
    };
    let out = if out.is_relative() {
        std::env::current_dir()?.join(out)
    } else {
        out
    };
    if let Some(parent) = out.parent() {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    Ok(out)
}

/// Copies a built artifact to `output` if one was asked for.
fn deliver(built: &Path, output: Option<&Path>) -> anyhow::Result<PathBuf> {
    let Some(output) = output else {
        return Ok(built.to_path_buf());
    };
    if let Some(parent) = output.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    fs::copy(built, output).with_context(|| format!("cannot write {}", output.display()))?;
    Ok(output.to_path_buf())
}

fn dir_name(dir: &Path) -> Option<String> {
    dir.file_name()
        .map(|name| name.to_string_lossy().into_owned())
}

/// Runs a command to completion; a failure says which command.
fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    if !status.success() {
        bail!("{:?} failed ({status})", command.get_program());
    }
    Ok(())
}

/// Bytes of the pins' SHA-256 in an install directory's name: 48 bits tell
/// apart any pins one machine will ever hold.
const INSTALL_HASH_BYTES: usize = 6;

/// The first [`INSTALL_HASH_BYTES`] of the SHA-256 of `parts`
/// (length-prefixed), in hex.
fn short_hash(parts: &[&str]) -> String {
    let mut hasher = sha2::Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..INSTALL_HASH_BYTES]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `Stdio` for a child's stdout that goes to our stderr, keeping our stdout
/// for the component's path.
fn to_stderr() -> Stdio {
    use std::os::fd::AsFd;
    match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    }
}

// ---------------------------------------------------------------- new

/// Arguments of `cohort new`.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The language of the job.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The directory to create; its last component names the job
    /// (lowercase letters, digits, `-` and `_`, starting with a letter).
    pub path: PathBuf,
    /// Rust only: the `cohort-guest` crate's directory [default: the
    /// `guest-sdk` of the checkout this binary was built from].
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// The Rust guest SDK of the checkout this binary was built from.
const RUST_SDK_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-sdk");

/// `cohort new`: a job that builds and runs as it is.
pub fn new(args: NewArgs) -> anyhow::Result<()> {
    let name = dir_name(&args.path)
        .filter(|name| valid_job_name(name))
        .with_context(|| {
            format!(
                "`{}` does not end in a job name: use lowercase letters, digits, `-` and `_`, starting with a letter",
                args.path.display()
            )
        })?;
    if args.path.exists()
        && fs::read_dir(&args.path).map_or(true, |mut entries| entries.next().is_some())
    {
        bail!("{} already exists and is not empty", args.path.display());
    }
    let files: Vec<(String, String)> = match args.lang {
        Lang::Rust => {
            let sdk = args.sdk.unwrap_or_else(|| PathBuf::from(RUST_SDK_DIR));
            let sdk = sdk.canonicalize().with_context(|| {
                format!(
                    "the Rust guest SDK is not at {}: pass --sdk with the path of cohort's guest-sdk directory",
                    sdk.display()
                )
            })?;
            scaffold_rust(&name, &sdk)
        }
        Lang::Python => scaffold_python(&name),
        Lang::Js => scaffold_js(&name),
    };
    for (path, contents) in &files {
        let file = args.path.join(path);
        fs::create_dir_all(file.parent().expect("scaffold files are in the project"))
            .with_context(|| format!("cannot create {}", args.path.display()))?;
        fs::write(&file, contents).with_context(|| format!("cannot write {}", file.display()))?;
    }
    let path = args.path.display();
    println!("created the {} job `{name}` in {path}", args.lang.name());
    println!("  cohort build {path}");
    println!("  echo '{{\"name\": \"Ada\"}}' | cohort exec $(cohort build {path}) -i -");
    Ok(())
}

fn valid_job_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

/// What every scaffold does, in each language: `{"name": "Ada"}` in,
/// `{"greeting":"Hello, Ada!"}` out, `bad_input` without a name.
const SCAFFOLD_SUMMARY: &str =
    r#"Input: JSON {"name": "Ada"}. Output: {"greeting":"Hello, Ada!"}."#;

fn scaffold_rust(name: &str, sdk: &Path) -> Vec<(String, String)> {
    let sdk = sdk.display().to_string().replace('\\', "/");
    vec![
        (
            "Cargo.toml".into(),
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
cohort-guest = {{ path = "{sdk}" }}
serde = {{ version = "1", features = ["derive"] }}

# A job is its own workspace, even inside another project's directory.
[workspace]
"#
            ),
        ),
        (
            "src/lib.rs".into(),
            format!(
                r#"//! {name}: a cohort job. {SCAFFOLD_SUMMARY}

use cohort_guest::{{JobError, Json, info, job}};
use serde::{{Deserialize, Serialize}};

#[derive(Deserialize)]
struct Request {{
    name: String,
}}

#[derive(Serialize)]
struct Greeting {{
    greeting: String,
}}

#[job]
fn run(Json(request): Json<Request>) -> Result<Json<Greeting>, JobError> {{
    if request.name.is_empty() {{
        return Err(JobError::new("bad_input", "the name is empty"));
    }}
    info!("greeting {{}}", request.name);
    Ok(Json(Greeting {{
        greeting: format!("Hello, {{}}!", request.name),
    }}))
}}
"#
            ),
        ),
        (".gitignore".into(), "/target\n".into()),
    ]
}

fn scaffold_python(name: &str) -> Vec<(String, String)> {
    vec![
        (
            "pyproject.toml".into(),
            format!(
                r#"[project]
name = "{name}"
version = "0.1.0"
description = "A cohort job"
# From PyPI, pure-Python or WASI wheels; `cohort build` pins them in cohort.lock.
dependencies = []

# `cohort build` makes a component of this module (with componentize-py).
[tool.cohort]
module = "app"
"#
            ),
        ),
        (
            "app.py".into(),
            format!(
                r#""""{name}: a cohort job. {SCAFFOLD_SUMMARY}"""

from cohort_job import JobError, info, job


@job(input="json", output="json")
def run(request):
    name = request.get("name") if isinstance(request, dict) else None
    if not isinstance(name, str):
        raise JobError("bad_input", 'expected {{"name": "..."}}')
    if not name:
        raise JobError("bad_input", "the name is empty")
    info(f"greeting {{name}}")
    return {{"greeting": f"Hello, {{name}}!"}}
"#
            ),
        ),
        (".gitignore".into(), "/dist\n__pycache__/\n".into()),
    ]
}

fn scaffold_js(name: &str) -> Vec<(String, String)> {
    vec![
        (
            "package.json".into(),
            format!(
                r#"{{
  "name": "{name}",
  "version": "0.1.0",
  "description": "A cohort job",
  "type": "module",
  "main": "index.js",
  "private": true
}}
"#
            ),
        ),
        (
            "index.js".into(),
            format!(
                r#"// {name}: a cohort job. {SCAFFOLD_SUMMARY}
import {{ JobError, info, job }} from "cohort-job";

export const run = job.json((request) => {{
  const name = request?.name;
  if (typeof name !== "string") {{
    throw new JobError("bad_input", 'expected {{"name": "..."}}');
  }}
  if (name === "") {{
    throw new JobError("bad_input", "the name is empty");
  }}
  info(`greeting ${{name}}`);
  return {{ greeting: `Hello, ${{name}}!` }};
}});
"#
            ),
        ),
        (".gitignore".into(), "/dist\n".into()),
    ]
}

// ---------------------------------------------------------------- toolchain

/// `cohort toolchain ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ToolchainCommand {
    /// Install the pinned Python and JavaScript toolchains now (`cohort
    /// build` otherwise does on first use).
    Install {
        /// Only this language's toolchain [default: Python and JS].
        #[arg(long, value_enum)]
        lang: Option<Lang>,
        /// Where to install them.
        #[arg(long, env = "COHORT_TOOLCHAINS")]
        toolchains: Option<PathBuf>,
    },
    /// Print the directory toolchains are installed in.
    Dir {
        /// Where they are installed.
        #[arg(long, env = "COHORT_TOOLCHAINS")]
        toolchains: Option<PathBuf>,
    },
}

/// `cohort toolchain install|dir`.
pub fn toolchain(command: ToolchainCommand) -> anyhow::Result<()> {
    match command {
        ToolchainCommand::Install { lang, toolchains } => {
            let dir = toolchains_dir(toolchains.as_deref())?;
            ensure_sdk(&dir)?;
            if matches!(lang, None | Some(Lang::Python)) {
                println!("{}", ensure_python(&dir)?.display());
            }
            if matches!(lang, None | Some(Lang::Js)) {
                println!("{}", ensure_js(&dir)?.display());
            }
            if lang == Some(Lang::Rust) {
                ensure_rust_target()?;
            }
            Ok(())
        }
        ToolchainCommand::Dir { toolchains } => {
            println!("{}", toolchains_dir(toolchains.as_deref())?.display());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_language_comes_from_the_one_marker_file() {
        let dir = tempfile::tempdir().unwrap();
        let error = detect(dir.path()).unwrap_err().to_string();
        assert!(error.contains("is not a job project"), "{error}");
        fs::write(dir.path().join("pyproject.toml"), "").unwrap();
        assert_eq!(detect(dir.path()).unwrap(), Lang::Python);
        fs::write(dir.path().join("package.json"), "{}").unwrap();
        let error = detect(dir.path()).unwrap_err().to_string();
        assert!(error.contains("pyproject.toml and package.json"), "{error}");
        assert!(error.contains("--lang"), "{error}");
    }

    #[test]
    fn the_cdylib_wasm_is_found_in_cargo_messages() {
        let messages = [
            r#"{"reason":"compiler-artifact","target":{"crate_types":["lib"]},"filenames":["/t/libserde.rlib"]}"#,
            r#"not json"#,
            r#"{"reason":"compiler-artifact","target":{"crate_types":["cdylib"]},"filenames":["/t/x.d","/t/my_job.wasm"]}"#,
            r#"{"reason":"build-finished","success":true}"#,
        ]
        .join("\n");
        assert_eq!(
            cdylib_artifact(&messages),
            Some(PathBuf::from("/t/my_job.wasm"))
        );
        assert_eq!(cdylib_artifact(messages.lines().next().unwrap()), None);
    }

    #[test]
    fn fetch_is_found_as_a_word_of_the_bundle() {
        for uses in [
            "await fetch(url)",
            "const f = globalThis.fetch;",
            r#"self["fetch"](u)"#,
            "fetch",
        ] {
            assert!(names_fetch(uses), "{uses}");
        }
        for not in [
            "",
            "prefetch(x)",
            "fetchAll()",
            "$fetch()",
            "fetch_1",
            "é.fetché",
        ] {
            assert!(!names_fetch(not), "{not}");
        }
    }

    #[test]
    fn job_and_module_names_are_checked() {
        assert!(valid_job_name("word-count_2"));
        for bad in ["", "2x", "Word", "a b", "a/b", "é"] {
            assert!(!valid_job_name(bad), "{bad}");
        }
        assert!(valid_python_module("app"));
        assert!(valid_python_module("jobs.word_count"));
        for bad in ["", "2x", "a-b", "a..b", "a/b"] {
            assert!(!valid_python_module(bad), "{bad}");
        }
    }

    #[test]
    fn pins_name_their_install_directories() {
        assert_ne!(short_hash(&["a", "bc"]), short_hash(&["ab", "c"]));
        assert_eq!(short_hash(&["x"]).len(), 2 * INSTALL_HASH_BYTES);
        assert!(PYTHON_REQUIREMENTS.contains("componentize-py=="));
        assert!(PYTHON_REQUIREMENTS.contains("--hash=sha256:"));
        let lock: serde_json::Value = serde_json::from_str(JS_TOOLCHAIN_LOCK).unwrap();
        let manifest: serde_json::Value = serde_json::from_str(JS_TOOLCHAIN_MANIFEST).unwrap();
        // `npm ci` refuses a lock that does not match the manifest; check
        // the pins agree here rather than at a user's first build.
        for (package, version) in manifest["dependencies"].as_object().unwrap() {
            let locked = &lock["packages"][format!("node_modules/{package}")]["version"];
            assert_eq!(locked, version, "{package}");
        }
    }
}
