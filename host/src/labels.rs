//! Labels as typed on a command line (`cohort node --labels`, `cohort
//! submit --labels`): `key=value` pairs separated by commas. What a label
//! may be, and how a job's labels match a worker's, is the master's
//! (`cohort_master::pools`); this only reads the text.

/// Labels read from `key=value,...`: sorted by key, each key once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Labels(pub Vec<(String, String)>);

/// Parses `key=value,key=value` (empty: no labels), refusing a pair
/// without `=`, a key given twice, and a key or value the master would
/// refuse ([`cohort_master::check_labels`]).
pub fn parse_labels(text: &str) -> Result<Labels, String> {
    let mut labels = Vec::new();
    for pair in text
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
    {
        let (key, value) =
            (pair.split_once('=')).ok_or_else(|| format!("label {pair:?} is not KEY=VALUE"))?;
        labels.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    labels.sort();
    if let Some(pair) = labels.windows(2).find(|pair| pair[0].0 == pair[1].0) {
        return Err(format!("label key {:?} is given twice", pair[0].0));
    }
    cohort_master::check_labels(&labels)?;
    Ok(Labels(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_sorted_and_bad_ones_are_refused_with_why() {
        let labels = parse_labels("zone=eu, gpu=a100").unwrap();
        let pairs = [("gpu", "a100"), ("zone", "eu")];
        let want: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(labels, Labels(want));
        assert_eq!(parse_labels(""), Ok(Labels::default()));
        for (text, why) in [
            ("gpu", "is not KEY=VALUE"),
            ("gpu=a,gpu=b", "given twice"),
            ("GPU=a100", "label key"),
            ("gpu=", "label value"),
            ("gpu=a b", "label value"),
        ] {
            let error = parse_labels(text).unwrap_err();
            assert!(error.contains(why), "{text:?}: {error}");
        }
    }
}
