//! `cohort secret set|list|delete`: values a grant's headers name
//! (`cohort grant pay --http https://api.example.com --header
//! 'Authorization: Bearer {secret:STRIPE}'`), so the node adds them to the
//! job's requests and the job never holds them. A value is read from
//! standard input, never from the command line (where `ps` and shell
//! history would keep it).

use super::{ServerArg, fail, print_json};
use crate::limits::SECRET_VALUE_BYTES_MAX;
use std::io::Read;
use std::process::ExitCode;

/// `cohort secret ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum SecretCommand {
    /// Set a secret to the value read from standard input (one trailing
    /// newline is dropped).
    Set(SecretNameArgs),
    /// List the secrets: names, when each was set, who uses it (never a
    /// value).
    List(SecretListArgs),
    /// Delete a secret (refused while a grant names it).
    Delete(SecretNameArgs),
}

/// A secret by name.
#[derive(Debug, Clone, clap::Args)]
pub struct SecretNameArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The secret's name: 1 to 64 of `A-Z 0-9 _`, not starting with a
    /// digit.
    pub name: String,
}

/// `cohort secret list`.
#[derive(Debug, Clone, clap::Args)]
pub struct SecretListArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
}

/// Runs a `cohort secret` command.
pub async fn secret(command: SecretCommand) -> ExitCode {
    match command {
        SecretCommand::Set(args) => set(args).await,
        SecretCommand::List(args) => list(args).await,
        SecretCommand::Delete(args) => delete(args).await,
    }
}

/// The value on standard input, without one trailing newline.
fn read_value() -> Result<String, String> {
    let mut value = Vec::new();
    let limit = (SECRET_VALUE_BYTES_MAX + 2) as u64;
    std::io::stdin()
        .take(limit)
        .read_to_end(&mut value)
        .map_err(|e| format!("cannot read the value from standard input: {e}"))?;
    if value.ends_with(b"\n") {
        value.pop();
        if value.ends_with(b"\r") {
            value.pop();
        }
    }
    String::from_utf8(value).map_err(|_| "a secret's value is UTF-8 text".to_owned())
}

async fn set(args: SecretNameArgs) -> ExitCode {
    let value = match read_value() {
        Ok(value) => value,
        Err(error) => return fail(error),
    };
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let (name, value) = (&args.name, &value);
    match client
        .call(|node| async move { node.set_secret(name, value).await })
        .await
    {
        Ok(set) if args.server.json => print_json(&set),
        Ok(set) if set.created => println!("secret {} set", set.name),
        Ok(set) => println!("secret {} replaced", set.name),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

async fn list(args: SecretListArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    match client
        .call(|node| async move { node.secrets().await })
        .await
    {
        Ok(list) if args.server.json => print_json(&list),
        Ok(list) if list.secrets.is_empty() => println!("no secrets"),
        Ok(list) => {
            println!("{:<32} {:>15}  USED BY", "NAME", "SET AT (ms)");
            for secret in &list.secrets {
                println!(
                    "{:<32} {:>15}  {}",
                    secret.name,
                    secret.updated_at,
                    secret.used_by.join(", ")
                );
            }
        }
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// Sent to one node only: a delete repeated after a lost answer would say
/// `secret_not_found`.
async fn delete(args: SecretNameArgs) -> ExitCode {
    let node = match args.server.node() {
        Ok(node) => node,
        Err(error) => return fail(error),
    };
    match node.delete_secret(&args.name).await {
        Ok(deleted) if args.server.json => print_json(&deleted),
        Ok(deleted) => println!("secret {} deleted", deleted.name),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}
