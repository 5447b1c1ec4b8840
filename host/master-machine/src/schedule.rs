//! Schedules: a job template fired at every tick of a cron expression (in
//! a time zone) or of a fixed interval.
//!
//! # Exactly once per tick
//!
//! A schedule's state holds its `next` tick. The master's periodic `Tick`
//! command compares it with the decision time and, when it is due, decides
//! a `ScheduleFired { tick, id, next }` event: the job and the advance to
//! the following tick are one event, journaled and replicated like any
//! other before its effects are visible. A master that takes over (after a
//! hand-over, a kill, a partition that fenced the old one) rebuilds the
//! same `next` from the journal, so it fires the following tick, never the
//! same one again; a tick whose event did not become durable was never
//! fired, and the new master fires it (late, within the catch-up window).
//!
//! # Late ticks
//!
//! A tick is due when `next <= now`. Ticks not decided within `catch_up_ms`
//! (plus [`LATE_GRACE_MS`]) of their time (the cluster was down, or had no master for longer than
//! that) are not fired late: one `ScheduleMissed { from, to }` records the
//! range, and a `Backfill` command fires the missed ticks of a range on
//! request (at most [`BACKFILL_TICKS_MAX`] at a time). Paused schedules
//! fire nothing and miss nothing; on resume they go on from the first tick
//! after now.
//!
//! # Time
//!
//! Ticks are computed from the decision times the events carry and from
//! the time zone database compiled into the master (jiff's bundled copy of
//! the IANA database), never from the machine's: every node and every
//! replay computes the same ticks. Cron expressions are matched by
//! `croner` on wall-clock time in the schedule's zone, at one-second
//! resolution; a wall-clock time that a daylight-saving change skips fires
//! at the end of the gap, one it repeats fires once.
//!
//! # In the master
//!
//! The commands (create, pause, delete, backfill), the events they and a
//! `Tick` decide, and their `apply` are here too, as `impl Master`: a
//! fired tick adds its job as a submission would (see `jobs`), and the
//! schedule keeps the jobs it fired that have not finished (`active`), by
//! which its overlap policy decides. Schedules are kept in snapshots from
//! version 5 on.

use crate::limits::{
    BACKFILL_TICKS_MAX, CATCH_UP_MS_MAX, EXPRESSION_BYTES_MAX, INTERVAL_MS_MAX, INTERVAL_MS_MIN,
    LATE_GRACE_MS, MISSED_RANGES_MAX, SCHEDULE_NAME_BYTES_MAX, SCHEDULES_MAX, TICKS_PER_TICK_MAX,
    UPCOMING_MAX,
};
use std::collections::{BTreeSet, VecDeque};

use croner::Cron;
use croner::parser::{CronParser, Seconds};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::master::{Master, decided, reject};
use crate::protocol::*;
use crate::validation::{validate_options, validate_spec};

/// A schedule as the master keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Schedule {
    pub(crate) spec: ScheduleSpec,
    pub(crate) created_at: Millis,
    pub(crate) paused: bool,
    /// The next tick to decide (`None`: it never fires again).
    pub(crate) next: Option<Millis>,
    pub(crate) buffered: Option<Millis>,
    /// Jobs it fired that have not finished.
    pub(crate) active: BTreeSet<JobId>,
    pub(crate) last: Option<(Millis, JobId)>,
    pub(crate) fired_total: u64,
    pub(crate) skipped_total: u64,
    /// Missed ranges `from..to`, oldest first.
    pub(crate) missed: VecDeque<(Millis, Millis)>,
}

impl Schedule {
    pub(crate) fn new(spec: ScheduleSpec, created_at: Millis, next: Option<Millis>) -> Self {
        Self {
            spec,
            created_at,
            paused: false,
            next,
            buffered: None,
            active: BTreeSet::new(),
            last: None,
            fired_total: 0,
            skipped_total: 0,
            missed: VecDeque::new(),
        }
    }

    /// The first tick strictly after `after`.
    pub(crate) fn tick_after(&self, after: Millis) -> Option<Millis> {
        tick_after(&self.spec.every, self.created_at, after)
    }

    /// Records the missed range `from..to` (its ticks are not counted: a
    /// range may span years of seconds).
    pub(crate) fn miss(&mut self, from: Millis, to: Millis) {
        self.missed.push_back((from, to));
        while self.missed.len() > MISSED_RANGES_MAX {
            self.missed.pop_front();
        }
    }

    /// Removes `from..to` from the missed ranges.
    pub(crate) fn unmiss(&mut self, from: Millis, to: Millis) {
        let mut kept = VecDeque::with_capacity(self.missed.len() + 1);
        for &(start, end) in &self.missed {
            if end <= from || start >= to {
                kept.push_back((start, end));
                continue;
            }
            if start < from {
                kept.push_back((start, from));
            }
            if end > to {
                kept.push_back((to, end));
            }
        }
        self.missed = kept;
    }

    /// The ticks in `from..to`, at most `max + 1` of them (so a caller can
    /// tell "more than `max`").
    pub(crate) fn ticks_in(&self, from: Millis, to: Millis, max: usize) -> Vec<Millis> {
        let mut ticks = Vec::new();
        let mut at = self.tick_after(from.saturating_sub(1));
        while let Some(tick) = at {
            if tick >= to || ticks.len() > max {
                break;
            }
            ticks.push(tick);
            at = self.tick_after(tick);
        }
        ticks
    }

    /// The missed ticks in `from..to` (at most `max + 1`).
    pub(crate) fn missed_ticks(&self, from: Millis, to: Millis, max: usize) -> Vec<Millis> {
        let mut ticks = Vec::new();
        for &(start, end) in &self.missed {
            let (start, end) = (start.max(from), end.min(to));
            if start < end {
                ticks.extend(self.ticks_in(start, end, max.saturating_sub(ticks.len())));
            }
            if ticks.len() > max {
                break;
            }
        }
        ticks
    }

    /// Whether its jobs are namespace `namespace`'s (by name, `default`
    /// for the default one).
    pub(crate) fn is_of(&self, namespace: &str) -> bool {
        crate::namespaces::name_of(self.spec.options.namespace.as_deref()) == namespace
    }

    pub(crate) fn view(&self) -> ScheduleView {
        let mut upcoming = Vec::new();
        if !self.paused {
            let mut at = self.next;
            while let Some(tick) = at {
                if upcoming.len() == UPCOMING_MAX {
                    break;
                }
                upcoming.push(tick);
                at = self.tick_after(tick);
            }
        }
        ScheduleView {
            spec: self.spec.clone(),
            created_at: self.created_at,
            paused: self.paused,
            upcoming,
            buffered: self.buffered,
            active: self.active.iter().copied().collect(),
            last: self.last,
            fired_total: self.fired_total,
            skipped_total: self.skipped_total,
            missed: self.missed.iter().copied().collect(),
        }
    }
}

/// The first tick of `every` strictly after `after`, for a schedule created
/// at `anchor` (intervals count from it); `None` when there is none (a cron
/// expression that matches no date left in the calendar).
pub(crate) fn tick_after(every: &Every, anchor: Millis, after: Millis) -> Option<Millis> {
    match every {
        Every::Interval { ms } => {
            let ms = (*ms).max(1);
            let periods = (after.saturating_sub(anchor) / ms).checked_add(1)?;
            anchor.checked_add(periods.checked_mul(ms)?)
        }
        Every::Cron {
            expression,
            timezone,
        } => {
            let cron = parse_cron(expression).ok()?;
            let zone = TimeZone::get(timezone).ok()?;
            cron_after(&cron, &zone, after)
        }
    }
}

fn parse_cron(expression: &str) -> Result<Cron, croner::errors::CronError> {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .build()
        .parse(expression)
}

fn cron_after(cron: &Cron, zone: &TimeZone, after: Millis) -> Option<Millis> {
    // Cron matches whole seconds: start from the second `after` falls in,
    // exclusive, so a tick at `after` itself is not repeated.
    let second = i64::try_from(after / 1000).ok()?;
    let start = Timestamp::from_second(second).ok()?.to_zoned(zone.clone());
    let next = cron.find_next_occurrence(&start, false).ok()?;
    u64::try_from(next.timestamp().as_millisecond()).ok()
}

/// Checks a new schedule at time `now`; its first tick.
pub(crate) fn validate(spec: &ScheduleSpec, now: Millis) -> Result<Option<Millis>, Rejection> {
    let refuse = |message: String| Err(Rejection::new(codes::INVALID_SCHEDULE, message));
    let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if spec.name.is_empty()
        || spec.name.len() > SCHEDULE_NAME_BYTES_MAX
        || !spec.name.chars().all(name_ok)
    {
        return refuse(format!(
            "name: 1 to {SCHEDULE_NAME_BYTES_MAX} characters of A-Z a-z 0-9 . _ -"
        ));
    }
    if spec.job.idempotency_key.is_some() {
        return refuse(
            "job.idempotency_key: a schedule's jobs cannot share one (every tick is a new job)"
                .into(),
        );
    }
    if spec.options.unique.is_some() {
        return refuse(
            "job.unique_key: a schedule fires once per tick already; uniqueness is not taken"
                .into(),
        );
    }
    if spec.catch_up_ms > CATCH_UP_MS_MAX {
        return refuse(format!("catch_up_ms: at most {CATCH_UP_MS_MAX} (7 days)"));
    }
    match &spec.every {
        Every::Interval { ms } => {
            if !(INTERVAL_MS_MIN..=INTERVAL_MS_MAX).contains(ms) {
                return refuse(format!(
                    "every_ms: {INTERVAL_MS_MIN} to {INTERVAL_MS_MAX} (366 days)"
                ));
            }
        }
        Every::Cron {
            expression,
            timezone,
        } => {
            if expression.len() > EXPRESSION_BYTES_MAX {
                return refuse(format!("cron: at most {EXPRESSION_BYTES_MAX} bytes"));
            }
            let cron = match parse_cron(expression) {
                Ok(cron) => cron,
                Err(error) => return refuse(format!("cron: {expression:?} is invalid: {error}")),
            };
            let zone = match TimeZone::get(timezone) {
                Ok(zone) => zone,
                Err(_) => {
                    return refuse(format!(
                        "timezone: {timezone:?} is not an IANA time zone name (such as UTC or Europe/Paris)"
                    ));
                }
            };
            let Some(first) = cron_after(&cron, &zone, now) else {
                return refuse(format!("cron: {expression:?} matches no time to come"));
            };
            return Ok(Some(first));
        }
    }
    Ok(tick_after(&spec.every, now, now))
}

impl Master {
    pub(crate) fn schedule(&self, name: &str) -> Result<&Schedule, Rejection> {
        self.schedules
            .get(name)
            .ok_or_else(|| Rejection::new(codes::SCHEDULE_NOT_FOUND, format!("no schedule {name}")))
    }

    /// [`Command::ScheduleIn`]: `action` on schedule `name` if its jobs
    /// are namespace `namespace`'s; another namespace's is not found.
    pub(crate) fn decide_schedule_in(
        &self,
        now: Millis,
        namespace: Option<&str>,
        name: &str,
        action: &ScheduleAction,
    ) -> Result<Decision, Rejection> {
        self.schedule_in(crate::namespaces::name_of(namespace), name)?;
        match *action {
            ScheduleAction::Pause { paused } => self.decide_pause_schedule(now, name, paused),
            ScheduleAction::Delete => self.decide_delete_schedule(now, name),
            ScheduleAction::Backfill { from, to } => self.decide_backfill(now, name, from, to),
        }
    }

    /// Schedule `name` if its jobs are namespace `namespace`'s (by name,
    /// `default` for the default one); another namespace's is not found,
    /// as a missing one is.
    pub(crate) fn schedule_in(&self, namespace: &str, name: &str) -> Result<&Schedule, Rejection> {
        match self.schedule(name)? {
            schedule if schedule.is_of(namespace) => Ok(schedule),
            _ => reject(codes::SCHEDULE_NOT_FOUND, format!("no schedule {name}")),
        }
    }

    pub(crate) fn decide_create_schedule(
        &self,
        now: Millis,
        spec: &ScheduleSpec,
    ) -> Result<Decision, Rejection> {
        validate_spec(&self.config, &spec.job)?;
        validate_options(&spec.options)?;
        self.check_narrowed(&spec.options)?;
        self.check_input_blob(&spec.options)?;
        let next = validate(spec, now)?;
        // A schedule by module name keeps the name (each firing runs the
        // digest current then) and the digest current now in its template.
        let job = self.resolved_spec(&spec.job, &spec.options)?;
        if self.schedules.contains_key(&spec.name) {
            return reject(
                codes::SCHEDULE_EXISTS,
                format!("a schedule named {} exists", spec.name),
            );
        }
        if self.schedules.len() >= SCHEDULES_MAX {
            return reject(
                codes::INVALID_SCHEDULE,
                format!("at most {SCHEDULES_MAX} schedules; delete some first"),
            );
        }
        decided(
            now,
            vec![EventKind::ScheduleCreated {
                spec: ScheduleSpec {
                    job: job.into_owned(),
                    ..spec.clone()
                },
                next,
            }],
        )
    }

    pub(crate) fn decide_pause_schedule(
        &self,
        now: Millis,
        name: &str,
        paused: bool,
    ) -> Result<Decision, Rejection> {
        let schedule = self.schedule(name)?;
        if schedule.paused == paused {
            return decided(now, Vec::new());
        }
        let next = match paused {
            true => schedule.next,
            false => schedule.tick_after(now),
        };
        decided(
            now,
            vec![EventKind::SchedulePaused {
                name: name.to_owned(),
                paused,
                next,
            }],
        )
    }

    pub(crate) fn decide_delete_schedule(
        &self,
        now: Millis,
        name: &str,
    ) -> Result<Decision, Rejection> {
        self.schedule(name)?;
        decided(
            now,
            vec![EventKind::ScheduleDeleted {
                name: name.to_owned(),
            }],
        )
    }

    pub(crate) fn decide_backfill(
        &self,
        now: Millis,
        name: &str,
        from: Millis,
        to: Millis,
    ) -> Result<Decision, Rejection> {
        let schedule = self.schedule(name)?;
        if from >= to {
            return reject(codes::INVALID_SCHEDULE, "from: must be before to");
        }
        let ticks = schedule.missed_ticks(from, to, BACKFILL_TICKS_MAX);
        if ticks.len() > BACKFILL_TICKS_MAX {
            return reject(
                codes::INVALID_SCHEDULE,
                format!(
                    "to: more than {BACKFILL_TICKS_MAX} missed ticks in from..to; backfill a narrower range at a time"
                ),
            );
        }
        if self.queued().saturating_add(ticks.len() as u64) > self.config.queue_max {
            return reject(
                codes::QUEUE_FULL,
                format!(
                    "{} jobs are waiting and the backfill adds {}, the limit is {}",
                    self.queued(),
                    ticks.len(),
                    self.config.queue_max
                ),
            );
        }
        let ids: Vec<JobId> = (0..ticks.len() as u64)
            .map(|n| self.next_id.saturating_add(n))
            .collect();
        let mut events: Vec<Event> = (ticks.iter().zip(&ids))
            .map(|(&tick, &id)| Event {
                at: now,
                kind: EventKind::ScheduleFired {
                    name: name.to_owned(),
                    tick,
                    id,
                    next: schedule.next,
                },
            })
            .collect();
        if !ticks.is_empty() {
            events.push(Event {
                at: now,
                kind: EventKind::ScheduleBackfilled {
                    name: name.to_owned(),
                    from,
                    to,
                },
            });
        }
        Ok(Decision {
            events,
            reply: Reply::Backfilled { ids },
        })
    }

    /// The events of the schedules' due ticks (see the module notes), while
    /// `kinds` holds fewer than `room`.
    pub(crate) fn decide_schedules(&self, now: Millis, room: usize, kinds: &mut Vec<EventKind>) {
        let new_jobs = std::cell::Cell::new(0u64);
        for (name, schedule) in &self.schedules {
            let due = schedule.next.is_some_and(|next| next <= now) || schedule.buffered.is_some();
            if schedule.paused || !due || kinds.len() >= room {
                continue;
            }
            self.decide_schedule(now, room, name, schedule, &new_jobs, kinds);
        }
    }

    /// The events of one due schedule's ticks; `new_jobs` counts the jobs
    /// the events so far fire, for their ids.
    fn decide_schedule(
        &self,
        now: Millis,
        room: usize,
        name: &str,
        schedule: &Schedule,
        new_jobs: &std::cell::Cell<u64>,
        kinds: &mut Vec<EventKind>,
    ) {
        let full = |kinds: &Vec<EventKind>| kinds.len() >= room;
        // Jobs of this schedule that will be unfinished after the
        // events so far.
        let mut active: Vec<JobId> = schedule.active.iter().copied().collect();
        let mut buffered = schedule.buffered;
        let mut next = schedule.next;
        let fire = |kinds: &mut Vec<EventKind>, tick, next, active: &mut Vec<JobId>| {
            let id = self.next_id.saturating_add(new_jobs.get());
            new_jobs.set(new_jobs.get() + 1);
            active.push(id);
            kinds.push(EventKind::ScheduleFired {
                name: name.to_owned(),
                tick,
                id,
                next,
            });
        };
        if let Some(tick) = buffered
            && active.is_empty()
        {
            fire(kinds, tick, next, &mut active);
            buffered = None;
        }
        let mut decided = 0;
        while let Some(tick) = next {
            if tick > now || full(kinds) || decided == TICKS_PER_TICK_MAX {
                break;
            }
            decided += 1;
            let window = schedule.spec.catch_up_ms.saturating_add(LATE_GRACE_MS);
            let earliest = now.saturating_sub(window);
            if tick < earliest {
                next = schedule.tick_after(earliest.saturating_sub(1));
                kinds.push(EventKind::ScheduleMissed {
                    name: name.to_owned(),
                    from: tick,
                    to: next.unwrap_or(earliest),
                    next,
                });
                continue;
            }
            let following = schedule.tick_after(tick);
            let skip = |reason| EventKind::ScheduleSkipped {
                name: name.to_owned(),
                tick,
                reason,
                next: following,
            };
            if self.queued().saturating_add(new_jobs.get()) >= self.config.queue_max {
                kinds.push(skip(SkipReason::QueueFull));
            } else if active.is_empty() {
                fire(kinds, tick, following, &mut active);
            } else {
                match schedule.spec.overlap {
                    Overlap::AllowAll => fire(kinds, tick, following, &mut active),
                    Overlap::Skip => kinds.push(skip(SkipReason::Overlap)),
                    Overlap::BufferOne if buffered.is_none() => {
                        buffered = Some(tick);
                        kinds.push(EventKind::ScheduleBuffered {
                            name: name.to_owned(),
                            tick,
                            next: following,
                        });
                    }
                    Overlap::BufferOne => kinds.push(skip(SkipReason::Overlap)),
                    Overlap::CancelRunning => {
                        kinds.extend(active.drain(..).map(|id| EventKind::Cancelled { id }));
                        fire(kinds, tick, following, &mut active);
                    }
                }
            }
            next = following;
        }
    }

    pub(crate) fn apply_schedule_created(
        &mut self,
        spec: &ScheduleSpec,
        next: Option<Millis>,
        at: Millis,
    ) {
        if !self.schedules.contains_key(&spec.name) {
            let schedule = Schedule::new(spec.clone(), at, next);
            self.schedules.insert(spec.name.clone(), schedule);
            self.schedule_names(spec.options.input_blob.as_ref(), true, at);
        }
    }

    pub(crate) fn apply_schedule_fired(
        &mut self,
        name: &str,
        tick: Millis,
        id: JobId,
        next: Option<Millis>,
        at: Millis,
        effects: &mut Vec<Effect>,
    ) {
        let Some(schedule) = self.schedules.get(name) else {
            return;
        };
        if self.holds(id) {
            return;
        }
        let (mut spec, options) = (schedule.spec.job.clone(), schedule.spec.options.clone());
        // By module name: the digest current at the firing.
        if let Some(digest) = self.deployments.digest(&options) {
            spec.module = digest;
        }
        self.add_job(id, spec, &options, at);
        self.index.fired_by.insert(id, name.to_owned());
        let schedule = self.schedules.get_mut(name).expect("present");
        schedule.active.insert(id);
        if schedule.last.is_none_or(|(last, _)| last < tick) {
            schedule.last = Some((tick, id));
        }
        schedule.fired_total += 1;
        if schedule.buffered == Some(tick) {
            schedule.buffered = None;
        }
        schedule.next = next;
        effects.push(Effect::WorkAvailable);
    }

    pub(crate) fn apply_schedule_skipped(&mut self, name: &str, next: Option<Millis>) {
        if let Some(schedule) = self.schedules.get_mut(name) {
            schedule.skipped_total += 1;
            schedule.next = next;
        }
    }

    pub(crate) fn apply_schedule_buffered(
        &mut self,
        name: &str,
        tick: Millis,
        next: Option<Millis>,
    ) {
        if let Some(schedule) = self.schedules.get_mut(name) {
            schedule.buffered = Some(tick);
            schedule.next = next;
        }
    }

    pub(crate) fn apply_schedule_missed(
        &mut self,
        name: &str,
        from: Millis,
        to: Millis,
        next: Option<Millis>,
    ) {
        if let Some(schedule) = self.schedules.get_mut(name) {
            schedule.miss(from, to);
            schedule.next = next;
        }
    }

    pub(crate) fn apply_schedule_paused(&mut self, name: &str, paused: bool, next: Option<Millis>) {
        if let Some(schedule) = self.schedules.get_mut(name) {
            schedule.paused = paused;
            schedule.next = next;
        }
    }

    pub(crate) fn apply_schedule_backfilled(&mut self, name: &str, from: Millis, to: Millis) {
        if let Some(schedule) = self.schedules.get_mut(name) {
            schedule.unmiss(from, to);
        }
    }

    pub(crate) fn apply_schedule_deleted(&mut self, name: &str, at: Millis) {
        if let Some(schedule) = self.schedules.remove(name) {
            self.schedule_names(schedule.spec.options.input_blob.as_ref(), false, at);
            for id in schedule.active {
                self.index.fired_by.remove(&id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::schedule_spec;

    fn cron(expression: &str, timezone: &str) -> Every {
        Every::Cron {
            expression: expression.into(),
            timezone: timezone.into(),
        }
    }

    fn millis(text: &str) -> Millis {
        text.parse::<Timestamp>().unwrap().as_millisecond() as Millis
    }

    #[test]
    fn intervals_count_from_the_anchor() {
        let every = Every::Interval { ms: 1000 };
        assert_eq!(tick_after(&every, 500, 500), Some(1500));
        assert_eq!(tick_after(&every, 500, 1499), Some(1500));
        assert_eq!(tick_after(&every, 500, 1500), Some(2500));
        assert_eq!(tick_after(&every, 500, 0), Some(1500));
    }

    #[test]
    fn cron_ticks_follow_the_time_zone_and_its_clock_changes() {
        let every = cron("0 30 2 * * *", "Europe/Paris");
        // 02:30 Paris on 2026-03-28 (UTC+1) is 01:30Z.
        let first = tick_after(&every, 0, millis("2026-03-28T00:00:00Z")).unwrap();
        assert_eq!(first, millis("2026-03-28T01:30:00Z"));
        // 2026-03-29 has no 02:30 in Paris (clocks jump 02:00 -> 03:00):
        // that day's tick is at the end of the gap, 03:00 at UTC+2.
        let second = tick_after(&every, 0, first).unwrap();
        assert_eq!(second, millis("2026-03-29T01:00:00Z"));
        assert_eq!(
            tick_after(&every, 0, second),
            Some(millis("2026-03-30T00:30:00Z"))
        );
        // 2026-10-25 has 02:30 twice (clocks go back 03:00 -> 02:00): one
        // tick, then the next day's.
        let repeated = tick_after(&every, 0, millis("2026-10-24T12:00:00Z")).unwrap();
        assert_eq!(repeated, millis("2026-10-25T00:30:00Z"));
        assert_eq!(
            tick_after(&every, 0, repeated),
            Some(millis("2026-10-26T01:30:00Z"))
        );
        // Five fields mean minute resolution; a tick is never repeated.
        let minutely = cron("*/15 * * * *", "UTC");
        let at = millis("2026-01-01T00:15:00Z");
        assert_eq!(tick_after(&minutely, 0, at - 1), Some(at));
        assert_eq!(tick_after(&minutely, 0, at), Some(at + 15 * 60_000));
        assert_eq!(tick_after(&minutely, 0, at + 999), Some(at + 15 * 60_000));
    }

    #[test]
    fn bad_timings_are_refused_naming_the_field() {
        let spec = |every| schedule_spec("s", every, Overlap::Skip, 0);
        let message = |every| validate(&spec(every), 0).unwrap_err().message;
        assert!(message(cron("61 * * * *", "UTC")).starts_with("cron:"));
        assert!(message(cron("* * *", "UTC")).starts_with("cron:"));
        assert!(message(cron("* * * * *", "Mars/Olympus")).starts_with("timezone:"));
        assert!(message(Every::Interval { ms: 999 }).starts_with("every_ms:"));
        let mut named = spec(Every::Interval { ms: 1000 });
        named.name = "a b".into();
        assert!(
            validate(&named, 0)
                .unwrap_err()
                .message
                .starts_with("name:")
        );
        assert_eq!(
            validate(&spec(Every::Interval { ms: 1000 }), 5).unwrap(),
            Some(1005)
        );
    }

    #[test]
    fn missed_ranges_split_when_part_is_backfilled() {
        let spec = schedule_spec("s", Every::Interval { ms: 1000 }, Overlap::Skip, 0);
        let mut schedule = Schedule::new(spec, 0, Some(1000));
        schedule.miss(1000, 10_000);
        assert_eq!(schedule.missed_ticks(0, u64::MAX, 100).len(), 9);
        assert_eq!(schedule.missed_ticks(0, u64::MAX, 3).len(), 4);
        schedule.unmiss(3000, 5000);
        assert_eq!(
            schedule.missed.iter().copied().collect::<Vec<_>>(),
            vec![(1000, 3000), (5000, 10_000)]
        );
        assert_eq!(schedule.missed_ticks(2000, 6000, 100), vec![2000, 5000]);
    }
}
