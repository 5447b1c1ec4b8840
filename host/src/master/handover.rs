//! Checking a master build and handing the running state to it.
//!
//! [`super::upgrade`] says which build runs and how that is journaled; this
//! module does what a switch does to the running instance: it checks an
//! uploaded component before anything is stored ([`check_component`]),
//! starts an instance from a state ([`start`]), hands a running master's
//! state over ([`hand_over`]) and replays journaled events into it
//! ([`replay`]). The live switch, every replay of a switch record and a
//! recovery all go through these same functions, so they cannot disagree.
//!
//! Every refusal carries one of the upgrade's codes ([`ErrorCode::InvalidMaster`]
//! and the rest); nothing here touches the journal or the disk but the
//! compile cache.

use super::core::{Core, CoreResult, MasterComponent};
use super::upgrade::ALLOWED_IMPORT_PREFIXES;
use crate::codes::ErrorCode;
use crate::limits::{MASTER_BYTES_MAX, REPLAY_CHUNK};
use cohort_master::Rejection;
use std::path::Path;

fn refuse(code: ErrorCode, message: impl Into<String>) -> Rejection {
    Rejection::new(code.as_str(), message)
}

/// Checks an uploaded master before anything is stored: it compiles, has
/// only allowed imports, exports the master world and starts empty.
/// Blocking (it compiles, through `data_dir`'s compile cache if given, so
/// a later take-over loads the artifact instead of compiling again).
pub fn check_component(wasm: &[u8], data_dir: Option<&Path>) -> Result<MasterComponent, Rejection> {
    if wasm.len() > MASTER_BYTES_MAX {
        return Err(refuse(
            ErrorCode::InvalidMaster,
            format!(
                "{} bytes; a master is at most {MASTER_BYTES_MAX}",
                wasm.len()
            ),
        ));
    }
    let component = MasterComponent::compile(wasm, data_dir).map_err(|e| {
        refuse(
            ErrorCode::InvalidMaster,
            format!("not a Wasm component this node can compile: {e:#}"),
        )
    })?;
    if let Some(import) = component
        .imports()
        .into_iter()
        .find(|name| !ALLOWED_IMPORT_PREFIXES.iter().any(|p| name.starts_with(p)))
    {
        return Err(refuse(
            ErrorCode::MasterNondeterministicImport,
            format!(
                "the component imports `{import}`; a master must be deterministic, so it may \
                 import only {}",
                ALLOWED_IMPORT_PREFIXES.join(", ")
            ),
        ));
    }
    start(&component, None, ErrorCode::MasterTraps)?;
    Ok(component)
}

/// A new instance of `component` from `state`, its failures as the
/// upgrade's refusals (`code` for a trap or a refused state).
pub fn start(
    component: &MasterComponent,
    state: Option<&[u8]>,
    code: ErrorCode,
) -> Result<Box<dyn Core>, Rejection> {
    let linked = component.link().map_err(|e| {
        refuse(
            ErrorCode::MasterWrongWorld,
            format!("the component does not export the master world `cohort:master/master`: {e:#}"),
        )
    })?;
    let what = if state.is_some() {
        "from the running master's state"
    } else {
        "empty"
    };
    match component.init(linked, state) {
        Ok(Ok(core)) => Ok(Box::new(core)),
        Ok(Err(rejection)) => Err(refuse(code, format!("`init` {what} refused: {rejection}"))),
        Err(trap) => Err(refuse(code, format!("`init` {what} trapped: {trap:#}"))),
    }
}

/// Hands `core`'s state to a new instance of `component`: what the live
/// switch does, and what every replay of a switch record does again.
pub fn hand_over(core: &mut dyn Core, component: &MasterComponent) -> CoreResult<Box<dyn Core>> {
    let state = core.snapshot()?;
    Ok(start(
        component,
        Some(&state),
        ErrorCode::MasterSnapshotUnreadable,
    ))
}

/// Applies `events` in chunks; a rejection or trap is the upgrade's
/// [`ErrorCode::MasterReplayDiverged`].
pub fn replay(core: &mut dyn Core, events: &[Vec<u8>]) -> Result<(), Rejection> {
    for chunk in events.chunks(REPLAY_CHUNK) {
        match core.apply(chunk) {
            Ok(Ok(_)) => {}
            Ok(Err(rejection)) => {
                return Err(refuse(
                    ErrorCode::MasterReplayDiverged,
                    format!("the new master refused a journaled event: {rejection}"),
                ));
            }
            Err(trap) => {
                return Err(refuse(
                    ErrorCode::MasterReplayDiverged,
                    format!("the new master trapped replaying the journal: {trap:#}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(name: &str) -> Vec<u8> {
        std::fs::read(format!("{}/{name}.wasm", env!("COHORT_GUESTS_DIR"))).unwrap()
    }

    fn refusal(wasm: &[u8]) -> String {
        match check_component(wasm, None) {
            Ok(_) => "accepted".into(),
            Err(rejection) => rejection.code.as_str().to_string(),
        }
    }

    #[test]
    fn the_built_in_and_the_example_master_pass_the_checks() {
        for wasm in [crate::guests::MASTER.to_vec(), guest("fifo_master")] {
            let component = check_component(&wasm, None).unwrap();
            // Each reads the other's state: they share the state format.
            let mut core = start(&component, None, ErrorCode::MasterTraps).unwrap();
            let state = core.snapshot().unwrap();
            let builtin = MasterComponent::load(None).unwrap();
            let mut handed = hand_over(core.as_mut(), &builtin).unwrap().unwrap();
            assert_eq!(handed.snapshot().unwrap(), state);
        }
    }

    #[test]
    fn broken_masters_are_refused_by_name() {
        assert_eq!(
            refusal(b"\0asm not really"),
            ErrorCode::InvalidMaster.as_str()
        );
        assert_eq!(
            refusal(&guest("fixture_wrong_world")),
            ErrorCode::MasterWrongWorld.as_str()
        );
        assert_eq!(
            refusal(&guest("fixture_master_trap")),
            ErrorCode::MasterTraps.as_str()
        );
        assert_eq!(
            refusal(&guest("fixture_master_clock")),
            ErrorCode::MasterNondeterministicImport.as_str()
        );
        // A job component imports the job host's interfaces.
        assert_eq!(
            refusal(&guest("fixture_echo")),
            ErrorCode::MasterNondeterministicImport.as_str()
        );
        // Starts empty, but cannot read a running master's state.
        let stale = check_component(&guest("fixture_master_stale"), None).unwrap();
        let builtin = MasterComponent::load(None).unwrap();
        let mut running = builtin.instantiate(None).unwrap().unwrap();
        let Err(refused) = hand_over(&mut running, &stale).unwrap() else {
            panic!("a master that reads no snapshot took the state");
        };
        assert_eq!(refused.code, ErrorCode::MasterSnapshotUnreadable.as_str());
    }
}
