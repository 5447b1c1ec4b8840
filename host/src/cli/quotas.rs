//! `cohort quota set|clear NAMESPACE`: how much of the cluster a namespace
//! may hold (`cohort_master::quotas`). `set` gives all four quotas at
//! once, as the API does: a flag left out is no quota, so what the
//! command line says is what the namespace has. `cohort weight NAMESPACE
//! N`: its weight for its fair share of the workers
//! (`cohort_master::shares`).

use super::{ServerArg, fail, print_json};
use crate::client::QuotasBody;
use crate::runtime::job_limits;
use std::process::ExitCode;

/// `cohort quota ...`.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum QuotaCommand {
    /// Set a namespace's quotas (every one not given is no quota).
    Set(QuotaSetArgs),
    /// Remove every quota of a namespace.
    Clear(QuotaNameArgs),
}

/// `cohort quota set`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaSetArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The namespace (`default` for the default one).
    pub namespace: String,
    /// Most jobs waiting; past it a submission is refused
    /// (`quota_exceeded`).
    #[arg(long)]
    pub waiting_max: Option<u64>,
    /// Most attempts running at once; more wait in line.
    #[arg(long)]
    pub running_max: Option<u32>,
    /// Most jobs submitted a second.
    #[arg(long)]
    pub submissions_per_second: Option<u32>,
    /// Most bytes of results its jobs keep (e.g. `10GiB`).
    #[arg(long, value_parser = job_limits::parse_bytes)]
    pub result_bytes_max: Option<u64>,
}

/// `cohort quota clear`.
#[derive(Debug, Clone, clap::Args)]
pub struct QuotaNameArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The namespace (`default` for the default one).
    pub namespace: String,
}

/// `cohort weight`.
#[derive(Debug, Clone, clap::Args)]
pub struct WeightArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub server: ServerArg,
    /// The namespace (`default` for the default one).
    pub namespace: String,
    /// 1 (the default) to 10,000: namespaces competing for workers get CPU
    /// time in proportion to their weights.
    pub weight: u32,
}

/// Runs `cohort weight`.
pub async fn weight(args: WeightArgs) -> ExitCode {
    if let Err(why) = cohort_master::namespaces::check_name(&args.namespace) {
        return fail(why);
    }
    if let Err(why) = cohort_master::shares::check_weight(args.weight) {
        return fail(why);
    }
    let client = match args.server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let (namespace, weight) = (&args.namespace, args.weight);
    match client
        .call(|node| async move { node.set_weight(namespace, weight).await })
        .await
    {
        Ok(set) if args.server.json => print_json(&set),
        Ok(set) => println!("namespace {}: weight {}", set.namespace, set.weight),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// Runs a `cohort quota` command.
pub async fn quota(command: QuotaCommand) -> ExitCode {
    let (server, namespace, quotas) = match command {
        QuotaCommand::Set(args) => {
            let quotas = QuotasBody {
                waiting_max: args.waiting_max,
                running_max: args.running_max,
                submissions_per_second: args.submissions_per_second,
                result_bytes_max: args.result_bytes_max,
            };
            if quotas == QuotasBody::default() {
                return fail("give at least one quota (`cohort quota clear` removes them)");
            }
            (args.server, args.namespace, quotas)
        }
        QuotaCommand::Clear(args) => (args.server, args.namespace, QuotasBody::default()),
    };
    if let Err(why) = cohort_master::namespaces::check_name(&namespace) {
        return fail(why);
    }
    if let Err(why) = cohort_master::quotas::check(&crate::api::namespaces::quotas_of(&quotas)) {
        return fail(why);
    }
    let client = match server.client() {
        Ok(client) => client,
        Err(error) => return fail(error),
    };
    let (namespace, quotas) = (&namespace, &quotas);
    match client
        .call(|node| async move { node.set_quotas(namespace, quotas).await })
        .await
    {
        Ok(set) if server.json => print_json(&set),
        Ok(set) => println!("namespace {}: {}", set.namespace, describe(&set.quotas)),
        Err(error) => return fail(error),
    }
    ExitCode::SUCCESS
}

/// A namespace's quotas in a few words (`no quotas` when none).
pub fn describe(quotas: &QuotasBody) -> String {
    let mut words = Vec::new();
    if let Some(max) = quotas.waiting_max {
        words.push(format!("waiting<={max}"));
    }
    if let Some(max) = quotas.running_max {
        words.push(format!("running<={max}"));
    }
    if let Some(rate) = quotas.submissions_per_second {
        words.push(format!("submissions<={rate}/s"));
    }
    if let Some(max) = quotas.result_bytes_max {
        words.push(format!("results<={max}B"));
    }
    match words.is_empty() {
        true => "no quotas".to_owned(),
        false => words.join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_are_described_in_a_few_words() {
        assert_eq!(describe(&QuotasBody::default()), "no quotas");
        let quotas = QuotasBody {
            waiting_max: Some(10),
            running_max: Some(2),
            submissions_per_second: Some(5),
            result_bytes_max: Some(1024),
        };
        assert_eq!(
            describe(&quotas),
            "waiting<=10 running<=2 submissions<=5/s results<=1024B"
        );
    }
}
