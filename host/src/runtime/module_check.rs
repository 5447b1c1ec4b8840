//! Checking a module against the job world without compiling it.
//!
//! An upload is answered once its bytes are durable, not once it is
//! compiled (seconds for a language runtime's component), so what can be
//! known without Cranelift is checked here, completely, before a module
//! is stored:
//!
//! * the preamble (garbage and core modules get their own message);
//! * the whole component validated by the wasmparser wasmtime itself
//!   validates with, with exactly the engine's WebAssembly features
//!   ([`job_wasm_features`], which `engine.rs` also sets), function
//!   bodies included;
//! * every `cohort:job` import and export of one version this node runs
//!   ([`super::module::JOB_PACKAGE_VERSIONS`]), as the runtime's link step checks;
//! * every import an interface the runtime's linker defines (WASI 0.2,
//!   `wasi:http`, cohort's own), by name ([`PROVIDED`]);
//! * a `run` export of the job world's type.
//!
//! The same errors, with the same codes, as [`Runtime::load`] gives.
//! What only linking can tell (a provided interface imported with a
//! function of another signature) is found when the node compiles the
//! module; its jobs then fail with the module's code, not retried.
//!
//! [`Runtime::load`]: super::Runtime::load

use super::module::{ModuleError, check_job_versions, check_preamble};
use crate::limits::MODULE_BYTES_MAX;
use wasmparser::component_types::{ComponentDefinedType, ComponentEntityType, ComponentValType};
use wasmparser::{
    ComponentTypeRef, FuncValidatorAllocations, Parser, Payload, PrimitiveValType, TypeBounds,
    ValidPayload, Validator, WasmFeatures,
};
use wasmparser_wasmtime as wasmparser;

/// The WebAssembly features job modules may use: wasmtime's defaults for
/// the crate features this build enables (no GC, exceptions or threads;
/// the component model without its async extensions). The engine is
/// configured with exactly these, so a module this check passes is one
/// wasmtime validates too.
pub(crate) fn job_wasm_features() -> WasmFeatures {
    let mut features = WasmFeatures::WASM3;
    features.remove(WasmFeatures::GC_TYPES | WasmFeatures::EXCEPTIONS | WasmFeatures::THREADS);
    features | WasmFeatures::COMPONENT_MODEL
}

/// Every interface the runtime's linker defines for jobs, by package
/// (`engine.rs` links them): WASI 0.2 (any `0.2.x` import), `wasi:http`'s
/// outgoing calls, and `cohort:job` (only `host` and `types` at 0.1.0).
pub(crate) const PROVIDED: &[(&str, &[&str])] = &[
    ("wasi:io", &["error", "poll", "streams"]),
    ("wasi:clocks", &["wall-clock", "monotonic-clock"]),
    ("wasi:filesystem", &["types", "preopens"]),
    ("wasi:random", &["random", "insecure", "insecure-seed"]),
    (
        "wasi:cli",
        &[
            "exit",
            "environment",
            "stdin",
            "stdout",
            "stderr",
            "terminal-input",
            "terminal-output",
            "terminal-stdin",
            "terminal-stdout",
            "terminal-stderr",
        ],
    ),
    (
        "wasi:sockets",
        &[
            "tcp",
            "udp",
            "udp-create-socket",
            "tcp-create-socket",
            "instance-network",
            "network",
            "ip-name-lookup",
        ],
    ),
    ("wasi:http", &["types", "outgoing-handler"]),
    ("cohort:job", &["types", "host", "blobs"]),
];

/// The `cohort:job` interfaces of the frozen 0.1.0 package.
const LEGACY_INTERFACES: &[&str] = &["types", "host"];

/// Checks `wasm` as a job module, without compiling it (see the module
/// notes). CPU-bound (a 20 MB component takes a fraction of a second):
/// call it from a blocking thread.
pub fn check(wasm: &[u8]) -> Result<(), ModuleError> {
    if wasm.len() > MODULE_BYTES_MAX {
        return Err(ModuleError::TooLarge {
            size: wasm.len(),
            limit: MODULE_BYTES_MAX,
        });
    }
    check_preamble(wasm)?;
    let outline = validate(wasm).map_err(ModuleError::Invalid)?;
    check_job_versions(
        outline
            .imports
            .iter()
            .chain(&outline.exports)
            .map(String::as_str),
    )?;
    for name in &outline.imports {
        check_import(name, outline.instance_imports.contains(name))?;
    }
    outline.run.map_err(ModuleError::WrongWorld)
}

/// What the checks need of a validated component: its top-level import
/// and export names, and whether its `run` export is the job world's.
struct Outline {
    imports: Vec<String>,
    /// The imports that are instances (interfaces).
    instance_imports: Vec<String>,
    exports: Vec<String>,
    /// `Err`: why `run` is missing or not the job world's.
    run: Result<(), String>,
}

/// Validates the whole component (function bodies too) and outlines it.
fn validate(wasm: &[u8]) -> Result<Outline, String> {
    validate_all(wasm)
        .map_err(|e| e.to_string())?
        .ok_or_else(|| "the component ends before its last section".to_string())
}

fn validate_all(wasm: &[u8]) -> wasmparser::Result<Option<Outline>> {
    let mut validator = Validator::new_with_features(job_wasm_features());
    let mut allocations = FuncValidatorAllocations::default();
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    // Nested modules and components have payloads of their own, each
    // opened by a `Version` and closed by an `End`: only depth 1 is the
    // component's own interface.
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload?;
        match &payload {
            Payload::Version { .. } => depth += 1,
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section.clone() {
                    let import = import?;
                    // A type equal to one the component defines (a
                    // record the world uses) is the component's own: no
                    // linker provides it.
                    if !matches!(import.ty, ComponentTypeRef::Type(TypeBounds::Eq(_))) {
                        imports.push(import.name.name.to_string());
                    }
                }
            }
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section.clone() {
                    exports.push(export?.name.name.to_string());
                }
            }
            _ => {}
        }
        match validator.payload(&payload)? {
            ValidPayload::Func(func, body) => {
                let mut func = func.into_validator(allocations);
                func.validate(&body)?;
                allocations = func.into_allocations();
            }
            ValidPayload::End(types) => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    let types = types.as_ref();
                    let instance_imports = (imports.iter())
                        .filter(|name| {
                            matches!(
                                types.component_item_for_import(name).map(|i| i.ty),
                                Some(ComponentEntityType::Instance(_))
                            )
                        })
                        .cloned()
                        .collect();
                    let run = run_type(types);
                    return Ok(Some(Outline {
                        imports,
                        instance_imports,
                        exports,
                        run,
                    }));
                }
            }
            _ => {}
        }
    }
    // `parse_all` ends every whole input with the top level's `End`.
    Ok(None)
}

/// Whether the component's `run` export has the job world's type:
/// `func(input: list<u8>) -> result<list<u8>, job-error>`, where
/// `job-error` is `record { code: string, message: string }`.
fn run_type(types: wasmparser::types::TypesRef<'_>) -> Result<(), String> {
    let Some(item) = types.component_item_for_export("run") else {
        return Err("it does not export the job world's `run`".into());
    };
    let ComponentEntityType::Func(id) = item.ty else {
        return Err(format!(
            "its export `run` is a {}, not a function",
            kind(&item.ty)
        ));
    };
    let func = &types[id];
    let defined = |ty: &ComponentValType| match ty {
        ComponentValType::Type(id) => Some(&types[*id]),
        ComponentValType::Primitive(_) => None,
    };
    let is_bytes = |ty: &ComponentValType| {
        matches!(
            defined(ty),
            Some(ComponentDefinedType::List {
                element: ComponentValType::Primitive(PrimitiveValType::U8),
                ..
            })
        )
    };
    let is_string =
        |ty: &ComponentValType| matches!(ty, ComponentValType::Primitive(PrimitiveValType::String));
    let is_job_error = |ty: &ComponentValType| match defined(ty) {
        Some(ComponentDefinedType::Record(record)) => {
            let fields: Vec<(&str, &ComponentValType)> = (record.fields.iter())
                .map(|(n, t)| (n.as_str(), t))
                .collect();
            matches!(
                fields.as_slice(),
                [("code", c), ("message", m)] if is_string(c) && is_string(m)
            )
        }
        _ => false,
    };
    let params_ok = matches!(&*func.params, [(_, input)] if is_bytes(input));
    let result_ok = match func.result.as_ref().and_then(defined) {
        Some(ComponentDefinedType::Result {
            ok: Some(ok),
            err: Some(err),
            ..
        }) => is_bytes(ok) && is_job_error(err),
        _ => false,
    };
    if params_ok && result_ok {
        Ok(())
    } else {
        Err("its export `run` is not `func(input: list<u8>) -> result<list<u8>, job-error>`".into())
    }
}

fn kind(ty: &ComponentEntityType) -> &'static str {
    match ty {
        ComponentEntityType::Module(_) => "module",
        ComponentEntityType::Func(_) => "function",
        ComponentEntityType::Value(_) => "value",
        ComponentEntityType::Type { .. } => "type",
        ComponentEntityType::Instance(_) => "instance",
        ComponentEntityType::Component(_) => "component",
    }
}

/// Refuses an import the linker does not define: one outside
/// [`PROVIDED`], or not an interface.
fn check_import(name: &str, is_instance: bool) -> Result<(), ModuleError> {
    let unsupported = |detail: &str| ModuleError::UnsupportedImport {
        name: name.to_string(),
        detail: detail.to_string(),
    };
    let Some((package, rest)) = name.split_once('/') else {
        return Err(unsupported("not an interface cohort provides"));
    };
    let (interface, version) = rest.split_once('@').unwrap_or((rest, ""));
    let Some((_, interfaces)) = PROVIDED.iter().find(|(p, _)| *p == package) else {
        return Err(unsupported("no interface of this package is provided"));
    };
    let provided = match package {
        // Its versions were checked before.
        "cohort:job" if version == "0.1.0" => LEGACY_INTERFACES.contains(&interface),
        "cohort:job" => interfaces.contains(&interface),
        _ => version.starts_with("0.2.") && interfaces.contains(&interface),
    };
    if !provided {
        return Err(unsupported(&format!(
            "{package} is provided at version 0.2, with the interfaces {}",
            interfaces.join(", ")
        )));
    }
    if !is_instance {
        return Err(unsupported("imported as something other than an interface"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/{name}.wasm", env!("COHORT_GUESTS_DIR"))).unwrap()
    }

    /// A component of one import: an interface of no items named `name`.
    fn importing(name: &str) -> Vec<u8> {
        let mut wasm = b"\0asm\x0d\0\x01\0".to_vec();
        // Type section: one instance type with no declarations.
        wasm.extend_from_slice(&[7, 3, 1, 0x42, 0]);
        // Import section: `name` as an instance of type 0.
        let mut import = vec![1, 0, name.len() as u8];
        import.extend_from_slice(name.as_bytes());
        import.extend_from_slice(&[5, 0]);
        wasm.push(10);
        wasm.push(import.len() as u8);
        wasm.extend_from_slice(&import);
        wasm
    }

    #[test]
    fn jobs_of_both_versions_pass() {
        for name in [
            "fixture_echo",
            "wordcount",
            "fixture_legacy_job",
            "fixture_http",
        ] {
            check(&guest(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn bad_modules_get_the_runtimes_codes() {
        let code = |wasm: &[u8]| check(wasm).unwrap_err().code();
        assert_eq!(code(b"garbage"), "module_invalid");
        let core = check(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(
            core.to_string().contains("core WebAssembly module"),
            "{core}"
        );
        let mut broken = b"\0asm\x0d\0\x01\0".to_vec();
        broken.extend_from_slice(&[0xff; 32]);
        assert_eq!(code(&broken), "module_invalid");
        let echo = guest("fixture_echo");
        assert_eq!(code(&echo[..echo.len() / 2]), "module_invalid");
        assert_eq!(
            code(&vec![0; crate::limits::MODULE_BYTES_MAX + 1]),
            "module_too_large"
        );

        let wrong = check(&guest("fixture_wrong_world")).unwrap_err();
        assert_eq!(wrong.code(), "module_wrong_world");
        assert!(wrong.to_string().contains("run"), "{wrong}");

        let future = check(&guest("fixture_future_job")).unwrap_err();
        assert_eq!(future.code(), "module_job_version");
        assert!(
            future.to_string().contains("cohort:job/host@0.3.0"),
            "{future}"
        );

        let foreign = check(&guest("fixture_foreign_import")).unwrap_err();
        assert_eq!(foreign.code(), "module_unsupported_import");
        assert!(foreign.to_string().contains("acme:db/query"), "{foreign}");
    }

    #[test]
    fn imports_are_checked_by_package_interface_and_version() {
        let code = |name: &str| check(&importing(name)).unwrap_err().code();
        // Provided: then only `run` is missing.
        for name in [
            "wasi:io/streams@0.2.0",
            "wasi:cli/stdout@0.2.12",
            "wasi:http/outgoing-handler@0.2.3",
            "cohort:job/blobs@0.2.0",
            "cohort:job/host@0.1.0",
        ] {
            assert_eq!(code(name), "module_wrong_world", "{name}");
        }
        for name in [
            "wasi:io/streams@0.3.0",
            "wasi:cli/run@0.2.0",
            "wasi:http/incoming-handler@0.2.0",
            "cohort:job/blobs@0.1.0",
            "cohort:job/master@0.2.0",
            "acme:db/query",
        ] {
            assert_eq!(code(name), "module_unsupported_import", "{name}");
        }
        assert_eq!(code("cohort:job/host@9.9.9"), "module_job_version");
        assert_eq!(code("cohort:job/host"), "module_job_version");
    }

    /// What this check lets through is what the runtime's linker defines:
    /// each provided interface, imported alone, links.
    #[tokio::test]
    async fn every_provided_interface_is_linked() {
        let runtime = crate::runtime::Runtime::new(Default::default()).unwrap();
        for (package, interfaces) in PROVIDED {
            for interface in *interfaces {
                let version = match *package {
                    "cohort:job" => crate::runtime::module::JOB_PACKAGE_VERSION,
                    _ => "0.2.0",
                };
                let name = format!("{package}/{interface}@{version}");
                let refused = runtime.load(&importing(&name)).await.unwrap_err();
                // Linked; only the job world's export is missing.
                assert_eq!(refused.code(), "module_wrong_world", "{name}: {refused}");
            }
        }
        // What the linker lacks, the check refuses by its name, and the
        // runtime refuses too.
        let foreign = importing("acme:db/query");
        let refused = check(&foreign).unwrap_err();
        assert_eq!(refused.code(), "module_unsupported_import", "{refused}");
        assert!(runtime.load(&foreign).await.is_err());
    }
}
