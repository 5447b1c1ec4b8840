//! Property-test helpers shared by the master's tests and the host's
//! (the host enables them with the `testing` feature; never built into the
//! master component).

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;

/// Damage as disks and networks do it, at positions relative to the input.
#[derive(Debug, Clone)]
pub enum Damage {
    /// Flip one bit of one byte.
    Flip(Index, u8),
    /// Overwrite one byte.
    Set(Index, u8),
    /// Cut the bytes short.
    Truncate(Index),
    /// Insert bytes.
    Insert(Index, Vec<u8>),
    /// Remove up to this many bytes.
    Remove(Index, usize),
}

/// One to three kinds of damage.
pub fn damage() -> impl Strategy<Value = Vec<Damage>> {
    let one = prop_oneof![
        4 => (any::<Index>(), 0..8u8).prop_map(|(at, bit)| Damage::Flip(at, bit)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Damage::Set(at, byte)),
        1 => any::<Index>().prop_map(Damage::Truncate),
        1 => (any::<Index>(), vec(any::<u8>(), 1..12)).prop_map(|(at, b)| Damage::Insert(at, b)),
        1 => (any::<Index>(), 1..8usize).prop_map(|(at, n)| Damage::Remove(at, n)),
    ];
    vec(one, 1..4)
}

/// `bytes` after `damage`.
pub fn apply_damage(mut bytes: Vec<u8>, damage: &[Damage]) -> Vec<u8> {
    for d in damage {
        let len = bytes.len();
        if len == 0 {
            break;
        }
        match d {
            Damage::Flip(at, bit) => bytes[at.index(len)] ^= 1 << bit,
            Damage::Set(at, byte) => bytes[at.index(len)] = *byte,
            Damage::Truncate(at) => bytes.truncate(at.index(len)),
            Damage::Insert(at, more) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, more.iter().copied());
            }
            Damage::Remove(at, n) => {
                let at = at.index(len);
                bytes.drain(at..(at + n).min(len));
            }
        }
    }
    bytes
}

/// postcard's unsigned varint (LEB128).
pub fn varint(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// `bytes` restored through [`Machine::init_part`](crate::Machine::init_part),
/// `size` bytes a part.
pub fn restore_in_parts(bytes: &[u8], size: usize) -> Result<crate::Master, crate::Rejection> {
    let mut machine = crate::Machine::default();
    let order = crate::Order::Priority;
    let mut parts = bytes.chunks(size).peekable();
    if parts.peek().is_none() {
        machine.init_part(&[], true, order)?;
    }
    while let Some(part) = parts.next() {
        machine.init_part(part, parts.peek().is_none(), order)?;
    }
    Ok(machine.master().clone())
}

/// Decides `command` at `now` on `master` and applies the events decided,
/// as the host does; the reply.
pub fn run(
    master: &mut crate::Master,
    now: crate::Millis,
    command: crate::Command,
) -> Result<crate::Reply, crate::Rejection> {
    let decision = master.decide(now, &command)?;
    for event in &decision.events {
        master.apply(event);
    }
    Ok(decision.reply)
}

/// Checks that `master` is what its `journal` replays to (each event
/// encoded and decoded on the way) and what its snapshot restores to,
/// whole and in parts.
///
/// # Panics
///
/// If one of them differs.
pub fn assert_journal_and_snapshot_agree(master: &crate::Master, journal: &[crate::Event]) {
    let mut replayed = crate::Master::new();
    for event in journal {
        let bytes = crate::encode(event);
        replayed.apply(&crate::decode_event(&bytes).expect("an encoded event decodes"));
    }
    assert_eq!(&replayed, master, "the journal replays to the master");
    let snapshot = master.snapshot();
    assert_eq!(snapshot[0], crate::master::SNAPSHOT_VERSION);
    let restored = crate::Master::restore(&snapshot).expect("its snapshot restores");
    assert_eq!(&restored, master, "the snapshot restores to the master");
    let in_parts = restore_in_parts(&snapshot, 5).expect("its snapshot restores in parts");
    assert_eq!(
        &in_parts, master,
        "the snapshot restores in parts to the master"
    );
}

/// Runs `command` at `now` as the host does: decided, then each event
/// applied and appended to `journal`; the events.
pub fn decide_and_apply(
    master: &mut crate::Master,
    journal: &mut Vec<crate::Event>,
    now: crate::Millis,
    command: &crate::Command,
) -> Result<Vec<crate::Event>, crate::Rejection> {
    let decision = master.decide(now, command)?;
    for event in &decision.events {
        master.apply(event);
        journal.push(event.clone());
    }
    Ok(decision.events)
}
