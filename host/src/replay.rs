//! `cohort replay`: the master's decisions, replayed offline from a node's
//! data directory, to look at how it reached a state.
//!
//! The master is a deterministic function of its snapshot and the events
//! after it, so the node's newest snapshot plus its journal rebuild the
//! state the node's master had, event by event. The replay stops where
//! asked (a journal index, a time), prints the state as JSON, and, for one
//! job, every event that changed its record. It only reads the directory.
//!
//! `--compare OTHER.wasm` replays the same events through another master
//! component as well and lists the events after which the two asked the
//! host for different things (assignments, stops): what a new scheduling
//! policy would have done with the same history.
//!
//! `--verify` checks that determinism: the same events through the other
//! build of the master (Wasm and native) must give the same effects at
//! every event and the same state at the end, and, where the journal still
//! holds the events between the node's two snapshots, replaying them from
//! the older one must give the newer one's state byte for byte. It says
//! where the first difference is.
//!
//! A journal that switched master builds (`cohort master upgrade`) replays
//! as the cluster ran it: each build from its switch record on, read from
//! the directory's `masters/` store. The native build exists only for the
//! built-in master, so `--verify` compares the two builds up to the first
//! switch to an uploaded one.

use crate::journal::durable::{self, Snapshot};
use crate::journal::log::read_entries;
use crate::journal::{FsStorage, Storage};
use crate::limits::{REPLAY_DIFFERENCES_LISTED_MAX, REPLAY_EVENT_TEXT_MAX, REPLAY_LISTED_MAX};
use crate::master::CoreKind;
use crate::master::core::{Core, MasterComponent, NativeCore, WasmCore};
use crate::master::upgrade::{self, Build, Builds, MasterStore};
use crate::replication::journal_storage::{TAG_NOOP, TAG_VOTERS, split_snapshot_state};
use crate::runtime::Digest;
use anyhow::{Context, bail};
use cohort_master::{Answer, JobFilter, JobState, Millis, Query, decode, decode_event, encode};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// `cohort replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// A node's data directory (`cohort node --data-dir`); it is only read.
    /// Stop the node first, or copy the directory.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Stop before the journal entry with this index.
    #[arg(long)]
    pub until: Option<u64>,
    /// Stop before the first event decided after this time (ms since the
    /// Unix epoch).
    #[arg(long)]
    pub until_time: Option<Millis>,
    /// Show this job's record and every event that changed it (from the
    /// earliest point the journal still holds).
    #[arg(long)]
    pub job: Option<u64>,
    /// Check determinism: the other build of the master over the same
    /// events, and the older snapshot replayed up to the newer one.
    #[arg(long)]
    pub verify: bool,
    /// The build of the master that replays.
    #[arg(long, value_enum, default_value_t = CoreKind::Wasm)]
    pub core: CoreKind,
    /// Replay the same events through this other master component too,
    /// and list where its effects (assignments, stops, wake-ups) differ
    /// from the running build's: how a new scheduler would have acted on
    /// the same history.
    #[arg(long, value_name = "MASTER.wasm")]
    pub compare: Option<PathBuf>,
}

/// Runs `cohort replay`: prints the report; fails when `--verify` finds a
/// difference, or the directory cannot be read.
pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let report = replay(&args)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if report["verify"]["ok"] == json!(false) {
        bail!("replay is not deterministic here: see \"verify\" above");
    }
    Ok(())
}

/// Where the replay runs: which backend, and the directory whose
/// `masters/` store holds uploaded builds.
#[derive(Clone, Copy)]
struct Runner<'a> {
    kind: CoreKind,
    data_dir: &'a Path,
}

impl Runner<'_> {
    /// `build` started from `snapshot`.
    fn core(&self, build: Build, snapshot: Option<&[u8]>) -> anyhow::Result<Box<dyn Core>> {
        let core: Box<dyn Core> = match (self.kind, build) {
            (CoreKind::Native, Build::BuiltIn) => {
                Box::new(NativeCore::new(snapshot).map_err(rejected)?)
            }
            (CoreKind::Native, Build::Uploaded(_)) => {
                bail!("master {build} is an uploaded component, which only --core wasm runs")
            }
            (CoreKind::Wasm, Build::BuiltIn) => Box::new(
                MasterComponent::load(None)?
                    .instantiate(snapshot)?
                    .map_err(rejected)?,
            ),
            (CoreKind::Wasm, Build::Uploaded(digest)) => {
                // Compiled here, not through the directory's cache: replay
                // writes nothing.
                let wasm = MasterStore::new(self.data_dir).read(&digest)?;
                Box::new(
                    MasterComponent::from_bytes(&wasm)?
                        .instantiate(snapshot)?
                        .map_err(rejected)?,
                )
            }
        };
        Ok(core)
    }

    /// Hands `core`'s state to `to`, as the cluster did at a switch record.
    fn switch(&self, core: &mut Box<dyn Core>, to: Build) -> anyhow::Result<()> {
        let state = core.snapshot()?;
        *core = self.core(to, Some(&state))?;
        Ok(())
    }

    /// Applies one journal entry: an event, a switch record, or one of
    /// replication's own (skipped).
    fn apply(&self, core: &mut Box<dyn Core>, data: &[u8]) -> anyhow::Result<()> {
        if let Some(switch) = upgrade::decode_switch(data) {
            return self.switch(core, switch.map_err(anyhow::Error::msg)?.to);
        }
        if is_event(data) {
            core.apply(&[data.to_vec()])?.map_err(rejected)?;
        }
        Ok(())
    }
}

fn rejected(rejection: cohort_master::Rejection) -> anyhow::Error {
    anyhow::anyhow!(
        "the master refused: {} ({})",
        rejection.message,
        rejection.code
    )
}

/// The master builds and state bytes of a snapshot file.
fn master_state(snapshot: &Snapshot) -> anyhow::Result<(Builds, Vec<u8>)> {
    let (_, state) = split_snapshot_state(&snapshot.state)
        .map_err(|e| anyhow::anyhow!("snapshot {}: {}", snapshot.index, e.0))?;
    let (builds, state) = upgrade::unwrap_state(&state)
        .map_err(|e| anyhow::anyhow!("snapshot {}: {e}", snapshot.index))?;
    Ok((builds, state.to_vec()))
}

/// The journal of `data_dir`, for reading.
fn journal(data_dir: &Path) -> anyhow::Result<FsStorage> {
    let dir = data_dir.join("journal");
    if !dir.is_dir() {
        bail!(
            "{} has no journal: not a node's data directory",
            data_dir.display()
        );
    }
    Ok(FsStorage::open(&dir)?)
}

/// Where to start: the earliest point the journal still holds every entry
/// from (its very beginning, or the oldest snapshot it reaches back to),
/// so that a job's history is as whole as the directory allows.
fn start(data_dir: &Path, snapshots: &[Snapshot]) -> anyhow::Result<Option<usize>> {
    let first = journal(data_dir)?.segments()?.first().copied();
    if first == Some(0) || snapshots.is_empty() {
        return Ok(None);
    }
    let reached = first.and_then(|first| snapshots.iter().position(|s| s.index >= first));
    Ok(Some(reached.unwrap_or(snapshots.len() - 1)))
}

/// The journal entries from `from` on, as (index, data).
fn entries(data_dir: &Path, from: u64) -> anyhow::Result<Vec<(u64, Vec<u8>)>> {
    let storage = journal(data_dir)?;
    let entries = read_entries(&storage, from, usize::MAX)?;
    if let Some(first) = entries.first()
        && first.index != from
    {
        bail!(
            "the journal starts at entry {}, after the snapshot's {from}",
            first.index
        );
    }
    Ok(entries.into_iter().map(|e| (e.index, e.data)).collect())
}

fn is_event(data: &[u8]) -> bool {
    !matches!(
        data.first(),
        Some(&TAG_NOOP | &TAG_VOTERS | &upgrade::TAG_SWITCH)
    )
}

fn query(core: &mut dyn Core, query: Query) -> anyhow::Result<Option<Answer>> {
    match core.query(0, encode(&query))? {
        Ok(bytes) => Ok(Some(decode(&bytes).map_err(rejected)?)),
        Err(_) => Ok(None),
    }
}

fn replay(args: &ReplayArgs) -> anyhow::Result<Value> {
    let snapshots = durable::snapshots(&args.data_dir)
        .with_context(|| format!("reading {}", args.data_dir.display()))?;
    let newest = start(&args.data_dir, &snapshots)?.map(|at| &snapshots[at]);
    let (builds, base) = match newest.map(master_state).transpose()? {
        Some((builds, state)) => (builds, Some(state)),
        None => (Builds::default(), None),
    };
    let from = newest.map_or(0, |s| s.index);
    let entries = entries(&args.data_dir, from)?;
    let runner = Runner {
        kind: args.core,
        data_dir: &args.data_dir,
    };
    let mut cores = Cores {
        runner,
        master: runner.core(builds.active, base.as_deref())?,
        other: OtherBuild::start(args, runner, builds.active, base.as_deref(), from)?,
        compared: match &args.compare {
            None => None,
            Some(path) => Some(Comparison::start(path, base.as_deref())?),
        },
    };
    let replayed = replay_entries(args, &entries, from, builds, &mut cores)?;
    report(args, &snapshots, newest, replayed, &mut cores)
}

/// Every core the events go through.
struct Cores<'a> {
    runner: Runner<'a>,
    /// The build that replays, switching builds as the cluster did.
    master: Box<dyn Core>,
    other: OtherBuild<'a>,
    compared: Option<Comparison>,
}

/// What replaying the journal's entries did, for the report.
struct Replayed {
    builds: Builds,
    switches: Vec<Value>,
    from: u64,
    to: u64,
    applied: u64,
    stopped: String,
    /// The events that changed `--job`'s record.
    history: Vec<Value>,
}

/// Replays `entries` (the journal from `from` on) through `cores` up to
/// where `args` says to stop.
fn replay_entries(
    args: &ReplayArgs,
    entries: &[(u64, Vec<u8>)],
    from: u64,
    mut builds: Builds,
    cores: &mut Cores,
) -> anyhow::Result<Replayed> {
    let job_view = |core: &mut dyn Core, id: u64| -> anyhow::Result<Option<Vec<u8>>> {
        Ok(core.query(0, encode(&Query::Job { id }))?.ok())
    };
    let (mut switches, mut history) = (Vec::new(), Vec::new());
    let (mut applied, mut stopped, mut to) = (0u64, "the end of the journal".to_string(), from);
    for (index, data) in entries {
        if args.until.is_some_and(|until| *index >= until) {
            stopped = format!("before entry {index}");
            break;
        }
        to = index + 1;
        if let Some(switch) = upgrade::decode_switch(data) {
            let switch = switch.map_err(anyhow::Error::msg)?;
            cores
                .runner
                .switch(&mut cores.master, switch.to)
                .with_context(|| {
                    format!("replaying the switch to {} at entry {index}", switch.to)
                })?;
            builds = builds.switched(switch.to);
            switches
                .push(json!({"index": index, "from": switch.from.name(), "to": switch.to.name()}));
            cores.other.switch(*index, switch.to);
            continue;
        }
        if !is_event(data) {
            continue;
        }
        let event = decode_event(data).map_err(rejected)?;
        if args.until_time.is_some_and(|until| event.at > until) {
            stopped = format!("before entry {index}, decided at {}", event.at);
            to = *index;
            break;
        }
        let before = match args.job {
            Some(id) => job_view(cores.master.as_mut(), id)?,
            None => None,
        };
        let batch = std::slice::from_ref(data);
        let effects = cores.master.apply(batch)?.map_err(rejected)?;
        applied += 1;
        if let Some(id) = args.job {
            let after = job_view(cores.master.as_mut(), id)?;
            if after != before {
                let text = event_text(&event.kind);
                history.push(json!({"index": index, "at": event.at, "event": text}));
            }
        }
        cores.other.apply(*index, batch, &effects)?;
        if let Some(compared) = cores.compared.as_mut() {
            compared.apply(*index, event.at, batch, &effects)?;
        }
    }
    Ok(Replayed {
        builds,
        switches,
        from,
        to,
        applied,
        stopped,
        history,
    })
}

/// An event as a job's history shows it, cut to [`REPLAY_EVENT_TEXT_MAX`].
fn event_text(kind: &impl std::fmt::Debug) -> String {
    let mut text = format!("{kind:?}");
    if text.len() > REPLAY_EVENT_TEXT_MAX {
        let cut = (0..=REPLAY_EVENT_TEXT_MAX)
            .rev()
            .find(|&i| text.is_char_boundary(i));
        text.truncate(cut.unwrap_or(0));
        text.push('…');
    }
    text
}

/// The report: where the replay started and stopped, the state there,
/// and what `--job`, `--compare` and `--verify` asked for.
fn report(
    args: &ReplayArgs,
    snapshots: &[Snapshot],
    newest: Option<&Snapshot>,
    replayed: Replayed,
    cores: &mut Cores,
) -> anyhow::Result<Value> {
    let Replayed {
        builds,
        switches,
        from,
        to,
        applied,
        stopped,
        history,
    } = replayed;
    let master = cores.master.as_mut();
    let mut report = json!({
        "data_dir": args.data_dir.display().to_string(),
        "core": format!("{:?}", args.core).to_lowercase(),
        "snapshot": newest.map(|s| json!({"index": s.index, "epoch": s.epoch})),
        "master": {"build": builds.active.name(), "previous": builds.previous.name(), "switches": switches},
        "replayed": {"from": from, "to": to, "events": applied, "stopped": stopped},
        "state": state(master)?,
    });
    if let Some(id) = args.job {
        report["job"] = job_record(master, id)?;
        report["history"] = history.into();
    }
    if let Some(compared) = cores.compared.as_mut() {
        report["compare"] = compared.report(master)?;
    }
    if args.verify {
        let other = &mut cores.other;
        report["verify"] = verify(
            args,
            snapshots,
            master,
            other.core.as_mut(),
            (other.divergence, other.compared_until),
        )?;
    }
    Ok(report)
}

/// Job `id`'s record at the stop, or why there is none.
fn job_record(master: &mut dyn Core, id: u64) -> anyhow::Result<Value> {
    Ok(match query(master, Query::Job { id })? {
        Some(Answer::Job(view)) => {
            let mut record = serde_json::to_value(&*view)?;
            record["module"] = Digest::from(view.module).to_string().into();
            record["state"] = view.state.name().into();
            record
        }
        _ => json!(format!("no job {id} at this point")),
    })
}

/// `--verify`'s other build of the master (native for Wasm, Wasm for
/// native), fed the same events while one exists for the build running.
struct OtherBuild<'a> {
    runner: Runner<'a>,
    core: Option<Box<dyn Core>>,
    /// The first entry after which its effects differed.
    divergence: Option<u64>,
    /// Where the comparison ended without it: from where an uploaded master
    /// (which has no native build) runs.
    compared_until: Option<u64>,
}

impl<'a> OtherBuild<'a> {
    fn start(
        args: &ReplayArgs,
        runner: Runner<'a>,
        active: Build,
        base: Option<&[u8]>,
        from: u64,
    ) -> anyhow::Result<Self> {
        let runner = Runner {
            kind: match args.core {
                CoreKind::Wasm => CoreKind::Native,
                CoreKind::Native => CoreKind::Wasm,
            },
            ..runner
        };
        let core = match args.verify && active == Build::BuiltIn {
            true => Some(runner.core(active, base)?),
            false => None,
        };
        let compared_until = match (args.verify, core.is_some()) {
            (true, false) => Some(from),
            _ => None,
        };
        Ok(Self {
            runner,
            core,
            divergence: None,
            compared_until,
        })
    }

    /// Follows the switch record at `index`, or ends the comparison there
    /// when this build cannot run the one switched to.
    fn switch(&mut self, index: u64, to: Build) {
        if let Some(core) = self.core.as_mut()
            && self.runner.switch(core, to).is_err()
        {
            self.core = None;
            self.compared_until = Some(index);
        }
    }

    /// Applies the event at `index`, noting the first whose effects differ
    /// from `effects`, the running build's.
    fn apply(&mut self, index: u64, batch: &[Vec<u8>], effects: &[Vec<u8>]) -> anyhow::Result<()> {
        if let Some(core) = self.core.as_mut() {
            let theirs = core.apply(batch)?.map_err(rejected)?;
            if self.divergence.is_none() && theirs != effects {
                self.divergence = Some(index);
            }
        }
        Ok(())
    }
}

/// `--compare`'s master component, fed the same events.
struct Comparison {
    core: WasmCore,
    /// Events after which it asked for other effects.
    differing: u64,
    /// The first [`REPLAY_DIFFERENCES_LISTED_MAX`] of them, described.
    differences: Vec<Value>,
}

impl Comparison {
    /// The component at `path`, started from the replay's snapshot.
    fn start(path: &Path, base: Option<&[u8]>) -> anyhow::Result<Self> {
        let wasm = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let not_master = || format!("{} is not a master component", path.display());
        let component = MasterComponent::from_bytes(&wasm).with_context(not_master)?;
        let instance = component.instantiate(base).with_context(not_master)?;
        Ok(Self {
            core: instance.map_err(rejected)?,
            differing: 0,
            differences: Vec::new(),
        })
    }

    /// Applies the event at `index`, decided `at`, and notes whether its
    /// effects differ from `effects`, the running build's.
    fn apply(
        &mut self,
        index: u64,
        at: Millis,
        batch: &[Vec<u8>],
        effects: &[Vec<u8>],
    ) -> anyhow::Result<()> {
        let theirs = self.core.apply(batch)?.map_err(rejected)?;
        if theirs != effects {
            self.differing += 1;
            if self.differences.len() < REPLAY_DIFFERENCES_LISTED_MAX {
                self.differences.push(json!({
                    "index": index,
                    "at": at,
                    "this": describe(effects),
                    "compared": describe(&theirs),
                }));
            }
        }
        Ok(())
    }

    /// What it found, against `master`'s state at the stop.
    fn report(&mut self, master: &mut dyn Core) -> anyhow::Result<Value> {
        let same_state = self.core.snapshot()? == master.snapshot()?;
        Ok(json!({
            "differing_events": self.differing,
            "first_differences": self.differences,
            "same_state_at_the_end": same_state,
        }))
    }
}

/// Effects as `--compare` lists them.
fn describe(effects: &[Vec<u8>]) -> Vec<String> {
    (effects.iter())
        .map(|bytes| match decode::<cohort_master::Effect>(bytes) {
            Ok(effect) => format!("{effect:?}"),
            Err(r) => format!("undecodable: {}", r.message),
        })
        .collect()
}

/// The state at the stop: counters, workers, what waits and runs,
/// schedules.
fn state(core: &mut dyn Core) -> anyhow::Result<Value> {
    let mut state = json!({});
    if let Some(Answer::Stats(stats)) = query(core, Query::Stats)? {
        let jobs: serde_json::Map<String, Value> = (JobState::ALL.iter())
            .map(|s| (s.name().to_string(), stats.jobs[*s as usize].into()))
            .collect();
        state["jobs"] = jobs.into();
        state["submitted_total"] = stats.submitted_total.into();
        state["attempts_total"] = stats.attempts_total.into();
        state["retries_total"] = stats.retries_total.into();
    }
    if let Some(Answer::Workers(workers)) = query(core, Query::Workers)? {
        state["workers"] = serde_json::to_value(workers)?;
    }
    for (name, wanted) in [("queued", JobState::Queued), ("running", JobState::Running)] {
        let listing = Query::Jobs {
            filter: JobFilter {
                state: Some(wanted),
                ..JobFilter::default()
            },
            after: None,
            limit: REPLAY_LISTED_MAX,
            newest_first: false,
        };
        if let Some(Answer::Jobs { jobs, .. }) = query(core, listing)? {
            state[name] = jobs.iter().map(|job| job.id).collect::<Vec<_>>().into();
        }
    }
    if let Some(Answer::Schedules(schedules)) = query(core, Query::Schedules)? {
        state["schedules"] = (schedules.iter())
            .map(|s| json!({"name": s.spec.name, "next": s.upcoming.first(), "fired_total": s.fired_total}))
            .collect::<Vec<_>>()
            .into();
    }
    Ok(state)
}

/// `--verify`'s findings (`ok` false at the first difference).
fn verify(
    args: &ReplayArgs,
    snapshots: &[Snapshot],
    master: &mut dyn Core,
    other: Option<&mut Box<dyn Core>>,
    (divergence, compared_until): (Option<u64>, Option<u64>),
) -> anyhow::Result<Value> {
    let mut ok = divergence.is_none();
    let same_state = match other {
        Some(other) => Some(master.snapshot()? == other.snapshot()?),
        None => None,
    };
    let builds = match (divergence, same_state) {
        (Some(index), _) => json!(format!(
            "the Wasm and native masters first differ applying entry {index}"
        )),
        (None, None) => json!(format!(
            "the Wasm and native masters gave the same effects up to entry {}, where an \
             uploaded master (which has no native build) runs from",
            compared_until.unwrap_or_default()
        )),
        (None, Some(true)) => {
            json!(
                "the Wasm and native masters gave the same effects at every event and the same state"
            )
        }
        (None, Some(false)) => {
            ok = false;
            json!("same effects, but the two masters' states differ at the end")
        }
    };
    let recorded = match snapshots {
        [.., older, newer] => {
            let replayed = replay_between(args, older, newer)?;
            match replayed {
                None => json!(format!(
                    "not checked: the journal no longer holds entries {} to {}",
                    older.index, newer.index
                )),
                Some(bytes) if bytes == master_state(newer)?.1 => json!(format!(
                    "snapshot {} replayed to entry {} reproduces snapshot {} byte for byte",
                    older.index, newer.index, newer.index
                )),
                Some(_) => {
                    ok = false;
                    json!(format!(
                        "snapshot {} replayed to entry {} differs from snapshot {}",
                        older.index, newer.index, newer.index
                    ))
                }
            }
        }
        _ => json!("not checked: fewer than two snapshots"),
    };
    Ok(json!({"ok": ok, "builds": builds, "recorded": recorded}))
}

/// The master state of snapshot `older` replayed up to snapshot `newer`;
/// `None` when the journal no longer holds every entry between them.
fn replay_between(
    args: &ReplayArgs,
    older: &Snapshot,
    newer: &Snapshot,
) -> anyhow::Result<Option<Vec<u8>>> {
    let between = entries(&args.data_dir, older.index);
    let Ok(between) = between else {
        return Ok(None);
    };
    let needed = (older.index..newer.index).count();
    if between.iter().take_while(|(i, _)| *i < newer.index).count() != needed {
        return Ok(None);
    }
    let runner = Runner {
        kind: args.core,
        data_dir: &args.data_dir,
    };
    let (builds, state) = master_state(older)?;
    let mut core = runner.core(builds.active, Some(&state))?;
    for (_, data) in between.iter().take(needed) {
        runner.apply(&mut core, data)?;
    }
    Ok(Some(core.snapshot()?))
}
