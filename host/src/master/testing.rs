//! What the tests of the master's shadow and standby share: a native
//! master's options, and events a master decided.

use super::core::{Core, CoreKind, NativeCore};
use super::recovery::MasterOptions;
use cohort_master::{Command, Config, JobSpec, RequestId, encode};

/// Options of a native master in `dir`.
pub fn native_options(dir: &std::path::Path, snapshot_every: u64, shadow: bool) -> MasterOptions {
    MasterOptions {
        data_dir: dir.to_path_buf(),
        cache_dir: dir.to_path_buf(),
        config: Config::default(),
        core: CoreKind::Native,
        snapshot_every,
        live_workers: Vec::new(),
        component: None,
        shadow,
    }
}

/// Decides and applies `count` submissions (and a tick after each) on
/// `master`: the events it would propose.
pub fn decide(master: &mut NativeCore, from: u64, count: u64) -> Vec<Vec<u8>> {
    let mut events = Vec::new();
    for seq in from..from + count {
        let submit = Command::Submit {
            spec: JobSpec {
                module: [3; 32],
                input: seq.to_le_bytes().to_vec(),
                timeout_ms: 1_000,
                memory_bytes: None,
                max_attempts: 2,
                priority: (seq % 3) as i32,
                idempotency_key: None,
            },
            request: RequestId { origin: 1, seq },
            options: Default::default(),
        };
        for command in [submit, Command::Tick] {
            let (decided, _) = master
                .decide(1_800_000_000_000 + seq, encode(&command))
                .unwrap()
                .unwrap();
            master.apply(&decided).unwrap().unwrap();
            events.extend(decided);
        }
    }
    events
}
