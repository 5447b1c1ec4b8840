//! The master a component instance holds, behind the functions of
//! `wit/master.wit`'s world: what a master component crate's exports call.
//!
//! A component crate (the built-in `host/master-machine/component`, or a custom
//! build such as `examples/fifo-master`) generates the world's bindings and
//! forwards each export here, choosing its [`Order`] at `init`. Keeping the
//! instance here means every master build runs exactly this code.

use crate::{Machine, Millis, Order, Rejection};
use std::cell::RefCell;

thread_local! {
    static MACHINE: RefCell<Machine> = RefCell::new(Machine::default());
}

/// `init`: starts empty or from a snapshot, lining jobs up by `order`.
pub fn init(snapshot: Option<&[u8]>, order: Order) -> Result<(), Rejection> {
    let machine = Machine::init_ordered(snapshot, order)?;
    MACHINE.with(|m| *m.borrow_mut() = machine);
    Ok(())
}

/// `init-part`: reads the next part of a snapshot; the last starts from
/// them, lining jobs up by `order`.
pub fn init_part(part: &[u8], last: bool, order: Order) -> Result<(), Rejection> {
    MACHINE.with(|m| m.borrow_mut().init_part(part, last, order))
}

/// `decide`: the encoded events and reply.
pub fn decide(now: Millis, command: &[u8]) -> Result<(Vec<Vec<u8>>, Vec<u8>), Rejection> {
    MACHINE.with(|m| m.borrow().decide(now, command))
}

/// `apply`: the encoded effects.
pub fn apply(events: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, Rejection> {
    MACHINE.with(|m| m.borrow_mut().apply(events))
}

/// `snapshot`.
pub fn snapshot() -> Vec<u8> {
    MACHINE.with(|m| m.borrow().snapshot())
}

/// `snapshot-part`: the next part of the snapshot (see
/// [`Machine::snapshot_part`]).
pub fn snapshot_part(bytes_max: u32) -> Vec<u8> {
    MACHINE.with(|m| m.borrow_mut().snapshot_part(bytes_max as usize))
}

/// `query`: the encoded answer.
pub fn query(now: Millis, query: &[u8]) -> Result<Vec<u8>, Rejection> {
    MACHINE.with(|m| m.borrow().query(now, query))
}

/// Implements the `master-parts` world's `Guest` for `$component` over this
/// module, lining jobs up by `$order`. Call it in a component crate after
/// `wit_bindgen::generate!` made the world's bindings (`Guest`,
/// `Decision`, `Rejection`), then `export!($component)`.
#[macro_export]
macro_rules! guest_over_instance {
    ($component:ident, $order:expr) => {
        fn rejection(r: $crate::Rejection) -> Rejection {
            Rejection {
                code: r.code.as_str().to_string(),
                message: r.message,
            }
        }

        impl Guest for $component {
            fn init(snapshot: Option<Vec<u8>>) -> Result<(), Rejection> {
                $crate::instance::init(snapshot.as_deref(), $order).map_err(rejection)
            }

            fn decide(now_ms: u64, command: Vec<u8>) -> Result<Decision, Rejection> {
                let (events, reply) =
                    $crate::instance::decide(now_ms, &command).map_err(rejection)?;
                Ok(Decision { events, reply })
            }

            fn apply(events: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Rejection> {
                $crate::instance::apply(&events).map_err(rejection)
            }

            fn snapshot() -> Vec<u8> {
                $crate::instance::snapshot()
            }

            fn init_part(part: Vec<u8>, last: bool) -> Result<(), Rejection> {
                $crate::instance::init_part(&part, last, $order).map_err(rejection)
            }

            fn snapshot_part(bytes_max: u32) -> Vec<u8> {
                $crate::instance::snapshot_part(bytes_max)
            }

            fn query(now_ms: u64, query: Vec<u8>) -> Result<Vec<u8>, Rejection> {
                $crate::instance::query(now_ms, &query).map_err(rejection)
            }
        }
    };
}
