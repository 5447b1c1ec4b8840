//! `cohort blob put|get|ls|rm`: large data, streamed to and from the
//! cluster (`PUT /v1/blobs`, `GET /v1/blobs/{digest}`), never read whole
//! into memory. A blob is named by the sha256 of its bytes; `rm` stops the
//! cluster keeping one nothing names (`DELETE /v1/blobs/{digest}`).

use super::{ServerArg, fail, print_json};
use cohort_client::Client;
use std::path::PathBuf;
use std::process::ExitCode;
use tokio::io::AsyncWriteExt;

/// `cohort blob ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum BlobCommand {
    /// Upload a file (`-`: standard input) as a blob; prints its sha256,
    /// once the blob is durable on a majority of the back-end nodes.
    Put(BlobPutArgs),
    /// Download a blob to a file (checked against its sha256 before the
    /// file appears) or to standard output.
    Get(BlobGetArgs),
    /// List the blobs the node holds, with whether the cluster keeps each
    /// and until when.
    Ls(BlobListArgs),
    /// Stop the cluster keeping a blob no held job or schedule names
    /// (`--purge`: one finished jobs name too); the nodes delete their
    /// copies after their grace period (`--blob-grace`).
    Rm(BlobRmArgs),
}

/// `cohort blob rm`.
#[derive(Debug, Clone, clap::Args)]
pub struct BlobRmArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The blob's sha256 (64 hex digits).
    pub digest: String,
    /// Also when finished jobs name it (an admin token): those that read
    /// it are purged, those that wrote it forget it. Refused while an
    /// unfinished job reads it or a schedule gives it to its jobs.
    #[arg(long)]
    pub purge: bool,
}

/// `cohort blob put`.
#[derive(Debug, Clone, clap::Args)]
pub struct BlobPutArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The file to upload, or `-` for standard input (sent once, not
    /// resent to another node if the first fails part way).
    pub file: PathBuf,
}

/// `cohort blob get`.
#[derive(Debug, Clone, clap::Args)]
pub struct BlobGetArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The blob's sha256 (64 hex digits).
    pub digest: String,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
    /// Only these bytes: `START-END` (inclusive), `START-` or `-LAST` (the
    /// last LAST bytes).
    #[arg(long, value_parser = parse_range, allow_hyphen_values = true)]
    pub range: Option<Range>,
}

/// `cohort blob ls`.
#[derive(Debug, Clone, clap::Args)]
pub struct BlobListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// Every blob the cluster keeps, wherever its copies are (the
    /// master's registry, a page at a time), not the copies the answering
    /// node holds.
    #[arg(long)]
    pub cluster: bool,
}

/// A byte range as `--range` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// From a byte to another (inclusive) or to the end.
    From(u64, Option<u64>),
    /// The last bytes.
    Last(u64),
}

fn parse_range(text: &str) -> Result<Range, String> {
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{text:?} is not START-END, START- or -LAST (byte offsets)"))
    };
    match text.split_once('-') {
        Some(("", last)) => Ok(Range::Last(number(last)?)),
        Some((start, "")) => Ok(Range::From(number(start)?, None)),
        Some((start, end)) => {
            let (start, end) = (number(start)?, number(end)?);
            if end < start {
                return Err(format!("{text:?} ends before it starts"));
            }
            Ok(Range::From(start, Some(end)))
        }
        None => Err(format!("{text:?} is not START-END, START- or -LAST")),
    }
}

/// Runs a `cohort blob` command.
pub async fn blob(command: BlobCommand) -> ExitCode {
    match command {
        BlobCommand::Put(args) => put(args).await,
        BlobCommand::Get(args) => get(args).await,
        BlobCommand::Ls(args) => list(args).await,
        BlobCommand::Rm(args) => remove(args).await,
    }
}

fn client(server: &ServerArg) -> Result<Client, ExitCode> {
    server.client().map_err(fail)
}

async fn put(args: BlobPutArgs) -> ExitCode {
    let client = match client(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let stored = if args.file.as_os_str() == "-" {
        client.put_blob_stream(tokio::io::stdin()).await
    } else {
        client.put_blob_file(&args.file).await
    };
    match stored {
        Ok(info) if args.server.json => print_json(&info),
        Ok(info) => println!("{}  {} bytes", info.digest, info.bytes),
        Err(error) => return fail(format!("uploading {}: {error}", args.file.display())),
    }
    ExitCode::SUCCESS
}

async fn get(args: BlobGetArgs) -> ExitCode {
    let client = match client(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let digest = &args.digest;
    // A whole blob to a file: checked before the file appears.
    if let (Some(path), None) = (&args.output, args.range) {
        return match client.get_blob_to_file(digest, path).await {
            Ok(info) if args.server.json => {
                print_json(&info);
                ExitCode::SUCCESS
            }
            Ok(_) => ExitCode::SUCCESS,
            Err(error) => fail(format!("downloading blob {digest}: {error}")),
        };
    }
    let range = match args.range {
        None => None,
        Some(Range::From(start, end)) => Some((start, end)),
        Some(Range::Last(last)) => {
            // The size first: the client asks by offsets.
            match client.head_blob(digest).await {
                Ok(Some(info)) => Some((info.bytes.saturating_sub(last), None)),
                Ok(None) => return fail(format!("no blob {digest} is stored in the cluster")),
                Err(error) => return fail(format!("blob {digest}: {error}")),
            }
        }
    };
    let mut reader = match client.get_blob(digest, range).await {
        Ok(reader) => reader,
        Err(error) => return fail(format!("downloading blob {digest}: {error}")),
    };
    let copied = match &args.output {
        // A range to a file: written beside it, moved into place whole.
        Some(path) => to_file(&mut reader, path).await,
        None => copy(&mut reader, &mut tokio::io::stdout()).await,
    };
    match copied {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fail(format!("downloading blob {digest}: {error}")),
    }
}

/// Copies `reader` to a temporary file beside `path`, then renames it to
/// `path`: a download that fails leaves `path` as it was.
async fn to_file(
    reader: &mut cohort_client::BlobReader,
    path: &std::path::Path,
) -> Result<(), String> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temporary = tempfile::NamedTempFile::new_in(&dir)
        .map_err(|e| format!("cannot write in {}: {e}", dir.display()))?;
    let mut file = tokio::fs::File::from_std(temporary.reopen().map_err(|e| e.to_string())?);
    copy(reader, &mut file).await?;
    file.sync_all().await.map_err(|e| e.to_string())?;
    temporary
        .persist(path)
        .map(drop)
        .map_err(|e| format!("cannot write {}: {}", path.display(), e.error))
}

/// Copies `reader` to `out` in pieces of up to 1 MiB (`tokio::io::copy`
/// alone writes 8 KiB at a time, each write to a file a trip to a
/// blocking thread).
async fn copy(
    reader: &mut cohort_client::BlobReader,
    out: &mut (impl tokio::io::AsyncWrite + Unpin),
) -> Result<(), String> {
    let mut out = tokio::io::BufWriter::with_capacity(1 << 20, out);
    tokio::io::copy(reader, &mut out)
        .await
        .map_err(|e| e.to_string())?;
    out.flush().await.map_err(|e| e.to_string())
}

async fn list(args: BlobListArgs) -> ExitCode {
    let client = match client(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let listed = match args.cluster {
        false => client.list_blobs().await,
        true => kept(&client).await,
    };
    match listed {
        Ok(blobs) if args.server.json => print_json(&blobs),
        Ok(blobs) if blobs.is_empty() => println!("no blobs"),
        Ok(blobs) => {
            println!(
                "{:<64}  {:>15}  {:<5}  {:>4}  COLLECTED",
                "SHA256", "BYTES", "KEPT", "REFS"
            );
            for blob in &blobs {
                let kept = match blob.kept {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "?",
                };
                let refs = blob.refs.map_or("?".to_string(), |refs| refs.to_string());
                let collected = match (blob.kept, blob.collect_at) {
                    (Some(false), _) => "after this node's grace".to_string(),
                    (_, Some(at)) => match at.checked_sub(now_ms()) {
                        Some(left) => format!("in {} s", left.div_ceil(1000)),
                        None => "at the next sweep".to_string(),
                    },
                    (Some(true), None) => "not while named".to_string(),
                    (None, _) => "?".to_string(),
                };
                println!(
                    "{:<64}  {:>15}  {kept:<5}  {refs:>4}  {collected}",
                    blob.digest, blob.bytes
                );
            }
        }
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// Every blob the cluster keeps, page after page.
async fn kept(
    client: &Client,
) -> Result<Vec<cohort_client::types::BlobEntry>, cohort_client::ClientError> {
    let mut blobs = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = client.kept_blobs(after.as_deref(), Some(1_000)).await?;
        blobs.extend(page.blobs);
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(blobs),
        }
    }
}

/// Now, in ms since the Unix epoch.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |since| since.as_millis() as u64)
}

async fn remove(args: BlobRmArgs) -> ExitCode {
    let client = match client(&args.server) {
        Ok(client) => client,
        Err(code) => return code,
    };
    let digest = args.digest.trim();
    if args.purge {
        match client.purge_blob(digest).await {
            Ok(purged) if args.server.json => print_json(&purged),
            Ok(purged) => println!(
                "{}: no longer kept; {} finished job(s) forgot it",
                purged.digest, purged.jobs
            ),
            Err(error) => return fail(error),
        }
        return ExitCode::SUCCESS;
    }
    match client.delete_blob(digest).await {
        Ok(deleted) if args.server.json => print_json(&deleted),
        Ok(deleted) => println!("{}: no longer kept", deleted.digest),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_the_help_says() {
        assert_eq!(parse_range("0-9"), Ok(Range::From(0, Some(9))));
        assert_eq!(parse_range("10-"), Ok(Range::From(10, None)));
        assert_eq!(parse_range("-100"), Ok(Range::Last(100)));
        for bad in ["9-0", "x-1", "5", "", "-", "1-2-3"] {
            assert!(parse_range(bad).is_err(), "{bad}");
        }
    }
}
