//! The text format of the master's scenarios (`scenarios/*.txt`, listed in
//! [`crate::scenarios`]): the commands to run, and under each one what the
//! master answered, in one file, as toydb's goldenscripts.
//!
//! ```text
//! # success
//!
//! > at 1000000 submit seq=1 input=a
//! < Submitted { id: 1, existing: false }
//!   event at 1000000: Submitted { id: 1, ... }
//!   effect WorkAvailable
//!
//! # A comment, kept with the command below it.
//! > at +1 poll worker=w1 free=4
//! < Done
//! ```
//!
//! The first line is `# ` and the scenario's name. After it, a line is
//! blank, a comment (`#`), a command (`>`) or output (a line starting with
//! `<` or indented): [`parse`] reads the commands and skips the output,
//! which the test that runs the scenarios writes ([`Script::render`]) and
//! compares; anything else is an error naming the file and line.
//!
//! A command is `> at TIME VERB key=value...`. `TIME` is milliseconds,
//! absolute (`1000000`) or after the previous command's (`+1`; `+0` for the
//! same time); numbers may have `_` between digits. A value is a bare word
//! or a quoted string (`"on time"`, with `\"`, `\\`, `\n`, `\t`, `\r`,
//! `\xNN`); bytes values (inputs, outputs, data) are its bytes. A key is
//! given once. The verbs, with their defaults (those of the
//! [`crate::steps`] builders; `[...]` is optional):
//!
//! * `submit seq=N [JOB] [OPTIONS]`: [`Command::Submit`] as request `seq`
//!   (its origin is the one [`parse`] is given).
//! * `poll worker=W free=N [slots=4] [holds=N,...] [labels=KEY:VALUE,...]
//!   [memory_max=N]` (`holds`: the blobs with the digests `[N; 32]` its
//!   node holds, see [`crate::locality`]; `labels` and `memory_max`: its
//!   [`WorkerPool`], see [`crate::pools`])
//! * `finish id=N attempt=N worker=W ok=OUTPUT [blobs=NAME:N:SIZE,...]`
//!   (the output blobs it wrote, each with the digest `[N; 32]`:
//!   [`Outcome::Wrote`]) or `... failed=CODE [message="CODE happened"]`,
//!   with `[duration_ms=5] [log_tail="done\n"] [cpu_us=3000]`
//! * `cancel id=N`, `checkpoint id=N attempt=N data=BYTES
//!   [mark=CALLS,READS]`, `worker-gone worker=W`, `tick`
//! * `renew worker=W attempts=ID:ATTEMPT,...`: [`Command::Renew`]
//! * `record-call id=N attempt=N ordinal=N url=URL [method=POST]
//!   [status=200] [body=BYTES] [clock=SECONDS]`: a recorded call
//!   ([`Command::RecordCall`]; body digest zero, no headers)
//! * `configure key=N...`: [`Config::default`] with the named fields set.
//! * `create-token id=ID scopes=a,b [name="ID token"] [created_at=0]`
//!   (hash `[7; 32]`; `scopes=""` for none), `revoke-token id=ID`
//! * `create-schedule name=S (cron=EXPR [timezone=UTC] | every_ms=N)
//!   [overlap=skip] [catch_up_ms=60000] [JOB] [OPTIONS]` (the job's input
//!   defaults to the name), `pause-schedule name=S`, `resume-schedule
//!   name=S`, `delete-schedule name=S`, `backfill name=S [from=0]
//!   [to=u64::MAX]`
//! * `submit-dag seq=N [on_failure=skip_descendants] [idempotency_key=K]`
//!   then, per job, `node=NAME [after=REF,...] [outputs=true] [JOB]
//!   [OPTIONS]` (keys after a `node=` are that job's; its input defaults to
//!   its name). A `REF` is a job of the DAG by name, or by index (`0`), or
//!   an existing job (`job:7`).
//! * `deploy name=NAME module=N` (the digest `[N; 32]`), `rollback
//!   name=NAME [to=VERSION]`, `undeploy name=NAME`
//! * `grant name=NAME http=URL [methods=A,B] [private=true]
//!   [header="name: template"] [record=true|false] [secret=NAME]`,
//!   `revoke` the same (without `http=` and `secret=`: every grant), `set-secret name=NAME sealed=BYTES`,
//!   `delete-secret name=NAME`
//! * `keep-blob blob=N:SIZE`: an upload of the blob with the digest
//!   `[N; 32]` ([`Command::KeepBlob`]), `drop-blob digest=N`
//!   ([`Command::DropBlob`])
//! * `set-quotas namespace=NAME [waiting_max=N] [running_max=N]
//!   [submissions_per_second=N] [result_bytes_max=N]`
//!   ([`Command::SetQuotas`]; each left out is no quota)
//! * `json COMMAND`: any [`Command`] as serde JSON, for the rare ones.
//!
//! `JOB` is `[module=1] [input=""] [timeout_ms=1000] [memory_bytes=N]
//! [max_attempts=3] [priority=0] [idempotency_key=K]` (`module=N` is the
//! digest `[N; 32]`; `module=NAME`, not a number, names a deployment:
//! [`JobOptions::module`], with the digest `[1; 32]` the master replaces);
//! `OPTIONS` are `[limit=KEY [running_max=N] [starts_per_second=N]]
//! [unique=KEY window_ms=N] [input_blob=N:SIZE] [labels=KEY:VALUE,...]`
//! (`input_blob`: the blob with the digest `[N; 32]`; `labels`: the
//! labels a worker must have, [`JobOptions::labels`]).

use crate::protocol::*;
use crate::steps::{blob, dag_node, failed, finish, named_blob, poll, schedule_spec, spec};
use crate::steps::{submit_dag, submit_with, token, wrote};
use std::fmt;
use std::str::FromStr;

/// A scenario read from its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script<'a> {
    /// Its name (the first line, after `# `).
    pub name: &'a str,
    /// Its commands, in order.
    pub steps: Vec<Step<'a>>,
    /// The comment lines after the last command.
    pub trailer: Vec<&'a str>,
}

/// One command of a [`Script`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step<'a> {
    /// The command's line number, from 1.
    pub line: usize,
    /// The comment lines before the command, then its line, as written.
    pub input: Vec<&'a str>,
    /// When it runs.
    pub at: Millis,
    /// What it is.
    pub command: Command,
}

/// A line of a script that says nothing [`parse`] understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptError {
    /// The file, as given to [`parse`].
    pub file: String,
    /// The line number, from 1.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ScriptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

impl std::error::Error for ScriptError {}

impl Script<'_> {
    /// The script's text with `output(step)` under each command: the name,
    /// then per command a blank line, its comments and line as written and
    /// its output; then the trailing comments. Only the output and the
    /// blank lines are rewritten.
    pub fn render(&self, mut output: impl FnMut(&Step<'_>) -> String) -> String {
        let mut text = format!("# {}\n", self.name);
        for step in &self.steps {
            text.push('\n');
            for line in &step.input {
                text.push_str(line);
                text.push('\n');
            }
            text.push_str(&output(step));
        }
        if !self.trailer.is_empty() {
            text.push('\n');
            for line in &self.trailer {
                text.push_str(line);
                text.push('\n');
            }
        }
        text
    }
}

/// Reads the script `text` of `file` (named in errors only). Its requests
/// (`submit`, `submit-dag`, and those given as JSON) come from `origin`.
pub fn parse<'a>(file: &str, text: &'a str, origin: u64) -> Result<Script<'a>, ScriptError> {
    let error = |line, message: String| ScriptError {
        file: file.into(),
        line,
        message,
    };
    let mut lines = text.lines().zip(1..);
    let name = lines
        .next()
        .and_then(|(first, _)| first.strip_prefix("# "))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .ok_or_else(|| error(1, "the first line names the scenario: `# <name>`".into()))?;
    let mut steps: Vec<Step<'a>> = Vec::new();
    let mut comments = Vec::new();
    for (line, number) in lines {
        if line.trim().is_empty() {
            continue;
        } else if line.starts_with('#') {
            comments.push(line);
        } else if let Some(command) = line.strip_prefix('>') {
            let previous = steps.last().map(|step| step.at);
            let (at, command) =
                command_line(command, previous, origin).map_err(|m| error(number, m))?;
            comments.push(line);
            steps.push(Step {
                line: number,
                input: std::mem::take(&mut comments),
                at,
                command,
            });
        } else if line.starts_with(['<', ' ', '\t']) {
            if steps.is_empty() {
                return Err(error(number, "output before any command".into()));
            }
        } else {
            return Err(error(
                number,
                format!(
                    "{:?}: a line is a command (`> at ...`), output (`<` or indented), \
                     a comment (`#`) or blank",
                    clip(line)
                ),
            ));
        }
    }
    if steps.is_empty() {
        return Err(error(text.lines().count().max(1), "no command".into()));
    }
    Ok(Script {
        name,
        steps,
        trailer: comments,
    })
}

/// The first 40 characters of `line`.
fn clip(line: &str) -> String {
    let mut clipped: String = line.chars().take(40).collect();
    if clipped.len() < line.len() {
        clipped.push_str("...");
    }
    clipped
}

/// `text` split at its first run of whitespace.
fn word(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(char::is_whitespace) {
        Some(end) => (&text[..end], text[end..].trim_start()),
        None => (text, ""),
    }
}

/// A command's line after its `>`: its time and the command.
fn command_line(
    line: &str,
    previous: Option<Millis>,
    origin: u64,
) -> Result<(Millis, Command), String> {
    let (at, rest) = word(line);
    if at != "at" {
        return Err("a command is `> at TIME VERB key=value...`".into());
    }
    let (time, rest) = word(rest);
    let at = match time.strip_prefix('+') {
        _ if time.is_empty() => return Err("`at` needs a time".into()),
        Some(after) => {
            let base = previous.ok_or("the first command's time is absolute, not `+N`")?;
            base.checked_add(number("at", after)?)
                .ok_or("the time is past u64::MAX")?
        }
        None => number("at", time)?,
    };
    let (verb, rest) = word(rest);
    let mut command = match verb {
        "" => return Err(format!("`at {time}` needs a command")),
        "json" => serde_json::from_str(rest).map_err(|e| format!("json: {e}"))?,
        _ => build(verb, tokens(rest)?).map_err(|m| format!("{verb}: {m}"))?,
    };
    match &mut command {
        Command::Submit { request, .. } => request.origin = origin,
        Command::SubmitDag(dag) => dag.request.origin = origin,
        _ => {}
    }
    Ok((at, command))
}

/// A number with `_` allowed between digits.
fn number<T: FromStr>(key: &str, text: &str) -> Result<T, String> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let well_formed = digits.starts_with(|c: char| c.is_ascii_digit())
        && digits.ends_with(|c: char| c.is_ascii_digit())
        && digits.chars().all(|c| c.is_ascii_digit() || c == '_');
    let plain: String = text.chars().filter(|c| *c != '_').collect();
    match plain.parse() {
        Ok(n) if well_formed => Ok(n),
        _ => Err(format!(
            "`{key}`: {:?} is not a number of the expected range",
            clip(text)
        )),
    }
}

/// `key=value` arguments: a value is a bare word or a quoted string.
fn tokens(text: &str) -> Result<Vec<Arg>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        if chars.next_if_eq(&'=').is_none() {
            return Err(format!("{:?}: arguments are `key=value`", clip(&key)));
        }
        let well_formed =
            (key.chars()).all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if key.is_empty() || !well_formed {
            return Err(format!(
                "{:?}: a key is lower-case letters, digits and `_`",
                clip(&key)
            ));
        }
        let mut value = Vec::new();
        if chars.next_if_eq(&'"').is_some() {
            quoted(&key, &mut chars, &mut value)?;
            if chars.next_if(|c| !c.is_whitespace()).is_some() {
                return Err(format!("`{key}`: text after the closing quote"));
            }
        } else {
            let mut bare = String::new();
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                bare.push(c);
            }
            if bare.contains('"') {
                return Err(format!("`{key}`: a quote may only start a value"));
            }
            value = bare.into_bytes();
        }
        out.push((key, value));
    }
}

/// The rest of a quoted string, its escapes decoded, into `value`.
fn quoted(
    key: &str,
    chars: &mut impl Iterator<Item = char>,
    value: &mut Vec<u8>,
) -> Result<(), String> {
    let mut utf8 = [0; 4];
    loop {
        let c = match chars.next() {
            None => return Err(format!("`{key}`: the quote is not closed")),
            Some('"') => return Ok(()),
            Some('\\') => match chars.next() {
                Some('n') => '\n',
                Some('t') => '\t',
                Some('r') => '\r',
                Some(c @ ('\\' | '"')) => c,
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    let digits = hex.len() == 2 && hex.chars().all(|c| c.is_ascii_hexdigit());
                    match u8::from_str_radix(&hex, 16) {
                        Ok(byte) if digits => {
                            value.push(byte);
                            continue;
                        }
                        _ => return Err(format!("`{key}`: `\\x` needs two hex digits")),
                    }
                }
                other => {
                    let shown = other.map(String::from).unwrap_or_default();
                    return Err(format!("`{key}`: unknown escape `\\{shown}`"));
                }
            },
            Some(c) => c,
        };
        value.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
    }
}

/// An argument: its key and its value's bytes.
type Arg = (String, Vec<u8>);

/// A command's arguments, taken one by one; the ones left are errors.
struct Args(Vec<Arg>);

impl Args {
    fn new(items: Vec<Arg>) -> Result<Self, String> {
        for (n, (key, _)) in items.iter().enumerate() {
            if items[..n].iter().any(|(k, _)| k == key) {
                return Err(format!("`{key}` is given twice"));
            }
        }
        Ok(Self(items))
    }

    fn bytes(&mut self, key: &str) -> Option<Vec<u8>> {
        let at = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(at).1)
    }

    fn text(&mut self, key: &str) -> Result<Option<String>, String> {
        (self.bytes(key).map(String::from_utf8).transpose())
            .map_err(|_| format!("`{key}` is not UTF-8"))
    }

    fn number<T: FromStr>(&mut self, key: &str) -> Result<Option<T>, String> {
        let text = self.text(key)?;
        text.map(|text| number(key, &text)).transpose()
    }

    fn flag(&mut self, key: &str) -> Result<Option<bool>, String> {
        match self.text(key)?.as_deref() {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(format!("`{key}` is `true` or `false`")),
        }
    }

    fn need_text(&mut self, key: &str) -> Result<String, String> {
        self.text(key)?
            .ok_or_else(|| format!("`{key}=` is missing"))
    }

    fn need_number<T: FromStr>(&mut self, key: &str) -> Result<T, String> {
        self.number(key)?
            .ok_or_else(|| format!("`{key}=` is missing"))
    }

    /// Ok when every argument was taken.
    fn end(self) -> Result<(), String> {
        match self.0.first() {
            Some((key, _)) => Err(format!("`{key}` is no argument of it")),
            None => Ok(()),
        }
    }
}

/// The command `verb` with arguments `items`.
fn build(verb: &str, items: Vec<Arg>) -> Result<Command, String> {
    if verb == "submit-dag" {
        return dag(items);
    }
    let mut args = Args::new(items)?;
    let command = match verb {
        "tick" => Command::Tick,
        "submit" => {
            let seq = args.need_number("seq")?;
            let spec = job(&mut args, b"")?;
            submit_with(seq, spec, options(&mut args)?)
        }
        "cancel" => Command::Cancel {
            id: args.need_number("id")?,
        },
        "poll" => {
            let mut command = poll(&args.need_text("worker")?, args.need_number("free")?);
            if let (Command::Poll { slots, .. }, Some(n)) = (&mut command, args.number("slots")?) {
                *slots = n;
            }
            if let (Command::Poll { holds, .. }, Some(text)) = (&mut command, args.text("holds")?) {
                let digests = (text.split(','))
                    .map(|n| number::<u8>("holds", n).map(|n| [n; 32]))
                    .collect::<Result<Vec<Digest>, _>>()?;
                *holds = crate::locality::holds_of(&digests);
            }
            if let Command::Poll { pool, .. } = &mut command {
                if let Some(text) = args.text("labels")? {
                    pool.labels = labels_value("labels", &text)?;
                }
                pool.memory_max = args.number("memory_max")?;
            }
            command
        }
        "checkpoint" => Command::Checkpoint {
            id: args.need_number("id")?,
            attempt: args.need_number("attempt")?,
            data: args.bytes("data").ok_or("`data=` is missing")?,
            // `mark=calls,reads`: where in its record of calls it was taken.
            mark: match args.text("mark")? {
                Some(mark) => {
                    let (calls, reads) = mark.split_once(',').ok_or("`mark=` is `calls,reads`")?;
                    Some(TapeMark {
                        calls: number("mark", calls)?,
                        reads: number("mark", reads)?,
                    })
                }
                None => None,
            },
        },
        // A recorded call: `ordinal=`, `method=`, `url=`, `status=`,
        // `body=` (the response's), `clock=` (seconds of one clock read).
        "record-call" => Command::RecordCall {
            id: args.need_number("id")?,
            attempt: args.need_number("attempt")?,
            call: RecordedCall {
                ordinal: args.need_number("ordinal")?,
                method: args.text("method")?.unwrap_or_else(|| "POST".into()),
                url: args.need_text("url")?,
                body_sha256: [0; 32],
                status: args.number("status")?.unwrap_or(200),
                headers: Vec::new(),
                body: args.bytes("body").unwrap_or_default(),
                reads: match args.number("clock")? {
                    Some(seconds) => vec![Read::Clock { seconds, nanos: 0 }],
                    None => Vec::new(),
                },
            },
        },
        "finish" => finished(&mut args)?,
        "worker-gone" => Command::WorkerGone {
            worker: args.need_text("worker")?,
        },
        // `attempts=ID:ATTEMPT,...`: the attempts whose leases it renews.
        "renew" => Command::Renew {
            worker: args.need_text("worker")?,
            attempts: (args.need_text("attempts")?.split(','))
                .map(|pair| {
                    let (id, attempt) = pair
                        .split_once(':')
                        .ok_or("`attempts=` is `ID:ATTEMPT,...`")?;
                    Ok((number("attempts", id)?, number("attempts", attempt)?))
                })
                .collect::<Result<_, String>>()?,
        },
        "configure" => return configure(args),
        "create-token" => {
            let id = args.need_text("id")?;
            let scopes = args.need_text("scopes")?;
            let scopes: Vec<&str> = match scopes.as_str() {
                "" => Vec::new(),
                scopes => scopes.split(',').collect(),
            };
            let mut record = token(&id, &scopes);
            if let Some(name) = args.text("name")? {
                record.name = name;
            }
            if let Some(at) = args.number("created_at")? {
                record.created_at = at;
            }
            Command::CreateToken(record)
        }
        "revoke-token" => Command::RevokeToken {
            id: args.need_text("id")?,
        },
        "create-schedule" => schedule(&mut args)?,
        "pause-schedule" | "resume-schedule" => Command::PauseSchedule {
            name: args.need_text("name")?,
            paused: verb == "pause-schedule",
        },
        "delete-schedule" => Command::DeleteSchedule {
            name: args.need_text("name")?,
        },
        "deploy" => Command::Deploy {
            name: args.need_text("name")?,
            digest: [args.need_number("module")?; 32],
        },
        "rollback" => Command::Rollback {
            name: args.need_text("name")?,
            to: args.number("to")?,
        },
        "undeploy" => Command::Undeploy {
            name: args.need_text("name")?,
        },
        "grant" | "revoke" => {
            let name = args.need_text("name")?;
            let methods: Vec<String> = match args.text("methods")? {
                Some(methods) => methods.split(',').map(str::to_owned).collect(),
                None => Vec::new(),
            };
            let private = args.flag("private")?.unwrap_or(false);
            let record = args.flag("record")?;
            // `secret=NAME`: one secret the jobs may read.
            let secrets: Vec<String> = args.text("secret")?.into_iter().collect();
            // `header="name: template"`: one header the grant sets.
            let headers: Vec<(String, String)> = match args.text("header")? {
                Some(header) => {
                    let (name, value) =
                        header.split_once(':').ok_or("`header=` is `name: value`")?;
                    vec![(name.trim().to_owned(), value.trim().to_owned())]
                }
                None => Vec::new(),
            };
            let grants = match args.text("http")? {
                Some(url) => {
                    vec![
                        HttpGrant::parse(&url, &methods, private)?
                            .with_headers(&headers)?
                            .with_record(record),
                    ]
                }
                None => Vec::new(),
            };
            match verb {
                "grant" => Command::Grant {
                    name,
                    grants,
                    secrets,
                },
                _ => Command::Revoke {
                    name,
                    grants,
                    secrets,
                },
            }
        }
        "set-secret" => Command::SetSecret {
            name: args.need_text("name")?,
            sealed: args.bytes("sealed").ok_or("`sealed=` is missing")?,
        },
        "delete-secret" => Command::DeleteSecret {
            name: args.need_text("name")?,
        },
        "backfill" => Command::Backfill {
            name: args.need_text("name")?,
            from: args.number("from")?.unwrap_or(0),
            to: args.number("to")?.unwrap_or(Millis::MAX),
        },
        "keep-blob" => Command::KeepBlob {
            blob: blob_value("blob", &args.need_text("blob")?)?,
        },
        "drop-blob" => Command::DropBlob {
            digest: [args.need_number("digest")?; 32],
        },
        "set-quotas" => Command::SetQuotas {
            namespace: args.need_text("namespace")?,
            quotas: Quotas {
                waiting_max: args.number("waiting_max")?,
                running_max: args.number("running_max")?,
                submissions_per_second: args.number("submissions_per_second")?,
                result_bytes_max: args.number("result_bytes_max")?,
            },
        },
        _ => {
            return Err(
                "unknown command: one of submit, poll, finish, cancel, checkpoint, \
                 worker-gone, tick, configure, create-token, revoke-token, create-schedule, \
                 pause-schedule, resume-schedule, delete-schedule, backfill, submit-dag, \
                 deploy, rollback, undeploy, grant, revoke, set-secret, delete-secret, \
                 record-call, keep-blob, drop-blob, set-quotas, json"
                    .into(),
            );
        }
    };
    args.end()?;
    Ok(command)
}

/// `finish`'s command.
fn finished(args: &mut Args) -> Result<Command, String> {
    let id = args.need_number("id")?;
    let attempt = args.need_number("attempt")?;
    let worker = args.need_text("worker")?;
    let blobs = match args.text("blobs")? {
        Some(list) => (list.split(','))
            .map(|item| {
                let (name, rest) = item
                    .split_once(':')
                    .ok_or("`blobs=` is `NAME:N:SIZE,...`")?;
                let (n, size) = rest
                    .split_once(':')
                    .ok_or("`blobs=` is `NAME:N:SIZE,...`")?;
                Ok(named_blob(
                    name,
                    number("blobs", n)?,
                    number("blobs", size)?,
                ))
            })
            .collect::<Result<Vec<_>, String>>()?,
        None => Vec::new(),
    };
    let outcome = match (
        args.bytes("ok"),
        args.text("failed")?,
        args.text("message")?,
    ) {
        (Some(output), None, None) => wrote(&output, blobs),
        (None, Some(_), _) if !blobs.is_empty() => {
            return Err("`blobs` goes with `ok`".into());
        }
        (None, Some(code), message) => {
            let mut outcome = failed(&code);
            if let (Outcome::Failed(failure), Some(message)) = (&mut outcome, message) {
                failure.message = message;
            }
            outcome
        }
        (Some(_), None, Some(_)) => return Err("`message` goes with `failed`".into()),
        _ => return Err("give `ok=OUTPUT` or `failed=CODE`".into()),
    };
    let mut command = finish(id, attempt, &worker, outcome);
    if let Command::Finish {
        duration_ms,
        log_tail,
        calls,
        calls_dropped,
        usage,
        ..
    } = &mut command
    {
        if let Some(ms) = args.number("duration_ms")? {
            *duration_ms = ms;
        }
        if let Some(us) = args.number("cpu_us")? {
            usage.cpu_us = us;
        }
        if let Some(tail) = args.text("log_tail")? {
            *log_tail = tail;
        }
        // `calls=N`: N calls to `https://api.example.com:443`, the first
        // answered 200 and the others refused as `egress_denied`.
        let count: usize = args.number("calls")?.unwrap_or(0);
        *calls = (0..count)
            .map(|n| HttpCall {
                method: "POST".into(),
                origin: "https://api.example.com:443".into(),
                status: (n == 0).then_some(200),
                error: (n > 0).then(|| "egress_denied".into()),
                sent_bytes: 10,
                received_bytes: if n == 0 { 20 } else { 0 },
                ms: 7,
            })
            .collect();
        *calls_dropped = args.number("calls_dropped")?.unwrap_or(0);
    }
    Ok(command)
}

/// `configure`'s command: the default configuration with the fields named.
fn configure(args: Args) -> Result<Command, String> {
    let mut config = serde_json::to_value(Config::default()).map_err(|e| e.to_string())?;
    let fields = config
        .as_object_mut()
        .ok_or("a configuration is an object")?;
    for (key, value) in args.0 {
        let field = (fields.get_mut(&key)).ok_or_else(|| format!("`{key}` is no setting"))?;
        let value = String::from_utf8(value).map_err(|_| format!("`{key}` is not UTF-8"))?;
        *field = serde_json::Value::from(number::<u64>(&key, &value)?);
    }
    serde_json::from_value(config)
        .map(Command::Configure)
        .map_err(|e| e.to_string())
}

/// `create-schedule`'s command.
fn schedule(args: &mut Args) -> Result<Command, String> {
    let name = args.need_text("name")?;
    let timezone = args.text("timezone")?;
    let every = match (args.text("cron")?, args.number("every_ms")?) {
        (Some(expression), None) => Every::Cron {
            expression,
            timezone: timezone.unwrap_or_else(|| "UTC".into()),
        },
        (None, Some(ms)) if timezone.is_none() => Every::Interval { ms },
        (None, Some(_)) => return Err("`timezone` goes with `cron`".into()),
        _ => return Err("give `cron=EXPRESSION` or `every_ms=N`".into()),
    };
    let overlap = match args.text("overlap")? {
        None => Overlap::Skip,
        Some(overlap) => Overlap::from_name(&overlap).ok_or_else(|| {
            let names: Vec<&str> = Overlap::ALL.iter().map(|o| o.name()).collect();
            format!("`overlap` is one of {}", names.join(", "))
        })?,
    };
    let catch_up_ms = args.number("catch_up_ms")?.unwrap_or(60_000);
    let mut spec = schedule_spec(&name, every, overlap, catch_up_ms);
    spec.job = job(args, name.as_bytes())?;
    spec.options = options(args)?;
    Ok(Command::CreateSchedule(spec))
}

/// `submit-dag`'s command: the DAG's arguments, then each `node=`'s.
fn dag(items: Vec<Arg>) -> Result<Command, String> {
    let mut head = Vec::new();
    let mut nodes: Vec<(String, Vec<Arg>)> = Vec::new();
    for (key, value) in items {
        if key == "node" {
            let name = String::from_utf8(value).map_err(|_| "`node` is not UTF-8")?;
            nodes.push((name, Vec::new()));
        } else if let Some((_, node)) = nodes.last_mut() {
            node.push((key, value));
        } else {
            head.push((key, value));
        }
    }
    let names: Vec<String> = nodes.iter().map(|(name, _)| name.clone()).collect();
    let mut args = Args::new(head)?;
    let seq = args.need_number("seq")?;
    let on_failure = match args.text("on_failure")? {
        None => OnFailure::SkipDescendants,
        Some(policy) => OnFailure::from_name(&policy).ok_or_else(|| {
            let names: Vec<&str> = OnFailure::ALL.iter().map(|p| p.name()).collect();
            format!("`on_failure` is one of {}", names.join(", "))
        })?,
    };
    let idempotency_key = args.text("idempotency_key")?;
    args.end()?;
    let mut specs = Vec::new();
    for (name, items) in nodes {
        let node = |m| format!("node {name:?}: {m}");
        let mut args = Args::new(items).map_err(node)?;
        let after = match args.text("after").map_err(node)? {
            Some(refs) if !refs.is_empty() => (refs.split(','))
                .map(|r| dag_ref(r, &names))
                .collect::<Result<Vec<_>, _>>()
                .map_err(node)?,
            _ => Vec::new(),
        };
        let mut spec = dag_node(&name, after);
        spec.outputs = args.flag("outputs").map_err(node)?.unwrap_or(true);
        spec.spec = job(&mut args, name.as_bytes()).map_err(node)?;
        spec.options = options(&mut args).map_err(node)?;
        args.end().map_err(node)?;
        specs.push(spec);
    }
    let mut command = submit_dag(seq, specs, on_failure);
    if let Command::SubmitDag(dag) = &mut command {
        dag.idempotency_key = idempotency_key;
    }
    Ok(command)
}

/// A DAG job's parent: a job of the DAG by name or index, or `job:ID`.
fn dag_ref(text: &str, names: &[String]) -> Result<DagRef, String> {
    if let Some(id) = text.strip_prefix("job:") {
        return number("after", id).map(DagRef::Job);
    }
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        return number("after", text).map(DagRef::Node);
    }
    match names.iter().position(|name| name == text) {
        Some(index) => u32::try_from(index)
            .map(DagRef::Node)
            .map_err(|_| "`after`: too many jobs".into()),
        None => Err(format!(
            "`after`: no job of the DAG is named {:?}",
            clip(text)
        )),
    }
}

/// A job's spec from the `JOB` arguments, `input` unless given (a
/// `module=` that is not a number is a deployment name, which
/// [`options`] takes; the digest is then `[1; 32]`, which the master
/// replaces).
fn job(args: &mut Args, input: &[u8]) -> Result<JobSpec, String> {
    let module = match args.0.iter().find(|(key, _)| key == "module") {
        Some((_, value)) if !is_number(value) => 1,
        _ => args.number("module")?.unwrap_or(1),
    };
    let input = args.bytes("input").unwrap_or_else(|| input.to_vec());
    let mut job = spec(module, &input);
    if let Some(ms) = args.number("timeout_ms")? {
        job.timeout_ms = ms;
    }
    job.memory_bytes = args.number("memory_bytes")?;
    if let Some(attempts) = args.number("max_attempts")? {
        job.max_attempts = attempts;
    }
    if let Some(priority) = args.number("priority")? {
        job.priority = priority;
    }
    job.idempotency_key = args.text("idempotency_key")?;
    Ok(job)
}

/// Whether `value` is written as a number (digits and `_`).
fn is_number(value: &[u8]) -> bool {
    value.first().is_some_and(u8::is_ascii_digit)
        && value.iter().all(|b| b.is_ascii_digit() || *b == b'_')
}

/// A job's options from the `OPTIONS` arguments (and the deployment name
/// a `module=` that is not a number gives).
fn options(args: &mut Args) -> Result<JobOptions, String> {
    let module = args.text("module")?;
    let running_max = args.number("running_max")?;
    let starts_per_second = args.number("starts_per_second")?;
    let limit = match args.text("limit")? {
        Some(key) => Some(KeyLimit {
            key,
            running_max,
            starts_per_second,
        }),
        None if running_max.is_some() || starts_per_second.is_some() => {
            return Err("`running_max` and `starts_per_second` go with `limit=KEY`".into());
        }
        None => None,
    };
    let unique = match (args.text("unique")?, args.number("window_ms")?) {
        (Some(key), Some(window_ms)) => Some(Unique { key, window_ms }),
        (None, None) => None,
        _ => return Err("`unique=KEY` and `window_ms=N` go together".into()),
    };
    // `egress=URL`: the job narrows its name's grants to this one.
    let egress = match args.text("egress")? {
        Some(url) => Some(vec![HttpGrant::parse(&url, &[], false)?]),
        None => None,
    };
    let input_blob = (args.text("input_blob")?)
        .map(|text| blob_value("input_blob", &text))
        .transpose()?;
    Ok(JobOptions {
        limit,
        unique,
        module,
        egress,
        input_blob,
        trace: None,
        labels: (args.text("labels")?)
            .map(|text| labels_value("labels", &text))
            .transpose()?
            .unwrap_or_default(),
        namespace: args.text("namespace")?,
    })
}

/// The labels `KEY:VALUE,...` given as `key`, sorted by key.
fn labels_value(key: &str, text: &str) -> Result<Vec<(String, String)>, String> {
    let mut labels = (text.split(','))
        .map(|pair| {
            let (k, v) = pair
                .split_once(':')
                .ok_or_else(|| format!("`{key}=` is `KEY:VALUE,...`"))?;
            Ok((k.to_owned(), v.to_owned()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    labels.sort();
    Ok(labels)
}

/// The blob `N:SIZE` given as `key`: the digest `[N; 32]`, `SIZE` bytes.
fn blob_value(key: &str, text: &str) -> Result<Blob, String> {
    let (n, size) = (text.split_once(':')).ok_or_else(|| format!("`{key}=` is `N:SIZE`"))?;
    Ok(blob(number(key, n)?, number(key, size)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::steps::{limited, request, submit, unique};

    /// The command of the one-line script `line`, from origin 9.
    fn one(line: &str) -> Result<(Millis, Command), String> {
        let text = format!("# t\n> at 5 tick\n{line}\n");
        let script = parse("t.txt", &text, 9).map_err(|e| e.to_string())?;
        let step = &script.steps[1];
        Ok((step.at, step.command.clone()))
    }

    fn command(line: &str) -> Command {
        one(line).unwrap().1
    }

    fn refused(line: &str) -> String {
        one(line).unwrap_err()
    }

    #[test]
    fn times_are_absolute_or_after_the_previous_command() {
        assert_eq!(one("> at +0 tick").unwrap().0, 5);
        assert_eq!(one("> at +1_000 tick").unwrap().0, 1_005);
        assert_eq!(one("> at 3 tick").unwrap().0, 3);
        assert!(refused("> at +18446744073709551615 tick").contains("past u64::MAX"));
        let first = parse("f.txt", "# f\n> at +1 tick\n", 0).unwrap_err();
        assert_eq!(first.line, 2);
        assert!(first.message.contains("absolute"), "{first}");
    }

    #[test]
    fn the_common_commands_take_the_helpers_defaults() {
        let mut expected = submit(3, spec(1, b"a"));
        if let Command::Submit { request, .. } = &mut expected {
            request.origin = 9;
        }
        assert_eq!(command("> at 5 submit seq=3 input=a"), expected);
        assert_eq!(command("> at 5 poll worker=w1 free=2"), poll("w1", 2));
        assert_eq!(
            command("> at 5 finish id=1 attempt=2 worker=w ok=\"\\x00\\xff \\\"\""),
            finish(1, 2, "w", Outcome::Succeeded(b"\0\xff \"".to_vec()))
        );
        assert_eq!(
            command("> at 5 finish id=1 attempt=2 worker=w failed=trap"),
            finish(1, 2, "w", failed("trap"))
        );
        assert_eq!(
            command("> at 5 create-token id=ci scopes=submit,read"),
            Command::CreateToken(token("ci", &["submit", "read"]))
        );
        assert_eq!(
            command("> at 5 create-token id=y scopes=\"\""),
            Command::CreateToken(token("y", &[]))
        );
        assert_eq!(
            command("> at 5 backfill name=s"),
            Command::Backfill {
                name: "s".into(),
                from: 0,
                to: u64::MAX
            }
        );
        let config = Config {
            queue_max: 2,
            ..Config::default()
        };
        assert_eq!(
            command("> at 5 configure queue_max=2"),
            Command::Configure(config)
        );
    }

    #[test]
    fn every_field_can_be_set() {
        let Command::Submit {
            spec,
            request: req,
            options,
        } = command(
            "> at 5 submit seq=4 module=2 input=\"a b\" timeout_ms=7 memory_bytes=8 \
             max_attempts=9 priority=-1 idempotency_key=k limit=l running_max=2 \
             starts_per_second=3 unique=u window_ms=10",
        )
        else {
            panic!("a submission")
        };
        assert_eq!(
            spec,
            JobSpec {
                module: [2; 32],
                input: b"a b".to_vec(),
                timeout_ms: 7,
                memory_bytes: Some(8),
                max_attempts: 9,
                priority: -1,
                idempotency_key: Some("k".into()),
            }
        );
        assert_eq!(req, RequestId { origin: 9, seq: 4 });
        let mut expected = limited("l", Some(2), Some(3));
        expected.unique = unique("u", 10).unique;
        assert_eq!(options, expected);
        let Command::Finish {
            outcome,
            duration_ms,
            log_tail,
            usage,
            ..
        } = command(
            "> at 5 finish id=1 attempt=1 worker=w failed=x message=\"m\" duration_ms=3 \
             log_tail=\"\" cpu_us=4",
        )
        else {
            panic!("a report")
        };
        let code = "x".to_string();
        let message = "m".to_string();
        assert_eq!(outcome, Outcome::Failed(Failure { code, message }));
        assert_eq!((duration_ms, log_tail.as_str(), usage.cpu_us), (3, "", 4));
        assert_eq!(
            command("> at 5 poll worker=w free=1 slots=2"),
            Command::Poll {
                worker: "w".into(),
                slots: 2,
                free: 1,
                holds: Vec::new(),
                pool: WorkerPool::default(),
            }
        );
        let Command::Poll { pool, .. } =
            command("> at 5 poll worker=w free=1 labels=zone:eu,gpu:a100 memory_max=9")
        else {
            panic!("a poll")
        };
        let labels = vec![("gpu".into(), "a100".into()), ("zone".into(), "eu".into())];
        assert_eq!(
            pool,
            WorkerPool {
                labels,
                memory_max: Some(9)
            }
        );
        let Command::Poll { holds, .. } = command("> at 5 poll worker=w free=1 holds=9,3") else {
            panic!("a poll")
        };
        assert_eq!(holds, vec![[3; 8], [9; 8]]);
    }

    #[test]
    fn schedules_and_dags_read_as_the_helpers_build_them() {
        let Command::CreateSchedule(spec) = command(
            "> at 5 create-schedule name=p cron=\"0 */30 * * * *\" timezone=Europe/Paris \
             overlap=allow_all catch_up_ms=0",
        ) else {
            panic!("a schedule")
        };
        let every = Every::Cron {
            expression: "0 */30 * * * *".into(),
            timezone: "Europe/Paris".into(),
        };
        assert_eq!(spec, schedule_spec("p", every, Overlap::AllowAll, 0));
        let Command::CreateSchedule(spec) = command("> at 5 create-schedule name=s every_ms=9")
        else {
            panic!("a schedule")
        };
        let every = Every::Interval { ms: 9 };
        assert_eq!(spec, schedule_spec("s", every, Overlap::Skip, 60_000));
        let mut expected = submit_dag(
            2,
            vec![
                dag_node("a", vec![]),
                dag_node("b", vec![DagRef::Node(0), DagRef::Job(7)]),
                dag_node("c", vec![DagRef::Node(1), DagRef::Node(5)]),
            ],
            OnFailure::CancelDag,
        );
        if let Command::SubmitDag(dag) = &mut expected {
            dag.request.origin = 9;
            dag.nodes[2].outputs = false;
            dag.nodes[2].spec.input = b"in".to_vec();
        }
        assert_eq!(
            command(
                "> at 5 submit-dag seq=2 on_failure=cancel_dag node=a node=b after=a,job:7 \
                 node=c after=b,5 outputs=false input=in"
            ),
            expected
        );
    }

    #[test]
    fn deployments_and_jobs_by_name_read_as_written() {
        assert_eq!(
            command("> at 5 deploy name=send-email module=3"),
            Command::Deploy {
                name: "send-email".into(),
                digest: [3; 32]
            }
        );
        assert_eq!(
            command("> at 5 rollback name=m"),
            Command::Rollback {
                name: "m".into(),
                to: None
            }
        );
        assert_eq!(
            command("> at 5 rollback name=m to=2"),
            Command::Rollback {
                name: "m".into(),
                to: Some(2)
            }
        );
        assert_eq!(
            command("> at 5 undeploy name=m"),
            Command::Undeploy { name: "m".into() }
        );
        // `module=` a number is a digest; anything else, a name.
        let mut expected = submit_with(1, spec(1, b"a"), JobOptions::default());
        if let Command::Submit {
            request, options, ..
        } = &mut expected
        {
            request.origin = 9;
            options.module = Some("m-1".into());
        }
        assert_eq!(command("> at 5 submit seq=1 module=m-1 input=a"), expected);
        let Command::Submit { spec, options, .. } = command("> at 5 submit seq=1 module=1_0")
        else {
            panic!("a submission")
        };
        assert_eq!((spec.module, options.module), ([10; 32], None));
        let Command::CreateSchedule(schedule) =
            command("> at 5 create-schedule name=s every_ms=9 module=m")
        else {
            panic!("a schedule")
        };
        assert_eq!(schedule.options.module.as_deref(), Some("m"));
        let Command::SubmitDag(dag) = command("> at 5 submit-dag seq=2 node=a module=m node=b")
        else {
            panic!("a DAG")
        };
        let names: Vec<_> = dag.nodes.iter().map(|n| n.options.module.clone()).collect();
        assert_eq!(names, [Some("m".into()), None]);
        for (line, says) in [
            ("> at 5 deploy name=m", "`module=` is missing"),
            ("> at 5 deploy module=1", "`name=` is missing"),
            ("> at 5 deploy name=m module=x", "`module`"),
            ("> at 5 rollback name=m to=x", "`to`"),
            ("> at 5 undeploy", "`name=` is missing"),
        ] {
            let error = refused(line);
            assert!(
                error.contains(says),
                "{line}: {error} does not say {says:?}"
            );
        }
    }

    #[test]
    fn blobs_read_as_written() {
        let Command::Submit { options, .. } = command("> at 5 submit seq=1 input_blob=9:1_000")
        else {
            panic!("a submission")
        };
        assert_eq!(options.input_blob, Some(blob(9, 1000)));
        let Command::SubmitDag(dag) =
            command("> at 5 submit-dag seq=2 node=a input_blob=3:4 node=b after=a")
        else {
            panic!("a DAG")
        };
        let inputs: Vec<_> = dag
            .nodes
            .iter()
            .map(|n| n.options.input_blob.clone())
            .collect();
        assert_eq!(inputs, [Some(blob(3, 4)), None]);
        let Command::Finish { outcome, .. } =
            command("> at 5 finish id=1 attempt=1 worker=w ok=A blobs=rows.csv:5:100,log:6:0")
        else {
            panic!("a report")
        };
        let expected = Output {
            result: b"A".to_vec(),
            blobs: vec![named_blob("rows.csv", 5, 100), named_blob("log", 6, 0)],
        };
        assert_eq!(outcome, Outcome::Wrote(expected));
        assert_eq!(
            command("> at 5 keep-blob blob=9:1_000"),
            Command::KeepBlob {
                blob: blob(9, 1000)
            }
        );
        assert_eq!(
            command("> at 5 drop-blob digest=9"),
            Command::DropBlob { digest: [9; 32] }
        );
        for (line, says) in [
            (
                "> at 1 submit seq=1 input_blob=9",
                "`input_blob=` is `N:SIZE`",
            ),
            ("> at 1 submit seq=1 input_blob=x:1", "`input_blob`"),
            (
                "> at 1 finish id=1 attempt=1 worker=w ok=A blobs=a:1",
                "`blobs=` is `NAME:N:SIZE,...`",
            ),
            (
                "> at 1 finish id=1 attempt=1 worker=w failed=x blobs=a:1:1",
                "`blobs` goes with `ok`",
            ),
            ("> at 1 keep-blob", "`blob=` is missing"),
            ("> at 1 keep-blob blob=9", "`blob=` is `N:SIZE`"),
            ("> at 1 keep-blob blob=9:x", "`blob`"),
            ("> at 1 drop-blob digest=256", "`digest`"),
            ("> at 1 drop-blob blob=9:1", "`digest=` is missing"),
        ] {
            let error = refused(line);
            assert!(
                error.contains(says),
                "{line}: {error} does not say {says:?}"
            );
        }
    }

    #[test]
    fn a_command_may_be_json() {
        let bulk = Command::Bulk {
            action: BulkAction::Retry { attempts: 2 },
            filter: JobFilter::default(),
        };
        let line = format!("> at 5 json {}", serde_json::to_string(&bulk).unwrap());
        assert_eq!(command(&line), bulk);
        // Requests come from the script's origin, JSON or not.
        let json = serde_json::to_string(&submit(1, spec(1, b""))).unwrap();
        let Command::Submit { request: req, .. } = command(&format!("> at 5 json {json}")) else {
            panic!("a submission")
        };
        assert_eq!(
            req,
            RequestId {
                origin: 9,
                ..request(1)
            }
        );
        assert!(refused("> at 5 json {\"Nope\":1}").contains("json: "));
    }

    #[test]
    fn bad_lines_are_refused_with_their_file_and_line() {
        let error = parse("s.txt", "# s\n\n> at 1 tick\n> at 2 poll free=1\n", 0).unwrap_err();
        assert_eq!(error.to_string(), "s.txt:4: poll: `worker=` is missing");
        for (line, says) in [
            ("> tick", "`> at TIME VERB"),
            ("> at", "needs a time"),
            ("> at 1", "needs a command"),
            ("> at x tick", "`at`: \"x\" is not a number"),
            ("> at 1_ tick", "is not a number"),
            ("> at -1 tick", "is not a number"),
            ("> at 1 fly", "unknown command"),
            ("> at 1 tick now", "\"now\": arguments are `key=value`"),
            ("> at 1 tick x=1", "`x` is no argument"),
            ("> at 1 cancel id=1 id=2", "`id` is given twice"),
            ("> at 1 cancel id=-1", "`id`: \"-1\" is not a number"),
            ("> at 1 cancel ID=1", "a key is lower-case"),
            ("> at 1 cancel =1", "a key is lower-case"),
            ("> at 1 poll worker=\"w free=1", "the quote is not closed"),
            (
                "> at 1 poll worker=\"w\"x free=1",
                "after the closing quote",
            ),
            ("> at 1 poll worker=w\"x free=1", "a quote may only start"),
            ("> at 1 poll worker=\"\\q\" free=1", "unknown escape `\\q`"),
            ("> at 1 poll worker=\"\\x4\" free=1", "two hex digits"),
            ("> at 1 poll worker=\"\\x+f\" free=1", "two hex digits"),
            (
                "> at 1 poll worker=\"\\xff\" free=1",
                "`worker` is not UTF-8",
            ),
            ("> at 1 poll worker=w free=4294967296", "`free`"),
            ("> at 1 submit input=a", "`seq=` is missing"),
            ("> at 1 submit seq=1 running_max=1", "go with `limit=KEY`"),
            ("> at 1 submit seq=1 unique=u", "go together"),
            ("> at 1 submit seq=1 module=256", "`module`"),
            ("> at 1 finish id=1 attempt=1 worker=w", "give `ok=OUTPUT`"),
            (
                "> at 1 finish id=1 attempt=1 worker=w ok=a failed=b",
                "give `ok",
            ),
            (
                "> at 1 finish id=1 attempt=1 worker=w ok=a message=m",
                "with `failed`",
            ),
            ("> at 1 configure nope=1", "`nope` is no setting"),
            ("> at 1 create-schedule name=s", "give `cron"),
            (
                "> at 1 create-schedule name=s every_ms=1 timezone=UTC",
                "with `cron`",
            ),
            (
                "> at 1 create-schedule name=s every_ms=1 overlap=x",
                "one of skip",
            ),
            ("> at 1 submit-dag node=a", "`seq=` is missing"),
            (
                "> at 1 submit-dag seq=1 on_failure=x",
                "one of skip_descendants",
            ),
            (
                "> at 1 submit-dag seq=1 node=a after=b",
                "no job of the DAG is named \"b\"",
            ),
            (
                "> at 1 submit-dag seq=1 node=a seq=2",
                "node \"a\": `seq` is no argument",
            ),
            (
                "> at 1 submit-dag seq=1 node=a outputs=yes",
                "`true` or `false`",
            ),
            ("> at 1 json [", "json: "),
            ("oops", "\"oops\": a line is a command"),
        ] {
            let error = refused(line);
            assert!(error.starts_with("t.txt:3: "), "{line}: {error}");
            assert!(
                error.contains(says),
                "{line}: {error} does not say {says:?}"
            );
        }
    }

    #[test]
    fn a_script_needs_its_name_and_a_command_and_no_stray_output() {
        for (text, line, says) in [
            ("", 1, "the first line names"),
            ("#\n> at 1 tick\n", 1, "the first line names"),
            ("success\n", 1, "the first line names"),
            ("# s\n# only a comment\n", 2, "no command"),
            ("# s\n< Done\n> at 1 tick\n", 2, "output before any command"),
        ] {
            let error = parse("s.txt", text, 0).unwrap_err();
            assert_eq!(error.line, line, "{text:?}: {error}");
            assert!(error.message.contains(says), "{text:?}: {error}");
        }
    }

    #[test]
    fn rendering_rewrites_only_the_output() {
        let text = "# s\n# about the first\n\n\n> at 1 tick\n< stale\n  event stale\n\
                    > at +1  tick   \n# the end\n";
        let script = parse("s.txt", text, 0).unwrap();
        assert_eq!(script.name, "s");
        assert_eq!(script.steps.len(), 2);
        assert_eq!(script.steps[1].line, 8);
        let mut n = 0;
        let rendered = script.render(|step| {
            n += 1;
            format!("< {n} at {}\n", step.at)
        });
        assert_eq!(
            rendered,
            "# s\n\n# about the first\n> at 1 tick\n< 1 at 1\n\n> at +1  tick   \n< 2 at 2\n\
             \n# the end\n"
        );
        // What was rendered reads back the same.
        let again = parse("s.txt", &rendered, 0).unwrap();
        assert_eq!(
            again.render(|_| String::new()),
            script.render(|_| String::new())
        );
    }
}
