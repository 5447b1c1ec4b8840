//! A network partition seam, for fault tests.
//!
//! A node started with the hidden `--fault-partition FILE` flag reads FILE
//! every [`POLL`]: each line names an address (`host:port`, the HTTP and
//! gossip address of another node). While an address is listed, this node
//! drops gossip to and from it (in [`crate::security::gossip`]) and fails its own node-to-node HTTP requests
//! to it at once, as if the network between them were cut. Listing each
//! side in the other's file makes a symmetric partition; emptying the files
//! heals it. Without the flag nothing is ever blocked and the check is one
//! atomic load.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{OnceLock, RwLock};
use std::time::Duration;

/// How often the partition file is read.
pub const POLL: Duration = Duration::from_millis(100);

static BLOCKED: OnceLock<RwLock<BTreeSet<String>>> = OnceLock::new();

/// Starts following the partition file `file`. The file is read once
/// before this returns, so a node started cut off never sends or accepts
/// a datagram the file forbids (it would learn of the others through it).
pub fn install(file: PathBuf) {
    let blocked = BLOCKED.get_or_init(Default::default);
    apply(blocked, &std::fs::read_to_string(&file).unwrap_or_default());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(POLL).await;
            apply(
                blocked,
                &tokio::fs::read_to_string(&file).await.unwrap_or_default(),
            );
        }
    });
}

/// Makes the addresses listed in `text` (one a line) the blocked ones.
fn apply(blocked: &RwLock<BTreeSet<String>>, text: &str) {
    let listed: BTreeSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(String::from)
        .collect();
    let mut current = blocked.write().unwrap_or_else(|e| e.into_inner());
    if *current != listed {
        crate::events::emit!(
            warn,
            crate::events::PARTITION,
            cut_off = ?listed,
            "fault injection: cut off"
        );
        *current = listed;
    }
}

/// Whether traffic to and from `address` (`host:port`) is cut off.
pub fn blocked(address: &str) -> bool {
    BLOCKED.get().is_some_and(|blocked| {
        blocked
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(address)
    })
}

/// Whether requests to `url` (`http://host:port...`) are cut off.
pub fn blocks_url(url: &str) -> bool {
    let rest = url.strip_prefix("http://").unwrap_or(url);
    let authority = rest.split('/').next().unwrap_or(rest);
    blocked(authority)
}
