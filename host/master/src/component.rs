//! The component's exports (`wit/master.wit`, world `master`): one
//! [`Machine`] per instance, behind the byte-level functions.

use std::cell::RefCell;

use crate::Machine;

wit_bindgen::generate!({
    path: "../../wit/master.wit",
    world: "master",
});

thread_local! {
    static MACHINE: RefCell<Machine> = RefCell::new(Machine::default());
}

fn rejection(r: crate::Rejection) -> Rejection {
    Rejection {
        code: r.code,
        message: r.message,
    }
}

struct Component;

impl Guest for Component {
    fn init(snapshot: Option<Vec<u8>>) -> Result<(), Rejection> {
        let machine = Machine::init(snapshot.as_deref()).map_err(rejection)?;
        MACHINE.with(|m| *m.borrow_mut() = machine);
        Ok(())
    }

    fn decide(now_ms: u64, command: Vec<u8>) -> Result<Decision, Rejection> {
        MACHINE.with(|m| {
            let (events, reply) = m.borrow().decide(now_ms, &command).map_err(rejection)?;
            Ok(Decision { events, reply })
        })
    }

    fn apply(events: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Rejection> {
        MACHINE.with(|m| m.borrow_mut().apply(&events).map_err(rejection))
    }

    fn snapshot() -> Vec<u8> {
        MACHINE.with(|m| m.borrow().snapshot())
    }

    fn query(now_ms: u64, query: Vec<u8>) -> Result<Vec<u8>, Rejection> {
        MACHINE.with(|m| m.borrow().query(now_ms, &query).map_err(rejection))
    }
}

export!(Component);
