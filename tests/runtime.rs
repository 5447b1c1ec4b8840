//! Every example and every misbehaving fixture, run through the real runtime.
//! Each failing case is followed by a healthy job on the same runtime: one
//! bad module must never affect the next job.
//!
//! This file runs them with jobs on the runtime's threads;
//! `runtime_process.rs` runs the same cases in sandbox processes. Below
//! them: the versions of the job contract a node runs or refuses, and the
//! `blobs` interface (inputs read and outputs written as streams) through
//! `fixture_blobs`; `runtime_process.rs` repeats the blob cases a process
//! boundary can break.

const ISOLATION: Isolation = Isolation::Thread;

include!("runtime/cases.rs");

// ---- Versions of the job contract

#[tokio::test]
async fn a_job_built_for_cohort_job_0_1_0_still_runs() {
    let rt = runtime();
    let report = run(&rt, "fixture_legacy_job", b"old news", JobLimits::default()).await;
    assert_eq!(
        report.outcome.as_deref().unwrap(),
        b"legacy:old news",
        "log: {}",
        log_text(&report)
    );
    assert!(
        log_text(&report).contains("legacy job: 8 bytes in"),
        "its 0.1.0 log line shows: {}",
        log_text(&report)
    );
    assert!(report.outputs.is_empty());
    assert_healthy(&rt).await;
}

#[tokio::test]
async fn a_job_built_for_a_future_contract_is_refused_as_a_version_mismatch() {
    let rt = runtime();
    let refused = rt.load(&guest("fixture_future_job")).await.unwrap_err();
    assert_eq!(refused.code(), "module_job_version", "{refused}");
    let message = refused.to_string();
    assert!(message.contains("cohort:job/host@0.3.0"), "{message}");
    assert!(message.contains("rebuild"), "{message}");
    assert_healthy(&rt).await;
}

/// A component that imports `cohort:job` interfaces of two versions, each
/// one the node runs: `cohort:job/host@0.1.0` and `cohort:job/blobs@0.2.0`,
/// both as empty instances (no fixture crate can build it: a job is built
/// against one WIT package). Encoded by hand, in the component binary
/// format: preamble, a type section with one empty instance type, and an
/// import section importing that type under both names.
fn two_version_component() -> Vec<u8> {
    const HOST_0_1: &[u8] = b"cohort:job/host@0.1.0";
    const BLOBS_0_2: &[u8] = b"cohort:job/blobs@0.2.0";
    // Magic, version 0x0d, layer 1 (a component, not a core module).
    let mut wasm = b"\0asm\x0d\x00\x01\x00".to_vec();
    // Type section (id 7): one type, `instance` (0x42) with no declarations.
    wasm.extend_from_slice(&[0x07, 0x03, 0x01, 0x42, 0x00]);
    // Import section (id 10): two imports, each a plain name (0x00, length,
    // bytes) of an instance (0x05) of type 0.
    let mut imports = vec![0x02];
    for name in [HOST_0_1, BLOBS_0_2] {
        imports.extend_from_slice(&[0x00, name.len() as u8]);
        imports.extend_from_slice(name);
        imports.extend_from_slice(&[0x05, 0x00]);
    }
    assert!(
        imports.len() < 0x80,
        "the section size fits one LEB128 byte"
    );
    wasm.extend_from_slice(&[0x0a, imports.len() as u8]);
    wasm.extend_from_slice(&imports);
    wasm
}

#[tokio::test]
async fn a_module_naming_two_versions_of_the_contract_is_refused() {
    let rt = runtime();
    let refused = rt.load(&two_version_component()).await.unwrap_err();
    assert_eq!(refused.code(), "module_job_version", "{refused}");
    let message = refused.to_string();
    assert!(
        message.contains("cohort:job/host@0.1.0") || message.contains("cohort:job/blobs@0.2.0"),
        "names one of the two: {message}"
    );
    assert_healthy(&rt).await;
}

// ---- Blobs: the `blobs` interface, through `fixture_blobs`

include!("runtime/blobs.rs");
use std::io::{Read as _, Write as _};

#[tokio::test]
async fn a_job_lists_reads_and_copies_its_input_blobs() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    // A few MiB, not a multiple of any chunk size.
    let data = pattern(1, (3 << 20) + 17);
    let parent = b"a parent's output".to_vec();
    let inputs = vec![dirs.input("input", &data), dirs.input("build/out", &parent)];
    let offset = (1 << 20) + 3;
    let steps = json!([
        {"op": "list"},
        {"op": "copy", "from": "input", "to": "copy.bin", "chunk": 5000},
        {"op": "copy", "from": "input", "to": "tail", "offset": offset},
        {"op": "read", "from": "input", "offset": offset},
        {"op": "read", "from": "input", "offset": data.len()},
        {"op": "read", "from": "build/out"},
    ]);
    let report = run_blobs(
        &rt,
        dirs.blobs(inputs, SPACE_BYTES_MAX),
        steps,
        JobLimits::default(),
    )
    .await;
    let results = step_results(&report);

    assert_eq!(
        results[0],
        json!({"inputs": [
            {"name": "input", "digest": hex(&sha256(&data)), "size": data.len()},
            {"name": "build/out", "digest": hex(&sha256(&parent)), "size": parent.len()},
        ]}),
        "the inputs in the order given"
    );
    // The guest saw the bytes the host holds, hashed on its own side.
    assert_eq!(
        results[1],
        json!({"bytes": data.len(), "sha256": hex(&sha256(&data))})
    );
    let tail = &data[offset..];
    assert_eq!(
        results[2],
        json!({"bytes": tail.len(), "sha256": hex(&sha256(tail))})
    );
    assert_eq!(
        results[3], results[2],
        "a read from the offset sees the same"
    );
    assert_eq!(
        results[4],
        json!({"bytes": 0, "sha256": hex(&sha256(b""))}),
        "opened at its end, an input reads empty"
    );
    assert_eq!(
        results[5],
        json!({"bytes": parent.len(), "sha256": hex(&sha256(&parent))})
    );

    // The outputs, in creation order, each a file of the blob space whose
    // bytes, digest and size agree.
    let names: Vec<&str> = report.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["copy.bin", "tail"]);
    for (output, expected) in report.outputs.iter().zip([&data[..], tail]) {
        assert_eq!(output.size, expected.len() as u64, "{}", output.name);
        assert_eq!(output.digest, sha256(expected), "{}", output.name);
        assert!(output.verified, "hashed by the node as it was written");
        assert_eq!(output.file.parent(), Some(dirs.space.path()));
        assert!(output_bytes(output) == expected, "{}'s file", output.name);
    }
    assert_eq!(dirs.space_files().len(), 2);
    // Dropped, the report takes its files with it.
    drop(report);
    assert_eq!(dirs.space_files(), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn opening_an_unknown_input_or_past_its_end_is_refused() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let data = pattern(2, 1000);
    let steps = json!([
        {"op": "read", "from": "nope"},
        {"op": "read", "from": "input", "offset": 1001},
        {"op": "copy", "from": "nope", "to": "never"},
        {"op": "read", "from": "input", "offset": 999},
    ]);
    let inputs = vec![dirs.input("input", &data)];
    let report = run_blobs(
        &rt,
        dirs.blobs(inputs, SPACE_BYTES_MAX),
        steps,
        JobLimits::default(),
    )
    .await;
    let results = step_results(&report);
    let unknown = step_error(&results[0]);
    assert!(
        unknown.contains(r#"no input blob named "nope""#) && unknown.contains("it has: input"),
        "says which it has: {unknown}"
    );
    let past = step_error(&results[1]);
    assert!(
        past.contains("offset 1001 is past the end") && past.contains("1000 bytes"),
        "{past}"
    );
    assert!(step_error(&results[2]).contains("nope"));
    assert_eq!(
        results[3],
        json!({"bytes": 1, "sha256": hex(&sha256(&data[999..]))})
    );
    assert!(report.outputs.is_empty(), "a refused copy created nothing");

    // A job given no blobs at all has none to open, and nowhere to write.
    let report = run_blobs(
        &rt,
        JobBlobs::default(),
        json!([{"op": "list"}, {"op": "read", "from": "input"}, {"op": "create", "to": "out"}]),
        JobLimits::default(),
    )
    .await;
    let results = step_results(&report);
    assert_eq!(results[0], json!({"inputs": []}));
    assert!(step_error(&results[1]).contains("none"), "{}", results[1]);
    assert!(
        step_error(&results[2]).contains("keeps no blobs"),
        "{}",
        results[2]
    );
}

#[tokio::test]
async fn bad_output_names_and_a_65th_output_are_refused() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let longest = "n".repeat(128);
    let too_long = "n".repeat(129);
    let mut steps = vec![
        json!({"op": "create", "to": ""}),
        json!({"op": "create", "to": ".hidden"}),
        json!({"op": "create", "to": "a/b"}),
        json!({"op": "create", "to": "é"}),
        json!({"op": "create", "to": too_long}),
        json!({"op": "create", "to": longest}),
    ];
    // 63 more: 64 outputs, the most a job may have.
    steps.extend((1..64).map(|i| json!({"op": "create", "to": format!("out-{i}.part_x")})));
    steps.push(json!({"op": "create", "to": "the-65th"}));
    // Creating one it has again is no new output: still allowed.
    steps.push(json!({"op": "write", "to": "out-1.part_x", "bytes": 3}));
    let report = run_blobs(
        &rt,
        dirs.blobs(Vec::new(), SPACE_BYTES_MAX),
        Value::Array(steps),
        JobLimits::default(),
    )
    .await;
    let results = step_results(&report);
    for refused in &results[..5] {
        assert!(
            step_error(refused).contains("output names are 1 to 128 bytes"),
            "{refused}"
        );
    }
    assert_eq!(results[5], json!({}), "128 bytes is a name");
    assert!(results[6..69].iter().all(|r| *r == json!({})));
    assert!(
        step_error(&results[69]).contains("at most 64 outputs"),
        "{}",
        results[69]
    );
    assert_eq!(results[70], json!({"bytes": 3}));

    assert_eq!(report.outputs.len(), 64);
    assert_eq!(report.outputs[0].name, longest);
    assert!(report.outputs.iter().all(|o| o.name != "the-65th"));
    let again = &report.outputs[1];
    assert_eq!((again.name.as_str(), again.size), ("out-1.part_x", 3));
    assert_eq!(output_bytes(again), b"xxx");
    assert_eq!(dirs.space_files().len(), 64, "one file per output");
}

#[tokio::test]
async fn writing_past_the_output_ceiling_fails_the_attempt_though_the_job_went_on() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let limit = 1 << 20;
    // The second write fails; the fixture records that and returns
    // normally, as a careless job would.
    let steps = json!([
        {"op": "write", "to": "first", "bytes": 512 << 10},
        {"op": "write", "to": "second", "bytes": 600 << 10},
        {"op": "list"},
    ]);
    let report = run_blobs(
        &rt,
        dirs.blobs(Vec::new(), limit),
        steps,
        JobLimits::default(),
    )
    .await;
    match failure(&report) {
        JobFailure::OutputTooLarge {
            size_bytes,
            limit_bytes,
        } => {
            assert_eq!(*limit_bytes, limit);
            assert!(*size_bytes > limit, "{size_bytes}");
            assert!(*size_bytes <= (512 + 600) << 10, "{size_bytes}");
        }
        other => panic!("expected output_too_large, got {other:?}"),
    }
    assert_eq!(failure(&report).code(), "output_too_large");
    assert!(report.outputs.is_empty());
    assert_eq!(dirs.space_files(), Vec::<PathBuf>::new(), "nothing left");
    assert_healthy(&rt).await;

    // Up to the ceiling, exactly, is allowed.
    let steps = json!([
        {"op": "write", "to": "first", "bytes": 512 << 10},
        {"op": "write", "to": "second", "bytes": 512 << 10},
    ]);
    let report = run_blobs(
        &rt,
        dirs.blobs(Vec::new(), limit),
        steps,
        JobLimits::default(),
    )
    .await;
    assert_eq!(step_results(&report).len(), 2);
    let total: u64 = report.outputs.iter().map(|o| o.size).sum();
    assert_eq!(total, limit);
}

#[tokio::test]
async fn a_job_that_fails_after_writing_outputs_leaves_none() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    let data = pattern(3, 2 << 20);
    let steps = json!([
        {"op": "copy", "from": "input", "to": "half-done"},
        {"op": "write", "to": "more", "bytes": 3 << 20},
        {"op": "fail", "code": "on_purpose"},
    ]);
    let inputs = vec![dirs.input("input", &data)];
    let report = run_blobs(
        &rt,
        dirs.blobs(inputs, SPACE_BYTES_MAX),
        steps,
        JobLimits::default(),
    )
    .await;
    match failure(&report) {
        JobFailure::JobError { code, message } => {
            assert_eq!(code, "on_purpose");
            assert!(message.contains("step 3 of 3"), "{message}");
        }
        other => panic!("expected the job's error, got {other:?}"),
    }
    assert!(report.outputs.is_empty());
    assert_eq!(
        dirs.space_files(),
        Vec::<PathBuf>::new(),
        "the outputs' files are removed"
    );
}

#[tokio::test]
async fn creating_an_output_again_keeps_only_the_second() {
    let rt = runtime();
    let dirs = BlobDirs::new();
    // 1500 bytes allowed: the second 1000 fit only if the first 1000 no
    // longer count.
    let steps = json!([
        {"op": "write", "to": "same", "bytes": 1000, "byte": b'a'},
        {"op": "write", "to": "other", "bytes": 10},
        {"op": "write", "to": "same", "bytes": 1000, "byte": b'b'},
    ]);
    let report = run_blobs(
        &rt,
        dirs.blobs(Vec::new(), 1500),
        steps,
        JobLimits::default(),
    )
    .await;
    assert_eq!(
        step_results(&report),
        [
            json!({"bytes": 1000}),
            json!({"bytes": 10}),
            json!({"bytes": 1000})
        ]
    );
    let names: Vec<&str> = report.outputs.iter().map(|o| o.name.as_str()).collect();
    assert_eq!(names, ["same", "other"], "kept where it was first created");
    let same = &report.outputs[0];
    assert_eq!(output_bytes(same), vec![b'b'; 1000]);
    assert_eq!(same.digest, sha256(&[b'b'; 1000]));
    assert_eq!(same.size, 1000);
    assert_eq!(dirs.space_files().len(), 2, "the first `same` is gone");
}

#[tokio::test]
async fn a_job_copies_a_blob_three_times_larger_than_its_memory() {
    const PIECE_BYTES: usize = 1 << 20;
    const PIECES: u64 = 96;
    const MEMORY_BYTES: u64 = 32 << 20;
    let rt = runtime();
    let dirs = BlobDirs::new();
    // 96 MiB, written and hashed a piece at a time: never whole in memory.
    let path = dirs.inputs.path().join("large");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut hasher = sha2::Sha256::new();
    for piece in 0..PIECES {
        let bytes = pattern(100 + piece, PIECE_BYTES);
        hasher.update(&bytes);
        file.write_all(&bytes).unwrap();
    }
    file.flush().unwrap();
    drop(file);
    let size = PIECES * PIECE_BYTES as u64;
    let digest: [u8; 32] = hasher.finalize().into();
    let input = InputBlob {
        name: "input".into(),
        digest,
        size,
        path,
    };
    let limits = JobLimits {
        memory_bytes: MEMORY_BYTES,
        ..JobLimits::default()
    };
    let report = run_blobs(
        &rt,
        dirs.blobs(vec![input], SPACE_BYTES_MAX),
        json!([{"op": "copy", "from": "input", "to": "copy"}]),
        limits,
    )
    .await;
    assert_eq!(
        step_results(&report),
        [json!({"bytes": size, "sha256": hex(&digest)})]
    );
    assert!(
        report.memory_peak_bytes <= MEMORY_BYTES,
        "the job's memory stayed within its limit: {}",
        report.memory_peak_bytes
    );
    let output = &report.outputs[0];
    assert_eq!((output.size, output.digest), (size, digest));
    // The file holds those bytes (hashed again, a piece at a time).
    let mut file = std::fs::File::open(&output.file).unwrap();
    let mut hasher = sha2::Sha256::new();
    let mut buffer = vec![0; PIECE_BYTES];
    loop {
        let read = file.read(&mut buffer).unwrap();
        if read == 0 {
            break;
        }
        hasher.update(&buffer[..read]);
    }
    assert_eq!(<[u8; 32]>::from(hasher.finalize()), digest);
}
