//! Grants per deployment name, and the outbound calls of attempts.
//!
//! A [`Command::Grant`] adds grants to a deployed name, a
//! [`Command::Revoke`] takes some or all away; either decides one
//! [`EventKind::Granted`] with the name's whole list after it, so applying
//! it only replaces (a replay does the same whatever came before). An
//! undeploy takes the name's grants with it: deploying the name again
//! starts with none. A job submitted by name runs with its name's grants
//! as they are when an attempt is assigned ([`Assignment::egress`]), so a
//! revoke reaches every attempt that starts after it.
//!
//! A worker's report of an attempt carries its calls ([`Command::Finish`]);
//! they are recorded as an [`EventKind::CallsRecorded`] just before the
//! `Finished` event, kept per job and purged with it.
//!
//! Secrets are named values a node sealed with a key derived from the
//! cluster key before it sent them ([`Command::SetSecret`]): the master
//! keeps, journals and replicates only the sealed bytes, and never sees a
//! plaintext. A grant's headers may name secrets (`{secret:NAME}`): a
//! grant naming one that does not exist is refused, and so is deleting a
//! secret a grant names. An attempt's assignment carries the sealed values
//! its grants' headers name; the worker's node opens them.
//!
//! A grant may also let a deployment name's jobs read secrets themselves
//! ([`Command::Grant`]'s `secrets`, at most
//! [`GRANT_SECRETS_MAX`](crate::limits::GRANT_SECRETS_MAX)), for a value a
//! job must use in its own code (an SMTP password, a signing key): an
//! attempt's assignment carries their sealed values with the others and
//! names them ([`Assignment::readable`]); the node opens them and the job
//! reads them through its host interface, its log masking their values.
//! A secret a job may read cannot be deleted either.
//!
//! Grants are decoded, not trusted: a command's grant must be exactly what
//! [`HttpGrant::parse`] and [`HttpGrant::with_headers`] make of its own
//! pattern and headers, so a hand-made grant they would refuse (a host
//! with a space, an unspecified address, a `host` header) is refused here
//! too. Kept in snapshots from version 7.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::egress::{check_secret_name, valid_secret_name};
use crate::limits::{
    CALL_ERROR_BYTES_MAX, CALL_METHOD_BYTES_MAX, CALL_ORIGIN_BYTES_MAX, CALLS_RECORDED_MAX,
    GRANT_SECRETS_MAX, GRANTS_PER_NAME_MAX, SECRET_SEALED_BYTES_MAX, SECRETS_MAX,
};
use crate::master::{Master, reject};
use crate::protocol::*;

/// The grants by deployment name, the narrowed grants and the calls by
/// job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Form")]
pub(crate) struct Egress {
    /// Each deployment name's grants, sorted, never empty.
    pub(crate) grants: BTreeMap<String, Vec<HttpGrant>>,
    /// The calls of each job's attempts that made any.
    pub(crate) calls: BTreeMap<JobId, Vec<AttemptCalls>>,
    /// The grants each job submitted with [`JobOptions::egress`] narrowed
    /// its name's to (purged with the job).
    pub(crate) narrowed: BTreeMap<JobId, Vec<HttpGrant>>,
    /// The secrets by name: sealed values, never plaintext.
    pub(crate) secrets: BTreeMap<String, Secret>,
    /// The secrets each deployment name's jobs may read themselves,
    /// sorted, never empty. Kept in snapshots from version 8, after the
    /// recorded calls (see [`crate::snapshot`]), not with the rest.
    #[serde(skip)]
    pub(crate) readable: BTreeMap<String, Vec<String>>,
}

/// A secret as the master keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Secret {
    /// Its value, sealed by a node with the cluster key.
    pub(crate) sealed: Vec<u8>,
    /// When it was last set.
    pub(crate) updated_at: Millis,
}

/// [`Egress`] as bytes hold it, bounded as it is read.
#[derive(Deserialize)]
struct Form {
    grants: BTreeMap<String, Vec<HttpGrant>>,
    calls: BTreeMap<JobId, Vec<AttemptCalls>>,
    narrowed: BTreeMap<JobId, Vec<HttpGrant>>,
    secrets: BTreeMap<String, Secret>,
}

impl From<Form> for Egress {
    fn from(form: Form) -> Self {
        let mut grants = form.grants;
        grants.retain(|_, list| {
            list.retain(valid);
            list.truncate(GRANTS_PER_NAME_MAX);
            !list.is_empty()
        });
        let mut calls = form.calls;
        for attempts in calls.values_mut() {
            for attempt in attempts {
                attempt.calls.truncate(CALLS_RECORDED_MAX);
            }
        }
        let mut narrowed = form.narrowed;
        for list in narrowed.values_mut() {
            list.retain(valid);
            list.truncate(GRANTS_PER_NAME_MAX);
        }
        let mut secrets = form.secrets;
        secrets.retain(|name, secret| {
            valid_secret_name(name) && secret.sealed.len() <= SECRET_SEALED_BYTES_MAX
        });
        while secrets.len() > SECRETS_MAX {
            secrets.pop_last();
        }
        Self {
            grants,
            calls,
            narrowed,
            secrets,
            readable: BTreeMap::new(),
        }
    }
}

/// Readable secrets as a snapshot read them, bounded as decisions keep
/// them.
pub(crate) fn bounded_readable(
    mut readable: BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, Vec<String>> {
    readable.retain(|_, names| {
        names.retain(|name| valid_secret_name(name));
        names.sort();
        names.dedup();
        names.truncate(GRANT_SECRETS_MAX);
        !names.is_empty()
    });
    readable
}

/// What an attempt of a job may reach and read ([`Master::egress_of_job`]).
#[derive(Debug, Default)]
pub(crate) struct JobEgress {
    pub(crate) grants: Vec<HttpGrant>,
    /// Sealed values by name: those the grants' headers name and those the
    /// job may read.
    pub(crate) secrets: Vec<(String, Vec<u8>)>,
    /// The names the job may read.
    pub(crate) readable: Vec<String>,
}

/// Whether `grant` is what the parser makes of its own pattern and
/// headers.
fn valid(grant: &HttpGrant) -> bool {
    HttpGrant::parse(&grant.url(), &grant.methods, grant.private)
        .and_then(|parsed| parsed.with_headers(&grant.headers))
        .map(|parsed| parsed.with_record(grant.record))
        .as_ref()
        == Ok(grant)
}

/// `text` cut to at most `bytes_max` bytes, on a character boundary.
fn bounded(text: &str, bytes_max: usize) -> String {
    let mut cut = text.len().min(bytes_max);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text[..cut].to_owned()
}

impl Master {
    /// The grants of deployment `name` (none if it has none).
    pub(crate) fn grants_of(&self, name: &str) -> &[HttpGrant] {
        self.egress.grants.get(name).map_or(&[], Vec::as_slice)
    }

    /// The secrets deployment `name`'s jobs may read (none if none).
    pub(crate) fn readable_of(&self, name: &str) -> &[String] {
        self.egress.readable.get(name).map_or(&[], Vec::as_slice)
    }

    /// What an attempt of job `id` may reach: its deployment name's
    /// grants now, or, if it was submitted narrowing them, those of its
    /// own that one of them still covers (with that one's headers); the
    /// sealed secrets their headers name and those the job may read; and
    /// the names of the latter.
    pub(crate) fn egress_of_job(&self, id: JobId) -> JobEgress {
        let Some((name, _)) = self.deployments.of_job(id) else {
            return JobEgress::default();
        };
        let held = self.grants_of(name);
        let grants: Vec<HttpGrant> = match self.egress.narrowed.get(&id) {
            None => held.to_vec(),
            // Each of the job's own grants gets the headers of every held
            // grant that covers it, the first setting a name winning: what
            // the node would set on a request both allow.
            Some(own) => (own.iter())
                .filter_map(|grant| {
                    let covering: Vec<&HttpGrant> =
                        held.iter().filter(|wide| wide.covers(grant)).collect();
                    if covering.is_empty() {
                        return None;
                    }
                    // Recorded as the node records a call several grants
                    // allow: if any of them records it.
                    let record = if covering.iter().any(|wide| wide.record == Some(true)) {
                        Some(true)
                    } else if covering.iter().all(|wide| wide.record == Some(false)) {
                        Some(false)
                    } else {
                        None
                    };
                    let mut headers: Vec<(String, String)> = Vec::new();
                    for (name, value) in covering.iter().flat_map(|wide| &wide.headers) {
                        if !headers.iter().any(|(set, _)| set == name) {
                            headers.push((name.clone(), value.clone()));
                        }
                    }
                    headers.sort();
                    Some(HttpGrant {
                        headers,
                        record,
                        ..grant.clone()
                    })
                })
                .collect(),
        };
        let readable = self.readable_of(name).to_vec();
        let mut named: Vec<&str> = grants.iter().flat_map(HttpGrant::secrets).collect();
        named.extend(readable.iter().map(String::as_str));
        named.sort_unstable();
        named.dedup();
        let secrets = (named.into_iter())
            .filter_map(|name| {
                let secret = self.egress.secrets.get(name)?;
                Some((name.to_owned(), secret.sealed.clone()))
            })
            .collect();
        JobEgress {
            grants,
            secrets,
            readable,
        }
    }

    pub(crate) fn decide_set_secret(
        &self,
        now: Millis,
        name: &str,
        sealed: &[u8],
    ) -> Result<Decision, Rejection> {
        if let Err(why) = check_secret_name(name) {
            return reject(codes::INVALID_SECRET, why);
        }
        if sealed.is_empty() || sealed.len() > SECRET_SEALED_BYTES_MAX {
            return reject(
                codes::INVALID_SECRET,
                format!("a sealed secret is 1 to {SECRET_SEALED_BYTES_MAX} bytes"),
            );
        }
        let created = !self.egress.secrets.contains_key(name);
        if created && self.egress.secrets.len() >= SECRETS_MAX {
            return reject(
                codes::SECRETS_FULL,
                format!("at most {SECRETS_MAX} secrets; delete some first"),
            );
        }
        Ok(Decision {
            events: vec![Event {
                at: now,
                kind: EventKind::SecretSet {
                    name: name.to_owned(),
                    sealed: sealed.to_vec(),
                },
            }],
            reply: Reply::SecretSet { created },
        })
    }

    pub(crate) fn decide_delete_secret(
        &self,
        now: Millis,
        name: &str,
    ) -> Result<Decision, Rejection> {
        if !self.egress.secrets.contains_key(name) {
            return reject(
                codes::SECRET_NOT_FOUND,
                format!("no secret is named {name:?}"),
            );
        }
        if let Some(user) = self.users_of_secret(name).first() {
            return reject(
                codes::SECRET_IN_USE,
                format!("a grant of {user} names {name}; revoke it first"),
            );
        }
        crate::master::decided(
            now,
            vec![EventKind::SecretDeleted {
                name: name.to_owned(),
            }],
        )
    }

    /// The deployment names whose grants name secret `name`, or whose
    /// jobs may read it.
    fn users_of_secret(&self, name: &str) -> Vec<String> {
        let mut users: Vec<String> = (self.egress.grants.iter())
            .filter(|(_, grants)| grants.iter().any(|g| g.secrets().any(|s| s == name)))
            .map(|(user, _)| user.clone())
            .collect();
        users.extend(
            (self.egress.readable.iter())
                .filter(|(_, names)| names.iter().any(|n| n == name))
                .map(|(user, _)| user.clone()),
        );
        users.sort();
        users.dedup();
        users
    }

    pub(crate) fn apply_secret_set(&mut self, name: &str, sealed: &[u8], at: Millis) {
        if valid_secret_name(name) && sealed.len() <= SECRET_SEALED_BYTES_MAX {
            let secret = Secret {
                sealed: sealed.to_vec(),
                updated_at: at,
            };
            self.egress.secrets.insert(name.to_owned(), secret);
        }
    }

    pub(crate) fn apply_secret_deleted(&mut self, name: &str) {
        self.egress.secrets.remove(name);
    }

    /// Answers [`Query::Secrets`]: names, times and users, never values.
    pub(crate) fn secrets_view(&self) -> Vec<SecretView> {
        (self.egress.secrets.iter())
            .map(|(name, secret)| SecretView {
                name: name.clone(),
                updated_at: secret.updated_at,
                used_by: self.users_of_secret(name),
            })
            .collect()
    }

    /// Checks a submission's [`JobOptions::egress`]: valid grants, at most
    /// [`GRANTS_PER_NAME_MAX`], each within a grant of the deployment name
    /// the job names its module by. A submission may narrow what its
    /// module's name holds, never widen it.
    pub(crate) fn check_narrowed(&self, options: &JobOptions) -> Result<(), Rejection> {
        let Some(own) = &options.egress else {
            return Ok(());
        };
        let Some(name) = &options.module else {
            return reject(
                codes::INVALID_GRANT,
                "egress: only a job that names its module by a deployment name has grants to narrow",
            );
        };
        if own.len() > GRANTS_PER_NAME_MAX {
            return reject(
                codes::INVALID_GRANT,
                format!("egress: at most {GRANTS_PER_NAME_MAX} grants"),
            );
        }
        Self::checked(own)?;
        let held = self.grants_of(name);
        match own.iter().find(|g| !held.iter().any(|wide| wide.covers(g))) {
            Some(wider) => reject(
                codes::INVALID_GRANT,
                format!(
                    "egress: {} is not within a grant of {name} (a job may narrow its grants, never widen them)",
                    wider.url()
                ),
            ),
            None => Ok(()),
        }
    }

    /// Records the grants job `id` narrowed its name's to, if it did.
    pub(crate) fn record_narrowed(&mut self, id: JobId, options: &JobOptions) {
        match &options.egress {
            Some(own) => {
                let own = own.iter().filter(|g| valid(g)).take(GRANTS_PER_NAME_MAX);
                self.egress.narrowed.insert(id, own.cloned().collect());
            }
            None => drop(self.egress.narrowed.remove(&id)),
        }
    }

    /// `grants`, each checked, or the refusal of the first that is not a
    /// grant.
    fn checked(grants: &[HttpGrant]) -> Result<(), Rejection> {
        match grants.iter().find(|grant| !valid(grant)) {
            Some(grant) => reject(
                codes::INVALID_GRANT,
                format!("{} is not a grant as its pattern reads", grant.url()),
            ),
            None => Ok(()),
        }
    }

    /// A command's list of secrets its jobs may read (or may no longer):
    /// names, at most [`GRANT_SECRETS_MAX`].
    fn checked_secrets(secrets: &[String]) -> Result<(), Rejection> {
        if secrets.len() > GRANT_SECRETS_MAX {
            return reject(
                codes::TOO_MANY_GRANTS,
                format!("a deployment's jobs read at most {GRANT_SECRETS_MAX} secrets"),
            );
        }
        match secrets
            .iter()
            .find_map(|name| check_secret_name(name).err())
        {
            Some(why) => reject(codes::INVALID_SECRET, why),
            None => Ok(()),
        }
    }

    pub(crate) fn decide_grant(
        &self,
        now: Millis,
        name: &str,
        grants: &[HttpGrant],
        secrets: &[String],
    ) -> Result<Decision, Rejection> {
        self.deployment_named(name)?;
        Self::checked(grants)?;
        Self::checked_secrets(secrets)?;
        let named = grants.iter().flat_map(HttpGrant::secrets);
        if let Some(missing) = (named.chain(secrets.iter().map(String::as_str)))
            .find(|secret| !self.egress.secrets.contains_key(*secret))
        {
            return reject(
                codes::SECRET_NOT_FOUND,
                format!("no secret is named {missing:?} (cohort secret set {missing})"),
            );
        }
        let mut readable = self.readable_of(name).to_vec();
        readable.extend(secrets.iter().cloned());
        readable.sort();
        readable.dedup();
        if readable.len() > GRANT_SECRETS_MAX {
            return reject(
                codes::TOO_MANY_GRANTS,
                format!(
                    "{name}'s jobs would read {} secrets, at most {GRANT_SECRETS_MAX}",
                    readable.len()
                ),
            );
        }
        // A grant of a pattern the name holds already replaces it: its
        // headers are the new ones (a new secret, say), not a second grant.
        let mut after = self.grants_of(name).to_vec();
        after.retain(|held| !grants.iter().any(|new| held.same_pattern(new)));
        after.extend_from_slice(grants);
        after.sort();
        after.dedup();
        if after.len() > GRANTS_PER_NAME_MAX {
            return reject(
                codes::TOO_MANY_GRANTS,
                format!(
                    "{name} would hold {} grants, at most {GRANTS_PER_NAME_MAX}; \
                     revoke some or use a wider pattern",
                    after.len()
                ),
            );
        }
        self.granted(now, name, after, readable)
    }

    pub(crate) fn decide_revoke(
        &self,
        now: Millis,
        name: &str,
        grants: &[HttpGrant],
        secrets: &[String],
    ) -> Result<Decision, Rejection> {
        self.deployment_named(name)?;
        Self::checked(grants)?;
        Self::checked_secrets(secrets)?;
        let all = grants.is_empty() && secrets.is_empty();
        let mut readable = self.readable_of(name).to_vec();
        readable.retain(|held| !all && !secrets.contains(held));
        let mut after = self.grants_of(name).to_vec();
        match all {
            true => after.clear(),
            // As granted: the same pattern and headers (whatever it
            // records).
            false => after.retain(|held| {
                !(grants.iter()).any(|gone| gone.same_pattern(held) && gone.headers == held.headers)
            }),
        }
        self.granted(now, name, after, readable)
    }

    /// The decision giving `name` the grants `after` (none if unchanged).
    fn granted(
        &self,
        now: Millis,
        name: &str,
        after: Vec<HttpGrant>,
        readable: Vec<String>,
    ) -> Result<Decision, Rejection> {
        let mut events = Vec::new();
        if after.as_slice() != self.grants_of(name) {
            events.push(Event {
                at: now,
                kind: EventKind::Granted {
                    name: name.to_owned(),
                    grants: after.clone(),
                },
            });
        }
        if readable.as_slice() != self.readable_of(name) {
            events.push(Event {
                at: now,
                kind: EventKind::SecretsShared {
                    name: name.to_owned(),
                    secrets: readable.clone(),
                },
            });
        }
        Ok(Decision {
            events,
            reply: Reply::Granted {
                grants: after,
                secrets: readable,
            },
        })
    }

    pub(crate) fn apply_secrets_shared(&mut self, name: &str, secrets: &[String]) {
        let mut names: Vec<String> = (secrets.iter())
            .filter(|name| valid_secret_name(name))
            .cloned()
            .collect();
        names.sort();
        names.dedup();
        names.truncate(GRANT_SECRETS_MAX);
        match names.is_empty() {
            true => self.egress.readable.remove(name),
            false => self.egress.readable.insert(name.to_owned(), names),
        };
    }

    pub(crate) fn apply_granted(&mut self, name: &str, grants: &[HttpGrant]) {
        let mut grants: Vec<HttpGrant> = grants.iter().filter(|g| valid(g)).cloned().collect();
        grants.truncate(GRANTS_PER_NAME_MAX);
        match grants.is_empty() {
            true => self.egress.grants.remove(name),
            false => self.egress.grants.insert(name.to_owned(), grants),
        };
    }

    /// The event recording an attempt's reported calls, bounded; `None` if
    /// it made none.
    pub(crate) fn calls_event(
        id: JobId,
        attempt: u32,
        calls: &[HttpCall],
        dropped: u32,
    ) -> Option<EventKind> {
        if calls.is_empty() && dropped == 0 {
            return None;
        }
        let kept = calls.len().min(CALLS_RECORDED_MAX);
        let beyond = u32::try_from(calls.len() - kept).unwrap_or(u32::MAX);
        let calls = calls[..kept]
            .iter()
            .map(|call| HttpCall {
                method: bounded(&call.method, CALL_METHOD_BYTES_MAX),
                origin: bounded(&call.origin, CALL_ORIGIN_BYTES_MAX),
                error: call
                    .error
                    .as_deref()
                    .map(|e| bounded(e, CALL_ERROR_BYTES_MAX)),
                ..call.clone()
            })
            .collect();
        Some(EventKind::CallsRecorded {
            id,
            attempt,
            calls,
            dropped: dropped.saturating_add(beyond),
        })
    }

    pub(crate) fn apply_calls_recorded(
        &mut self,
        id: JobId,
        attempt: u32,
        calls: &[HttpCall],
        dropped: u32,
    ) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        if job.attempts.last().map(|a| a.number) != Some(attempt) {
            return;
        }
        let attempts = self.egress.calls.entry(id).or_default();
        attempts.retain(|a| a.attempt != attempt);
        attempts.push(AttemptCalls {
            attempt,
            calls: calls.iter().take(CALLS_RECORDED_MAX).cloned().collect(),
            dropped,
        });
    }

    /// The recorded calls of job `id`'s attempts.
    pub(crate) fn calls_of(&self, id: JobId) -> Vec<AttemptCalls> {
        self.egress.calls.get(&id).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(url: &str) -> HttpGrant {
        HttpGrant::parse(url, &[], false).unwrap()
    }

    /// Decides `command` at 1 and applies what it decided; the reply.
    fn run(master: &mut Master, command: Command) -> Result<Reply, Rejection> {
        let decision = master.decide(1, &command)?;
        for event in &decision.events {
            master.apply(event);
        }
        Ok(decision.reply)
    }

    fn deployed() -> Master {
        let mut master = Master::new();
        let deploy = Command::Deploy {
            name: "hooks".into(),
            digest: [1; 32],
        };
        run(&mut master, deploy).unwrap();
        master
    }

    #[test]
    fn a_grant_the_parser_would_refuse_is_refused() {
        let mut master = deployed();
        let mut odd = grant("https://api.example.com");
        odd.host = "0.0.0.0".into();
        let refused = give(&mut master, vec![odd]);
        assert_eq!(refused.unwrap_err().code, codes::INVALID_GRANT);
        let mut upper = grant("https://api.example.com");
        upper.methods = vec!["get".into()];
        let refused = give(&mut master, vec![upper]);
        assert_eq!(refused.unwrap_err().code, codes::INVALID_GRANT);
        assert!(master.grants_of("hooks").is_empty());
    }

    #[test]
    fn a_name_holds_at_most_its_bound_of_grants() {
        let mut master = deployed();
        let grants: Vec<HttpGrant> = (1..=GRANTS_PER_NAME_MAX as u16)
            .map(|port| grant(&format!("http://10.0.0.1:{port}")))
            .collect();
        give(&mut master, grants).unwrap();
        let one_more = vec![grant("http://10.0.0.2")];
        let refused = give(&mut master, one_more);
        assert_eq!(refused.unwrap_err().code, codes::TOO_MANY_GRANTS);
    }

    #[test]
    fn grants_and_calls_survive_a_snapshot_and_an_old_one_restores_with_none() {
        let mut master = deployed();
        let granted = vec![grant("https://api.example.com/v1/")];
        give(&mut master, granted.clone()).unwrap();
        master.egress.calls.insert(
            7,
            vec![AttemptCalls {
                attempt: 1,
                calls: Vec::new(),
                dropped: 3,
            }],
        );
        let restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored.grants_of("hooks"), granted.as_slice());
        assert_eq!(restored.egress, master.egress);
        // Version 6 ended where the egress part starts (and version 7
        // before the recorded calls and readable secrets, version 8
        // before the blobs and version 9 before the blobs kept: four
        // empty maps here, four bytes).
        let mut old = master.snapshot_v10();
        old.truncate(old.len() - 4 - postcard::to_allocvec(&master.egress).unwrap().len());
        old[0] = 6;
        let restored = Master::restore(&old).unwrap();
        assert!(restored.grants_of("hooks").is_empty());
        assert_eq!(restored.deployments, master.deployments);
    }

    #[test]
    fn format_5_events_decode_and_egress_kinds_are_refused_in_them() {
        let deployed = Event {
            at: 1,
            kind: EventKind::Undeployed { name: "a".into() },
        };
        let bytes = encode(&deployed);
        let old = [&[FORMAT_VERSION_5][..], &bytes[1..]].concat();
        assert_eq!(decode_event(&old).unwrap(), deployed);
        let granted = encode(&Event {
            at: 1,
            kind: EventKind::Granted {
                name: "a".into(),
                grants: Vec::new(),
            },
        });
        let old = [&[FORMAT_VERSION_5][..], &granted[1..]].concat();
        assert_eq!(decode_event(&old).unwrap_err().code, codes::UNDECODABLE);
        // Format 5's options end before `egress`: the same bytes less its
        // absent value (and `input_blob`'s and `trace`'s) decode with none.
        let submitted = Event {
            at: 1,
            kind: EventKind::Submitted {
                id: 3,
                spec: crate::scenarios::spec(1, b"a"),
                request: None,
                options: JobOptions {
                    module: Some("hooks".into()),
                    ..JobOptions::default()
                },
            },
        };
        let now = encode(&submitted);
        assert_eq!(now[now.len() - 3..], [0, 0, 0]);
        let old = [&[FORMAT_VERSION_5][..], &now[1..now.len() - 3]].concat();
        assert_eq!(decode_event(&old), Ok(submitted));
    }

    /// A grant as format 6 and snapshot version 7 wrote it: without
    /// `record`, its last field now.
    #[derive(Serialize)]
    struct OldGrant<'a> {
        scheme: &'a str,
        host: &'a str,
        port: Option<u16>,
        path: &'a str,
        methods: &'a [String],
        private: bool,
        headers: &'a [(String, String)],
    }

    fn old(grant: &HttpGrant) -> OldGrant<'_> {
        OldGrant {
            scheme: &grant.scheme,
            host: &grant.host,
            port: grant.port,
            path: &grant.path,
            methods: &grant.methods,
            private: grant.private,
            headers: &grant.headers,
        }
    }

    #[test]
    fn format_6_grants_decode_with_no_recording_choice() {
        let grants = vec![
            grant("https://api.example.com/v1/")
                .with_headers(&[("x-team".into(), "pay".into())])
                .unwrap(),
            grant("http://10.0.0.1:8080"),
        ];
        let granted = Event {
            at: 1,
            kind: EventKind::Granted {
                name: "a".into(),
                grants: grants.clone(),
            },
        };
        // The event's bytes up to its grants, then the grants as format 6
        // wrote them: a second grant read as if the first had `record`
        // would start a byte late.
        let empty = encode(&Event {
            at: 1,
            kind: EventKind::Granted {
                name: "a".into(),
                grants: Vec::new(),
            },
        });
        let head = &empty[1..empty.len() - 1];
        let old_grants: Vec<OldGrant> = grants.iter().map(old).collect();
        let bytes = [
            &[FORMAT_VERSION_6][..],
            head,
            &postcard::to_allocvec(&old_grants).unwrap(),
        ]
        .concat();
        assert_eq!(decode_event(&bytes), Ok(granted));
        // This format's grants hold their choice.
        let chosen = Event {
            at: 1,
            kind: EventKind::Granted {
                name: "a".into(),
                grants: vec![grants[1].clone().with_record(Some(true))],
            },
        };
        assert_eq!(decode_event(&encode(&chosen)), Ok(chosen));
    }

    #[test]
    fn a_version_7_snapshot_restores_its_grants_with_no_recording_choice() {
        let mut master = deployed();
        let granted = vec![
            grant("http://10.0.0.1:8080"),
            grant("https://api.example.com/v1/"),
        ];
        give(&mut master, granted.clone()).unwrap();
        master
            .egress
            .narrowed
            .insert(7, vec![grant("https://api.example.com/v1/charges")]);
        let master = master.before_locality();
        let snapshot = master.snapshot_v10();
        // Version 7 ended with the egress part, its grants without
        // `record`.
        #[derive(Serialize)]
        struct OldEgress<'a> {
            grants: BTreeMap<&'a str, Vec<OldGrant<'a>>>,
            calls: &'a BTreeMap<JobId, Vec<AttemptCalls>>,
            narrowed: BTreeMap<JobId, Vec<OldGrant<'a>>>,
            secrets: &'a BTreeMap<String, Secret>,
        }
        let egress = &master.egress;
        let old_egress = OldEgress {
            grants: (egress.grants.iter())
                .map(|(name, grants)| (name.as_str(), grants.iter().map(old).collect()))
                .collect(),
            calls: &egress.calls,
            narrowed: (egress.narrowed.iter())
                .map(|(id, grants)| (*id, grants.iter().map(old).collect()))
                .collect(),
            secrets: &egress.secrets,
        };
        let now = postcard::to_allocvec(egress).unwrap().len()
            + postcard::to_allocvec(&(&master.tapes, &master.egress.readable))
                .unwrap()
                .len()
            + postcard::to_allocvec(&master.blobs).unwrap().len()
            + postcard::to_allocvec(&master.registry.kept).unwrap().len();
        let bytes = [
            &[7][..],
            &snapshot[1..snapshot.len() - now],
            &postcard::to_allocvec(&old_egress).unwrap(),
        ]
        .concat();
        let restored = Master::restore(&bytes).unwrap();
        assert_eq!(restored.grants_of("hooks"), granted.as_slice());
        assert_eq!(restored, master);
    }

    #[test]
    fn a_narrowed_job_gets_the_headers_and_secrets_of_the_grant_that_covers_it() {
        let mut master = deployed();
        let set = Command::SetSecret {
            name: "STRIPE".into(),
            sealed: b"sealed".to_vec(),
        };
        run(&mut master, set).unwrap();
        let headers = vec![(
            "authorization".to_owned(),
            "Bearer {secret:STRIPE}".to_owned(),
        )];
        let wide = grant("https://api.stripe.example/v1/")
            .with_headers(&headers)
            .unwrap();
        give(&mut master, vec![wide]).unwrap();
        // A job's own grant may not carry headers: they are the operator's.
        let mut options = JobOptions {
            module: Some("hooks".into()),
            egress: Some(vec![
                grant("https://api.stripe.example/v1/charges")
                    .with_headers(&headers)
                    .unwrap(),
            ]),
            ..JobOptions::default()
        };
        let refused = master.check_narrowed(&options).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_GRANT);
        options.egress = Some(vec![grant("https://api.stripe.example/v1/charges")]);
        master.check_narrowed(&options).unwrap();
        master.deployments.record_job(9, "hooks", &[1; 32]);
        master.record_narrowed(9, &options);
        let crate::grants::JobEgress {
            grants: egress,
            secrets,
            ..
        } = master.egress_of_job(9);
        assert_eq!(egress.len(), 1);
        assert_eq!(egress[0].path, "/v1/charges");
        assert_eq!(egress[0].headers, headers);
        assert_eq!(secrets, [("STRIPE".to_owned(), b"sealed".to_vec())]);
        // Secrets survive a snapshot.
        let restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored.egress.secrets, master.egress.secrets);
        // Another covering grant, without headers and first in order, takes
        // none away: the node would set both grants' headers.
        let wider = grant("https://*.stripe.example");
        give(&mut master, vec![wider]).unwrap();
        assert_eq!(master.grants_of("hooks")[0].host, "*.stripe.example");
        assert_eq!(master.egress_of_job(9).grants[0].headers, headers);
    }

    #[test]
    fn a_grant_of_a_pattern_held_replaces_its_headers() {
        let mut master = deployed();
        for name in ["OLD", "NEW"] {
            let set = Command::SetSecret {
                name: name.into(),
                sealed: b"sealed".to_vec(),
            };
            run(&mut master, set).unwrap();
        }
        for secret in ["OLD", "NEW"] {
            let header = vec![(
                "authorization".to_owned(),
                format!("Bearer {{secret:{secret}}}"),
            )];
            let granted = grant("https://api.example.com")
                .with_headers(&header)
                .unwrap();
            give(&mut master, vec![granted]).unwrap();
        }
        let held = master.grants_of("hooks");
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].headers[0].1, "Bearer {secret:NEW}");
        // The old secret is no longer in use.
        let delete = Command::DeleteSecret { name: "OLD".into() };
        run(&mut master, delete).unwrap();
    }

    #[test]
    fn decoded_grants_are_checked_and_bounded() {
        let mut bad = grant("https://api.example.com");
        bad.host = "api example.com".into();
        let form = Form {
            grants: [
                ("a".to_owned(), vec![bad.clone()]),
                (
                    "b".to_owned(),
                    (0..GRANTS_PER_NAME_MAX as u16 + 5)
                        .map(|p| grant(&format!("http://10.0.0.1:{}", p + 1)))
                        .collect(),
                ),
            ]
            .into(),
            calls: BTreeMap::new(),
            narrowed: BTreeMap::new(),
            secrets: BTreeMap::new(),
        };
        let egress = Egress::from(form);
        assert!(!egress.grants.contains_key("a"));
        assert_eq!(egress.grants["b"].len(), GRANTS_PER_NAME_MAX);
        assert!(!valid(&bad));
    }

    #[test]
    fn reported_calls_are_bounded_before_they_are_journaled() {
        let call = HttpCall {
            method: "P".repeat(1000),
            origin: "http://x:80".into(),
            status: Some(200),
            error: None,
            sent_bytes: 1,
            received_bytes: 2,
            ms: 3,
        };
        let calls = vec![call; CALLS_RECORDED_MAX + 3];
        let Some(EventKind::CallsRecorded { calls, dropped, .. }) =
            Master::calls_event(1, 1, &calls, 2)
        else {
            panic!("an event")
        };
        assert_eq!(calls.len(), CALLS_RECORDED_MAX);
        assert_eq!(dropped, 5);
        assert_eq!(calls[0].method.len(), CALL_METHOD_BYTES_MAX);
        assert_eq!(Master::calls_event(1, 1, &[], 0), None);
    }

    fn secret(master: &mut Master, name: &str) {
        let set = Command::SetSecret {
            name: name.into(),
            sealed: format!("sealed {name}").into_bytes(),
        };
        run(master, set).unwrap();
    }

    /// Grants `grants` to `hooks`.
    fn give(master: &mut Master, grants: Vec<HttpGrant>) -> Result<Reply, Rejection> {
        let command = Command::Grant {
            name: "hooks".into(),
            grants,
            secrets: Vec::new(),
        };
        run(master, command)
    }

    fn share(master: &mut Master, secrets: &[&str]) -> Result<Reply, Rejection> {
        let command = Command::Grant {
            name: "hooks".into(),
            grants: Vec::new(),
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
        };
        run(master, command)
    }

    #[test]
    fn secrets_a_grant_lets_jobs_read_travel_with_each_attempt_and_are_held_like_grants() {
        let mut master = deployed();
        let refused = share(&mut master, &["SMTP"]).unwrap_err();
        assert_eq!(refused.code, codes::SECRET_NOT_FOUND);
        let refused = share(&mut master, &["bad name"]).unwrap_err();
        assert_eq!(refused.code, codes::INVALID_SECRET);
        secret(&mut master, "SMTP");
        secret(&mut master, "SIGNING");
        let reply = share(&mut master, &["SMTP", "SMTP"]).unwrap();
        assert_eq!(
            reply,
            Reply::Granted {
                grants: Vec::new(),
                secrets: vec!["SMTP".into()]
            }
        );
        share(&mut master, &["SIGNING"]).unwrap();
        assert_eq!(master.readable_of("hooks"), ["SIGNING", "SMTP"]);
        // Shown with the deployment, kept in snapshots.
        assert_eq!(
            master.deployment_view("hooks").unwrap().secrets,
            ["SIGNING", "SMTP"]
        );
        let restored = Master::restore(&master.snapshot()).unwrap();
        assert_eq!(restored.readable_of("hooks"), ["SIGNING", "SMTP"]);
        assert_eq!(restored, master);
        // A job of the name gets their sealed values, and their names.
        master.deployments.record_job(9, "hooks", &[1; 32]);
        let egress = master.egress_of_job(9);
        assert_eq!(egress.readable, ["SIGNING", "SMTP"]);
        assert_eq!(
            egress.secrets,
            [
                ("SIGNING".to_owned(), b"sealed SIGNING".to_vec()),
                ("SMTP".to_owned(), b"sealed SMTP".to_vec())
            ]
        );
        // A secret a job may read cannot be deleted.
        let delete = Command::DeleteSecret {
            name: "SMTP".into(),
        };
        let refused = run(&mut master, delete.clone()).unwrap_err();
        assert_eq!(refused.code, codes::SECRET_IN_USE);
        // Revoked by name, then deletable.
        let revoke = Command::Revoke {
            name: "hooks".into(),
            grants: Vec::new(),
            secrets: vec!["SMTP".into()],
        };
        run(&mut master, revoke).unwrap();
        assert_eq!(master.readable_of("hooks"), ["SIGNING"]);
        run(&mut master, delete).unwrap();
        // A revoke naming nothing takes every grant and secret.
        let revoke_all = Command::Revoke {
            name: "hooks".into(),
            grants: Vec::new(),
            secrets: Vec::new(),
        };
        run(&mut master, revoke_all).unwrap();
        assert!(master.readable_of("hooks").is_empty());
        // An undeploy takes them too.
        share(&mut master, &["SIGNING"]).unwrap();
        let undeploy = Command::Undeploy {
            name: "hooks".into(),
        };
        run(&mut master, undeploy).unwrap();
        assert!(master.egress.readable.is_empty());
    }

    #[test]
    fn a_name_lets_its_jobs_read_at_most_its_bound_of_secrets() {
        let mut master = deployed();
        let names: Vec<String> = (0..=GRANT_SECRETS_MAX).map(|i| format!("S{i}")).collect();
        for name in &names {
            secret(&mut master, name);
        }
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        let refused = share(&mut master, &all).unwrap_err();
        assert_eq!(refused.code, codes::TOO_MANY_GRANTS);
        share(&mut master, &all[..GRANT_SECRETS_MAX]).unwrap();
        // Decoded, not trusted: a snapshot's list is bounded as decisions
        // keep it.
        let mut decoded = BTreeMap::new();
        decoded.insert("hooks".to_owned(), vec!["bad name".to_owned(); 3]);
        decoded.insert("more".to_owned(), names.clone());
        let bounded = bounded_readable(decoded);
        assert!(!bounded.contains_key("hooks"));
        assert_eq!(bounded["more"].len(), GRANT_SECRETS_MAX);
    }
}
