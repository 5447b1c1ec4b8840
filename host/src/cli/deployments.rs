//! `cohort deploy`, `rollback`, `deployments` and `undeploy`: names that
//! point at modules, so jobs and schedules name what they run
//! (`cohort submit send-email`) and survive a rebuild; `cohort grant` and
//! `revoke`: what a name's jobs may reach over HTTP(S) and which secrets
//! they may read.

use super::{ServerArg, fail, print_json};
use crate::api::types::{
    DeployResponse, DeploymentResponse, DeploymentVersion, GrantRequest, GrantsResponse,
    HttpGrantBody,
};
use std::process::ExitCode;

/// `cohort deploy NAME MODULE`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeployArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The name (1 to 63 characters of `a-z 0-9 . _ -`, starting with a
    /// letter or digit).
    pub name: String,
    /// A job module file (`.wasm`, uploaded first) or the sha256 of a
    /// module already uploaded.
    pub module: String,
}

/// `cohort rollback NAME`.
#[derive(Debug, Clone, clap::Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The deployment's name.
    pub name: String,
    /// The version to return to [default: the one before the current one].
    #[arg(long)]
    pub to: Option<u32>,
}

/// `cohort deployments [NAME]` and `cohort undeploy NAME`.
#[derive(Debug, Clone, clap::Args)]
pub struct DeploymentArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// One deployment's name (with its versions) [default: every name].
    pub name: Option<String>,
}

/// `cohort undeploy NAME`.
#[derive(Debug, Clone, clap::Args)]
pub struct UndeployArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The deployment's name.
    pub name: String,
}

/// `cohort grant NAME --http URL... [--secret SECRET...]`.
#[derive(Debug, Clone, clap::Args)]
pub struct GrantArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The deployment's name.
    pub name: String,
    /// What its jobs may call: `scheme://host[:port][/path]`, e.g.
    /// `https://api.example.com/v1/`, `https://*.example.com`,
    /// `http://10.0.0.5:8080`, `http://[fd00::5]:*` (repeatable).
    #[arg(long = "http", value_name = "URL", required_unless_present = "secrets")]
    pub http: Vec<String>,
    /// A secret (`cohort secret set`) the jobs may read themselves, with
    /// the job SDKs' `secret(name)`; its value is masked in their logs
    /// (repeatable). A secret only a `--header` names stays unreadable.
    #[arg(long = "secret", value_name = "SECRET")]
    pub secrets: Vec<String>,
    /// Methods allowed, comma-separated [default: any].
    #[arg(long, value_delimiter = ',', value_name = "METHOD")]
    pub methods: Vec<String>,
    /// Let a host name resolve to a private, loopback or link-local
    /// address (an address written in the URL is always allowed).
    #[arg(long)]
    pub private: bool,
    /// A header the node sets on every request the grant allows, as
    /// `Name: value`; `{secret:NAME}` in the value is filled in from the
    /// cluster's secrets (`cohort secret set`), so the job never holds it
    /// (repeatable).
    #[arg(long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
    /// Record every call the grant allows (its response made durable before
    /// the job sees it, and replayed to a later attempt instead of being
    /// sent again) [default: calls whose method is not GET, HEAD or
    /// OPTIONS].
    #[arg(long, conflicts_with = "no_record")]
    pub record: bool,
    /// Record no call the grant allows.
    #[arg(long)]
    pub no_record: bool,
}

/// `cohort revoke NAME [--http URL...]`.
#[derive(Debug, Clone, clap::Args)]
pub struct RevokeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The deployment's name.
    pub name: String,
    /// The grants to take, as granted (with the same `--methods` and
    /// `--private`) [default, with no `--secret` either: every grant and
    /// readable secret of the name].
    #[arg(long = "http", value_name = "URL")]
    pub http: Vec<String>,
    /// A secret the jobs may no longer read (repeatable).
    #[arg(long = "secret", value_name = "SECRET")]
    pub secrets: Vec<String>,
    /// The methods the grants were given with.
    #[arg(long, value_delimiter = ',', value_name = "METHOD")]
    pub methods: Vec<String>,
    /// The grants were given with `--private`.
    #[arg(long)]
    pub private: bool,
    /// The headers the grants were given with.
    #[arg(long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,
}

/// The grants of `urls`, each with `methods`, `private`, `headers`
/// (`Name: value` each) and `record`.
fn grant_bodies(
    urls: &[String],
    methods: &[String],
    private: bool,
    headers: &[String],
    record: Option<bool>,
) -> Result<Vec<HttpGrantBody>, String> {
    let mut set = std::collections::BTreeMap::new();
    for header in headers {
        let (name, value) = header
            .split_once(':')
            .ok_or_else(|| format!("--header {header:?}: give it as `Name: value`"))?;
        set.insert(name.trim().to_owned(), value.trim().to_owned());
    }
    Ok((urls.iter())
        .map(|url| HttpGrantBody {
            url: url.clone(),
            methods: methods.to_vec(),
            private,
            headers: set.clone(),
            record,
        })
        .collect())
}

/// `cohort grant`: safe to repeat (a grant held already is not added).
pub async fn grant(args: GrantArgs) -> ExitCode {
    let record = match (args.record, args.no_record) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    };
    let request = grant_bodies(
        &args.http,
        &args.methods,
        args.private,
        &args.headers,
        record,
    )
    .map(|http| GrantRequest {
        http,
        secrets: args.secrets.clone(),
    });
    change_grants(&args.server, &args.name, request, false).await
}

/// `cohort revoke`: safe to repeat.
pub async fn revoke(args: RevokeArgs) -> ExitCode {
    let request =
        grant_bodies(&args.http, &args.methods, args.private, &args.headers, None).map(|http| {
            GrantRequest {
                http,
                secrets: args.secrets.clone(),
            }
        });
    change_grants(&args.server, &args.name, request, true).await
}

/// Adds the grants and readable secrets of `request` to `name` (takes
/// them away when `revoke`; all of them for an empty request) and prints
/// what it holds after.
async fn change_grants(
    server: &ServerArg,
    name: &str,
    request: Result<GrantRequest, String>,
    revoke: bool,
) -> ExitCode {
    let client = match server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let request = match request {
        Ok(request) => request,
        Err(error) => return fail(error),
    };
    let request = &request;
    let changed = client
        .call(|node| async move {
            match revoke && request.http.is_empty() && request.secrets.is_empty() {
                true => node.revoke(name, &[]).await,
                false => node.change_grants(name, request, revoke).await,
            }
        })
        .await;
    match changed {
        Ok(now) => print_grants(&now, server.json),
        Err(error) => fail(error),
    }
}

fn print_grants(grants: &GrantsResponse, json: bool) -> ExitCode {
    if json {
        print_json(grants);
        return ExitCode::SUCCESS;
    }
    if grants.http.is_empty() {
        println!("{} has no grants: its jobs have no network", grants.name);
    } else {
        println!("{} may call:", grants.name);
        for grant in &grants.http {
            println!("  {}", grant_line(grant));
        }
    }
    if !grants.secrets.is_empty() {
        println!("its jobs may read: {}", grants.secrets.join(", "));
    }
    ExitCode::SUCCESS
}

fn grant_line(grant: &HttpGrantBody) -> String {
    let methods = match grant.methods.is_empty() {
        true => "any method".to_owned(),
        false => grant.methods.join(","),
    };
    let private = if grant.private {
        ", private addresses"
    } else {
        ""
    };
    let headers: String = (grant.headers.iter())
        .map(|(name, value)| format!(", {name}: {value}"))
        .collect();
    // The default (every method but GET, HEAD and OPTIONS) goes unsaid.
    let record = match grant.record {
        None => "",
        Some(true) => ", records every call",
        Some(false) => ", records nothing",
    };
    format!("{} ({methods}{private}{headers}{record})", grant.url)
}

/// `cohort deploy`: uploads the module if it is a file, then points the
/// name at it. Safe to repeat: the same module again makes no version.
pub async fn deploy(args: DeployArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let path = std::path::Path::new(&args.module);
    let deployed = if path.is_file() {
        client.deploy_file(&args.name, path).await
    } else {
        let (name, digest) = (&args.name, &args.module);
        client
            .call(|node| async move { node.deploy(name, digest).await })
            .await
    };
    match deployed {
        Ok(deployed) => print_deployed(&deployed, args.server.json, "deployed"),
        Err(error) => fail(error),
    }
}

/// `cohort rollback`: sent to one node only, since a rollback repeated
/// after a lost answer would roll back again.
pub async fn rollback(args: RollbackArgs) -> ExitCode {
    let node = match args.server.node() {
        Ok(node) => node,
        Err(error) => return fail(error),
    };
    match node.rollback(&args.name, args.to).await {
        Ok(deployed) => print_deployed(&deployed, args.server.json, "rolled back"),
        Err(error) => fail(error),
    }
}

/// `cohort deployments`.
pub async fn deployments(args: DeploymentArgs) -> ExitCode {
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let json = args.server.json;
    if let Some(name) = &args.name {
        return match client
            .call(|node| async move { node.deployment(name).await })
            .await
        {
            Ok(deployment) if json => {
                print_json(&deployment);
                ExitCode::SUCCESS
            }
            Ok(deployment) => {
                print_deployment(&deployment);
                ExitCode::SUCCESS
            }
            Err(error) => fail(error),
        };
    }
    match client
        .call(|node| async move { node.deployments().await })
        .await
    {
        Ok(list) if json => print_json(&list),
        Ok(list) if list.deployments.is_empty() => println!("no deployments"),
        Ok(list) => {
            println!(
                "{:<24} {:>7}  {:<64}  DEPLOYED (ms)",
                "NAME", "VERSION", "MODULE"
            );
            for deployment in &list.deployments {
                let current = &deployment.current;
                println!(
                    "{:<24} {:>7}  {:<64}  {}",
                    deployment.name, current.version, current.digest, current.deployed_at
                );
            }
        }
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// `cohort undeploy`.
pub async fn undeploy(args: UndeployArgs) -> ExitCode {
    let node = match args.server.node() {
        Ok(node) => node,
        Err(error) => return fail(error),
    };
    match node.undeploy(&args.name).await {
        Ok(removed) if args.server.json => print_json(&removed),
        Ok(removed) => println!("undeployed {}", removed.name),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

fn print_deployed(deployed: &DeployResponse, json: bool, what: &str) -> ExitCode {
    if json {
        print_json(deployed);
    } else if deployed.existing {
        println!(
            "{} already runs {} (version {}); nothing changed",
            deployed.name, deployed.digest, deployed.version
        );
    } else {
        println!(
            "{what} {}: version {} runs {}",
            deployed.name, deployed.version, deployed.digest
        );
    }
    ExitCode::SUCCESS
}

fn print_deployment(deployment: &DeploymentResponse) {
    println!(
        "{}: version {} of {}",
        deployment.name, deployment.current.version, deployment.versions_total
    );
    println!(
        "{:>7}  {:<64}  {:<24}  NOTE",
        "VERSION", "MODULE", "DEPLOYED"
    );
    for version in &deployment.versions {
        println!("{}", version_line(version));
    }
    match deployment.grants.is_empty() {
        true => println!("grants: none (its jobs have no network)"),
        false => {
            println!("grants:");
            for grant in &deployment.grants {
                println!("  {}", grant_line(grant));
            }
        }
    }
    if !deployment.secrets.is_empty() {
        println!(
            "secrets its jobs may read: {}",
            deployment.secrets.join(", ")
        );
    }
}

fn version_line(version: &DeploymentVersion) -> String {
    let note = version
        .rollback_of
        .map(|of| format!("rollback to {of}"))
        .unwrap_or_default();
    format!(
        "{:>7}  {:<64}  {:<24}  {note}",
        version.version, version.digest, version.deployed_at
    )
}
