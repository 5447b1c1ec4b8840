//! Where the master's logic runs: in its Wasm component (production) or
//! linked natively (to compare the two in tests).
//!
//! Both backends speak the byte-level interface of `wit/master.wit`, so the
//! service above them cannot tell them apart, and a scenario replayed
//! through each must give identical bytes.
//!
//! The component runs in its own engine (no pooling, no epoch interruption:
//! it is trusted code built with this binary, and its calls are short). It
//! must stay pure, so every import it declares is linked to a trap: the
//! first attempt to read a clock, a file or randomness would fail loudly.

use crate::limits::{MASTER_HOSTCALL_BYTES_MAX, SNAPSHOT_PART_BYTES};
use crate::runtime::Digest;
use crate::runtime::engine::engine_fingerprint;
use crate::runtime::module::DiskCache;
use cohort_master::{Machine, Millis, Rejection};
use std::path::Path;
use wasmtime::component::{Component, Func, Linker, TypedFunc};
use wasmtime::{Config, Engine, Store};

use super::master_world;
use super::upgrade::{Build, MasterStore};

/// A master call either returns the master's answer (possibly a rejection),
/// or fails because the backend itself failed (a trap: a bug in the master).
pub type CoreResult<T> = anyhow::Result<Result<T, Rejection>>;

/// The master's byte-level interface (see `wit/master.wit`).
pub trait Core: Send {
    /// `decide`: encoded events and encoded reply.
    fn decide(&mut self, now: Millis, command: Vec<u8>) -> CoreResult<(Vec<Vec<u8>>, Vec<u8>)>;
    /// `apply`: encoded effects.
    fn apply(&mut self, events: &[Vec<u8>]) -> CoreResult<Vec<Vec<u8>>>;
    /// `snapshot` (through `snapshot-part` when the component has it).
    fn snapshot(&mut self) -> anyhow::Result<Vec<u8>>;
    /// `query`: the encoded answer.
    fn query(&mut self, now: Millis, query: Vec<u8>) -> CoreResult<Vec<u8>>;
    /// Bytes of the component's linear memory (0 for the native backend).
    /// Wasm memory grows and never shrinks, so this is the high-water
    /// mark of what the master's state, and the snapshots it wrote, took.
    fn memory_bytes(&self) -> u64 {
        0
    }
}

/// Which backend runs the master.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CoreKind {
    /// The embedded Wasm component (the default).
    Wasm,
    /// The same logic linked natively (for comparison and debugging).
    Native,
}

/// The master linked natively.
#[derive(Debug)]
pub struct NativeCore(Machine);

impl NativeCore {
    /// A native master, empty or from a snapshot.
    pub fn new(snapshot: Option<&[u8]>) -> Result<Self, Rejection> {
        Machine::init(snapshot).map(Self)
    }
}

impl Core for NativeCore {
    fn decide(&mut self, now: Millis, command: Vec<u8>) -> CoreResult<(Vec<Vec<u8>>, Vec<u8>)> {
        Ok(self.0.decide(now, &command))
    }
    fn apply(&mut self, events: &[Vec<u8>]) -> CoreResult<Vec<Vec<u8>>> {
        Ok(self.0.apply(events))
    }
    fn snapshot(&mut self) -> anyhow::Result<Vec<u8>> {
        Ok(self.0.snapshot())
    }
    fn query(&mut self, now: Millis, query: Vec<u8>) -> CoreResult<Vec<u8>> {
        Ok(self.0.query(now, &query))
    }
}

/// The compiled master component, ready to instantiate.
#[derive(Clone)]
pub struct MasterComponent {
    engine: Engine,
    component: Component,
    linker: Linker<MemoryGauge>,
}

impl std::fmt::Debug for MasterComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterComponent").finish_non_exhaustive()
    }
}

impl MasterComponent {
    /// Compiles the embedded master component, reusing a compiled artifact
    /// from `cache_dir`'s compile cache when one matches this engine.
    pub fn load(cache_dir: Option<&Path>) -> anyhow::Result<Self> {
        Self::compile(crate::guests::MASTER, cache_dir)
    }

    /// Compiles `build`: the embedded master, or an uploaded one from
    /// `data_dir`'s master store (checked against its digest), through the
    /// compile cache in `cache_dir`.
    pub fn load_build(data_dir: &Path, cache_dir: &Path, build: Build) -> anyhow::Result<Self> {
        let Build::Uploaded(digest) = build else {
            return Self::load(Some(cache_dir));
        };
        let wasm = MasterStore::new(data_dir).read(&digest)?;
        Self::compile(&wasm, Some(cache_dir))
    }

    /// Compiles another build of the master (`cohort replay --compare`, an
    /// upload): the same world, its imports trapping as the embedded
    /// one's do.
    pub fn from_bytes(wasm: &[u8]) -> anyhow::Result<Self> {
        Self::compile(wasm, None)
    }

    /// Compiles a master, through `cache_dir`'s compile cache if given.
    pub fn compile(wasm: &[u8], cache_dir: Option<&Path>) -> anyhow::Result<Self> {
        let engine = Self::engine()?;
        let component = match cache_dir {
            Some(dir) => load_cached(&engine, dir, wasm)?,
            None => Component::new(&engine, wasm)?,
        };
        Self::with(engine, component)
    }

    /// The names of the interfaces and functions the component imports.
    pub fn imports(&self) -> Vec<String> {
        (self.component.component_type().imports(&self.engine))
            .map(|(name, _)| name.to_string())
            .collect()
    }

    fn engine() -> anyhow::Result<Engine> {
        let mut config = Config::new();
        config.wasm_component_model(true);
        Ok(Engine::new(&config)?)
    }

    fn with(engine: Engine, component: Component) -> anyhow::Result<Self> {
        let mut linker = Linker::new(&engine);
        linker.define_unknown_imports_as_traps(&component)?;
        Ok(Self {
            engine,
            component,
            linker,
        })
    }

    /// A new instance, initialized empty or from a snapshot.
    pub fn instantiate(&self, snapshot: Option<&[u8]>) -> CoreResult<WasmCore> {
        self.init(self.link()?, snapshot)
    }

    /// A new instance, not yet initialized: fails if the component does
    /// not export the master world.
    pub fn link(&self) -> anyhow::Result<Linked> {
        let mut store = Store::new(&self.engine, MemoryGauge::default());
        store.limiter(|gauge| gauge);
        // Its snapshot is one value returned to the host: with a million
        // finished jobs it passed wasmtime's default bound on what a guest
        // may hand the host in one call (128 MiB), and the master stopped
        // in a soak. The master is the node's own component, not a user's:
        // its snapshot is bounded by the job and history caps instead.
        store.set_hostcall_fuel(MASTER_HOSTCALL_BYTES_MAX);
        let instance = self.linker.instantiate(&mut store, &self.component)?;
        let master = master_world::Master::new(&mut store, &instance)?;
        // `master-parts`' exports beyond `master`, when the build has them.
        let part = instance
            .get_typed_func::<(u32,), (Vec<u8>,)>(&mut store, "snapshot-part")
            .ok();
        // One with another type is no `init-part` of this world: ignored.
        let init_part = instance
            .get_func(&mut store, "init-part")
            .filter(|init_part| {
                (init_part.typed::<(&[u8], bool), (Result<(), RejectionRecord>,)>(&store)).is_ok()
            });
        Ok(Linked {
            store,
            master,
            part,
            init_part,
        })
    }

    /// Runs `init` on a linked instance, empty or from a snapshot.
    pub fn init(&self, linked: Linked, snapshot: Option<&[u8]>) -> CoreResult<WasmCore> {
        let Linked {
            mut store,
            master,
            part,
            init_part,
        } = linked;
        let started = match (snapshot, init_part) {
            (Some(snapshot), Some(init_part)) if !snapshot.is_empty() => {
                // A part at a time: the component never holds the whole.
                let init_part =
                    init_part.typed::<(&[u8], bool), (Result<(), RejectionRecord>,)>(&store)?;
                let mut parts = snapshot.chunks(SNAPSHOT_PART_BYTES as usize).peekable();
                let mut started = Ok(());
                while let Some(part) = parts.next() {
                    (started,) = init_part.call(&mut store, (part, parts.peek().is_none()))?;
                    if started.is_err() {
                        break;
                    }
                }
                started
            }
            _ => master.call_init(&mut store, snapshot)?,
        };
        match started {
            Ok(()) => Ok(Ok(WasmCore {
                store,
                master,
                part,
            })),
            Err(r) => Ok(Err(rejection(r))),
        }
    }
}

/// `snapshot-part` of the `master-parts` world.
type SnapshotPart = TypedFunc<(u32,), (Vec<u8>,)>;

/// The world's `rejection` record.
type RejectionRecord = master_world::cohort::master::types::Rejection;

/// A master instance that exports the right world, before `init`.
pub struct Linked {
    store: Store<MemoryGauge>,
    master: master_world::Master,
    part: Option<SnapshotPart>,
    /// `init-part` (`(list<u8>, bool) -> result<_, rejection>`), if the
    /// build exports it.
    init_part: Option<Func>,
}

/// The compiled master, from the node's compile cache (the same one job
/// modules use: `<cache>/compiled/<engine fingerprint>/<sha256>.cwasm`), or
/// compiled now and stored there.
fn load_cached(engine: &Engine, cache_dir: &Path, wasm: &[u8]) -> anyhow::Result<Component> {
    let cache = DiskCache::open(cache_dir, &engine_fingerprint(engine), None)?;
    let digest = Digest::of(wasm);
    // Nodes sharing the cache compile the master once (`DiskCache::compiling`).
    let _machine = cache.compiling(&digest).ok().flatten();
    if let Ok(Some(bytes)) = cache.load(&digest) {
        // SAFETY: the cache holds only artifacts this code precompiled, under
        // a directory named by the engine's compatibility fingerprint, and
        // `load` checked the file whole.
        if let Ok(component) = unsafe { Component::deserialize(engine, &bytes) } {
            return Ok(component);
        }
    }
    let bytes = engine.precompile_component(wasm)?;
    cache.store(&digest, &bytes)?;
    // SAFETY: just produced by this engine.
    Ok(unsafe { Component::deserialize(engine, &bytes)? })
}

/// The master running in its Wasm component.
pub struct WasmCore {
    store: Store<MemoryGauge>,
    master: master_world::Master,
    /// `snapshot-part`, if the build exports it.
    part: Option<SnapshotPart>,
}

fn rejection(r: RejectionRecord) -> Rejection {
    Rejection::new(r.code, r.message)
}

impl Core for WasmCore {
    fn decide(&mut self, now: Millis, command: Vec<u8>) -> CoreResult<(Vec<Vec<u8>>, Vec<u8>)> {
        Ok(self
            .master
            .call_decide(&mut self.store, now, &command)?
            .map(|d| (d.events, d.reply))
            .map_err(rejection))
    }
    fn apply(&mut self, events: &[Vec<u8>]) -> CoreResult<Vec<Vec<u8>>> {
        Ok(self
            .master
            .call_apply(&mut self.store, events)?
            .map_err(rejection))
    }
    fn snapshot(&mut self) -> anyhow::Result<Vec<u8>> {
        let Some(part) = &self.part else {
            return Ok(self.master.call_snapshot(&mut self.store)?);
        };
        // The parts up to the empty one, with nothing applied in between
        // (this holds the only handle on the store), are the snapshot.
        let mut snapshot = Vec::new();
        loop {
            let (bytes,) = part.call(&mut self.store, (SNAPSHOT_PART_BYTES,))?;
            if bytes.is_empty() {
                return Ok(snapshot);
            }
            snapshot.extend_from_slice(&bytes);
            // As one `snapshot` value is bounded (an uploaded build whose
            // parts never end must not take the node's memory).
            anyhow::ensure!(
                snapshot.len() <= MASTER_HOSTCALL_BYTES_MAX,
                "the master's snapshot passed {MASTER_HOSTCALL_BYTES_MAX} bytes"
            );
        }
    }
    fn query(&mut self, now: Millis, query: Vec<u8>) -> CoreResult<Vec<u8>> {
        Ok(self
            .master
            .call_query(&mut self.store, now, &query)?
            .map_err(rejection))
    }
    fn memory_bytes(&self) -> u64 {
        self.store.data().bytes as u64
    }
}

/// Counts what the component's memories grew to. It limits nothing: the
/// master is the node's own code, bounded by the job and history caps.
#[derive(Debug, Default)]
pub struct MemoryGauge {
    bytes: usize,
}

impl wasmtime::ResourceLimiter for MemoryGauge {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.bytes = self.bytes.saturating_add(desired.saturating_sub(current));
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        _desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_master::{encode, scenarios};

    /// Everything a core says during the scenarios, as bytes.
    fn transcript(core: &mut dyn Core) -> Vec<Vec<u8>> {
        transcript_of(core, scenarios::all())
    }

    fn transcript_of(core: &mut dyn Core, scenarios: Vec<scenarios::Scenario>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for scenario in scenarios {
            for (now, command) in scenario.steps {
                match core.decide(now, encode(&command)).unwrap() {
                    Ok((events, reply)) => {
                        out.push(reply);
                        out.extend(events.iter().cloned());
                        out.extend(core.apply(&events).unwrap().unwrap());
                    }
                    Err(rejection) => out.push(rejection.code.as_str().as_bytes().to_vec()),
                }
                for id in 0..4 {
                    let query = cohort_master::Query::Job { id };
                    match core.query(now, encode(&query)).unwrap() {
                        Ok(answer) => out.push(answer),
                        Err(rejection) => out.push(rejection.code.as_str().as_bytes().to_vec()),
                    }
                }
            }
            out.push(core.snapshot().unwrap());
        }
        out
    }

    #[test]
    fn the_built_in_master_writes_its_snapshot_in_parts() {
        let component = MasterComponent::load(None).unwrap();
        let mut wasm = component.instantiate(None).unwrap().unwrap();
        assert!(
            wasm.part.is_some(),
            "the built-in master exports snapshot-part"
        );
        transcript(&mut wasm);
        let whole = wasm.master.call_snapshot(&mut wasm.store).unwrap();
        assert!(whole.len() > 1, "{whole:?}");
        assert_eq!(wasm.snapshot().unwrap(), whole);
        // Twice: the parts start again once the snapshot was whole.
        assert_eq!(wasm.snapshot().unwrap(), whole);
    }

    #[test]
    fn a_snapshot_of_many_parts_restores_through_them() {
        // About 2.5 MiB of inputs: three parts each way.
        let mut native = NativeCore::new(None).unwrap();
        for seq in 0..40 {
            let input = vec![seq as u8; 64 << 10];
            let command = scenarios::submit(seq, scenarios::spec(1, &input));
            let (events, _) = native.decide(1_000, encode(&command)).unwrap().unwrap();
            native.apply(&events).unwrap().unwrap();
        }
        let snapshot = native.snapshot().unwrap();
        assert!(snapshot.len() > 2 * SNAPSHOT_PART_BYTES as usize);
        let component = MasterComponent::load(None).unwrap();
        let mut wasm = component.instantiate(Some(&snapshot)).unwrap().unwrap();
        assert_eq!(wasm.snapshot().unwrap(), snapshot);
        // Cut short in its last part: refused, as whole.
        let short = &snapshot[..snapshot.len() - 1];
        let refusal = component.instantiate(Some(short)).unwrap().err().unwrap();
        assert_eq!(refusal.code, NativeCore::new(Some(short)).unwrap_err().code);
    }

    #[test]
    fn a_build_of_the_master_world_alone_snapshots_whole() {
        let path = format!("{}/fixture_master_reformat.wasm", env!("COHORT_GUESTS_DIR"));
        let component = MasterComponent::from_bytes(&std::fs::read(path).unwrap()).unwrap();
        let mut wasm = component.instantiate(None).unwrap().unwrap();
        assert!(wasm.part.is_none(), "the fixture exports `master` only");
        transcript(&mut wasm);
        let snapshot = wasm.snapshot().unwrap();
        // Its own format: its first byte, then the built-in's snapshot.
        assert_eq!(snapshot[0], 0xA6);
        let native = NativeCore::new(Some(&snapshot[1..])).unwrap();
        assert_eq!(native.0.snapshot(), snapshot[1..]);
    }

    #[test]
    fn the_wasm_master_matches_the_native_one_byte_for_byte() {
        let component = MasterComponent::load(None).unwrap();
        // One instance per scenario set, as in production; scenarios share
        // state, which makes the comparison stricter.
        let mut wasm = component.instantiate(None).unwrap().unwrap();
        let mut native = NativeCore::new(None).unwrap();
        let (wasm, native) = (transcript(&mut wasm), transcript(&mut native));
        assert_eq!(wasm.len(), native.len());
        assert!(wasm == native, "the transcripts differ");
        // And a snapshot taken in Wasm restores natively, and vice versa.
        let snapshot = wasm.last().unwrap();
        let mut from_wasm = NativeCore::new(Some(snapshot)).unwrap();
        assert_eq!(&from_wasm.snapshot().unwrap(), snapshot);
        let mut from_native = component.instantiate(Some(snapshot)).unwrap().unwrap();
        assert_eq!(&from_native.snapshot().unwrap(), snapshot);
    }

    #[test]
    fn each_scenario_alone_matches_too() {
        // Alone, a scenario's job ids are the ones its steps name, so the
        // attempts it finishes are the ones it started (a DAG's children
        // run, with their parents' outputs).
        let component = MasterComponent::load(None).unwrap();
        for scenario in scenarios::all() {
            let name = scenario.name;
            let mut wasm = component.instantiate(None).unwrap().unwrap();
            let mut native = NativeCore::new(None).unwrap();
            let wasm = transcript_of(&mut wasm, vec![scenario.clone()]);
            let native = transcript_of(&mut native, vec![scenario]);
            assert!(wasm == native, "the transcripts of {name:?} differ");
        }
    }

    #[test]
    fn a_snapshot_of_an_unknown_version_is_refused() {
        let component = MasterComponent::load(None).unwrap();
        assert!(component.instantiate(Some(&[9, 9])).unwrap().is_err());
    }
}
