// The blob tests' helpers, shared by `tests/runtime.rs` (in-thread) and
// `tests/runtime_process.rs` (sandbox processes): the fixture
// `fixture_blobs` run on scripted steps, with input files and a blob space
// of their own.

use cohort::runtime::JobReport;
use cohort::runtime::job_blobs::{BlobSpace, InputBlob, JobBlobs, WrittenBlob};
use serde_json::{Value, json};
use sha2::Digest as _;
use std::path::PathBuf;

/// The output ceiling of blob tests that do not test it.
const SPACE_BYTES_MAX: u64 = 256 << 20;

/// A blob job's files: its input blobs, and its blob space (where its
/// outputs are written), each a directory of its own so that a test can
/// see every file the attempt left behind.
struct BlobDirs {
    inputs: tempfile::TempDir,
    space: tempfile::TempDir,
}

impl BlobDirs {
    fn new() -> Self {
        Self {
            inputs: tempfile::tempdir().unwrap(),
            space: tempfile::tempdir().unwrap(),
        }
    }

    /// Input blob `name` holding `bytes`, its file written as a store
    /// would (named by its digest).
    fn input(&self, name: &str, bytes: &[u8]) -> InputBlob {
        let digest = sha256(bytes);
        let path = self.inputs.path().join(hex(&digest));
        std::fs::write(&path, bytes).unwrap();
        InputBlob {
            name: name.into(),
            digest,
            size: bytes.len() as u64,
            path,
        }
    }

    /// What an attempt gets: `inputs`, and this blob space with a ceiling
    /// of `bytes_max` over all outputs.
    fn blobs(&self, inputs: Vec<InputBlob>, bytes_max: u64) -> JobBlobs {
        JobBlobs {
            inputs,
            space: Some(BlobSpace {
                dir: self.space.path().to_path_buf(),
                bytes_max,
            }),
        }
    }

    /// Every file in the blob space.
    fn space_files(&self) -> Vec<PathBuf> {
        (std::fs::read_dir(self.space.path()).unwrap())
            .map(|entry| entry.unwrap().path())
            .collect()
    }
}

/// Runs `fixture_blobs` on `steps` with `blobs`.
#[allow(dead_code)]
async fn run_blobs(rt: &Runtime, blobs: JobBlobs, steps: Value, limits: JobLimits) -> JobReport {
    let module = load(rt, "fixture_blobs").await;
    let request = JobRequest {
        input: serde_json::to_vec(&json!({ "steps": steps })).unwrap(),
        limits,
        blobs,
        ..JobRequest::default()
    };
    rt.run(&module, request).await
}

/// The results of a successful `fixture_blobs` attempt, one per step.
fn step_results(report: &JobReport) -> Vec<Value> {
    let output = match &report.outcome {
        Ok(output) => output,
        Err(failure) => panic!("the job failed: {failure:?}; log: {}", log_text(report)),
    };
    let output: Value = serde_json::from_slice(output).unwrap();
    output["steps"].as_array().expect("a list of steps").clone()
}

/// A step's refusal: its `error` text.
#[allow(dead_code)]
fn step_error(result: &Value) -> &str {
    result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {result}"))
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

fn hex(digest: &[u8; 32]) -> String {
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// `len` bytes that differ from offset to offset (an xorshift stream from
/// `seed`), so that a read from the wrong place cannot pass for the right
/// one.
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// An output's bytes, read back from its file.
#[allow(dead_code)]
fn output_bytes(output: &WrittenBlob) -> Vec<u8> {
    std::fs::read(&output.file).unwrap()
}

