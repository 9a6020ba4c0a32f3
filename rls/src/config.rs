//! The config room: envoyproxy/ratelimit's YAML (one domain a file, or one
//! file) read with serde, validated, and compiled into a lookup tree per
//! domain. Nothing here talks to Valkey or gRPC; `limits` matches a request's
//! descriptors against what this builds.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The unit of `requests_per_unit`, as in the reference (case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
}

impl Unit {
    pub fn window_ms(self) -> u64 {
        match self {
            Unit::Second => 1_000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => 86_400_000,
            Unit::Week => 7 * 86_400_000,
        }
    }

    pub fn parse(s: &str) -> Option<Unit> {
        Some(match s.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            _ => return None,
        })
    }
}

impl<'de> Deserialize<'de> for Unit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unit, D::Error> {
        let s = String::deserialize(d)?;
        Unit::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "rate_limit.unit: unknown unit '{s}' (second, minute, hour, day or week)"
            ))
        })
    }
}

/// The extension `algorithm`: the module's ALGO names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Algorithm {
    #[default]
    Fixed,
    Sliding,
    Token,
    Gcra,
    Leaky,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Fixed => "fixed",
            Algorithm::Sliding => "sliding",
            Algorithm::Token => "token",
            Algorithm::Gcra => "gcra",
            Algorithm::Leaky => "leaky",
        }
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Algorithm, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.to_ascii_lowercase().as_str() {
            "fixed" => Algorithm::Fixed,
            "sliding" => Algorithm::Sliding,
            "token" => Algorithm::Token,
            "gcra" => Algorithm::Gcra,
            "leaky" => Algorithm::Leaky,
            _ => {
                return Err(serde::de::Error::custom(format!(
                    "rate_limit.algorithm: unknown algorithm '{s}' (fixed, sliding, token, gcra or leaky)"
                )))
            }
        })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Replaces {
    pub name: String,
}

/// `rate_limit` as written, before the checks `RateLimit::try_from` makes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    requests_per_unit: Option<u64>,
    unit: Option<Unit>,
    #[serde(default)]
    unlimited: bool,
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<Replaces>,
    // Extensions (not in the reference).
    algorithm: Option<Algorithm>,
    burst: Option<u64>,
    meta: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(try_from = "RawRateLimit")]
pub struct RateLimit {
    pub requests_per_unit: u64,
    pub unit: Unit,
    pub unlimited: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<Replaces>,
    pub algorithm: Algorithm,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<String>,
}

impl TryFrom<RawRateLimit> for RateLimit {
    type Error = String;
    fn try_from(r: RawRateLimit) -> Result<RateLimit, String> {
        let algorithm = r.algorithm.unwrap_or_default();
        if r.unlimited {
            if r.requests_per_unit.is_some() || r.unit.is_some() {
                return Err(
                    "rate_limit: unlimited: true takes no unit or requests_per_unit".into(),
                );
            }
        } else if r.meta.is_none() {
            if r.unit.is_none() {
                return Err("rate_limit.unit: missing (second, minute, hour, day or week)".into());
            }
            if r.requests_per_unit.is_none() {
                return Err("rate_limit.requests_per_unit: missing".into());
            }
        }
        if r.burst.is_some() && matches!(algorithm, Algorithm::Fixed | Algorithm::Sliding) {
            return Err(format!(
                "rate_limit.burst: does not apply to algorithm {} (token, gcra or leaky)",
                algorithm.name()
            ));
        }
        if let Some(m) = &r.meta {
            if m.is_empty() {
                return Err("rate_limit.meta: an empty key".into());
            }
        }
        if let Some(n) = r.requests_per_unit {
            if n > i64::MAX as u64 {
                return Err("rate_limit.requests_per_unit: too large".into());
            }
        }
        if let Some(n) = r.burst {
            if n > i64::MAX as u64 {
                return Err("rate_limit.burst: too large".into());
            }
        }
        Ok(RateLimit {
            requests_per_unit: r.requests_per_unit.unwrap_or(0),
            unit: r.unit.unwrap_or(Unit::Second),
            unlimited: r.unlimited,
            name: r.name,
            replaces: r.replaces,
            algorithm,
            burst: r.burst,
            meta: r.meta,
        })
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DescriptorConfig {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<RateLimit>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub descriptors: Vec<DescriptorConfig>,
    #[serde(default)]
    pub shadow_mode: bool,
    #[serde(default)]
    pub detailed_metric: bool,
}

/// One domain's file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    pub domain: String,
    #[serde(default)]
    pub descriptors: Vec<DescriptorConfig>,
    /// Extension: which hash tag a limiter key carries in a Cluster:
    /// `domain`, or `entry:<key>` (the value of that descriptor entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_tag: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HashTag {
    None,
    Domain,
    Entry(String),
}

/// A limit in the compiled tree.
#[derive(Debug)]
pub struct Limit {
    pub rate: RateLimit,
    pub shadow_mode: bool,
    pub detailed_metric: bool,
    /// The config path, `key_value` or `key` a level: the metric's key.
    pub stat_path: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Node {
    /// `key` + '\0' + `value` for entries with a value; `key` alone for a
    /// key without one.
    pub exact: HashMap<String, Child>,
    /// Values ending in `*`: (key, prefix).
    pub prefix: Vec<(String, String, Child)>,
}

#[derive(Debug)]
pub struct Child {
    pub limit: Option<Arc<Limit>>,
    pub node: Node,
}

#[derive(Debug)]
pub struct Domain {
    pub name: String,
    pub hash_tag: HashTag,
    pub root: Node,
}

/// The whole loaded config: domains by name, and what /config shows.
#[derive(Debug)]
pub struct Config {
    pub domains: HashMap<String, Domain>,
    pub sources: BTreeMap<String, DomainConfig>,
}

/// Why a load failed: the file and serde's message, which names the line,
/// column and field.
#[derive(Debug)]
pub struct LoadError {
    pub file: PathBuf,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.file.display(), self.message)
    }
}

/// The files `path` names: itself, or the `*.yaml`/`*.yml` files of a
/// directory (not hidden, sorted).
pub fn files(path: &Path) -> Result<Vec<PathBuf>, LoadError> {
    let err = |e: std::io::Error| LoadError {
        file: path.to_path_buf(),
        message: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(err)?;
    if meta.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path).map_err(err)? {
        let p = entry.map_err(err)?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        if p.is_file() {
            out.push(p);
        }
    }
    out.sort();
    Ok(out)
}

/// Each file's bytes: what the watcher compares.
pub fn snapshot(path: &Path) -> Result<Vec<(PathBuf, Vec<u8>)>, LoadError> {
    files(path)?
        .into_iter()
        .map(|f| {
            std::fs::read(&f)
                .map(|b| (f.clone(), b))
                .map_err(|e| LoadError {
                    file: f,
                    message: e.to_string(),
                })
        })
        .collect()
}

/// Parses and compiles every file; the first bad one fails the load.
pub fn load(snapshot: &[(PathBuf, Vec<u8>)]) -> Result<Config, LoadError> {
    let mut domains = HashMap::new();
    let mut sources = BTreeMap::new();
    for (file, bytes) in snapshot {
        let fail = |message: String| LoadError {
            file: file.clone(),
            message,
        };
        let text = std::str::from_utf8(bytes).map_err(|e| fail(format!("not UTF-8: {e}")))?;
        let dc: DomainConfig = serde_yaml_ng::from_str(text).map_err(|e| fail(e.to_string()))?;
        let domain = compile(&dc).map_err(fail)?;
        if domains.contains_key(&domain.name) {
            return Err(fail(format!("domain: '{}' is defined twice", domain.name)));
        }
        sources.insert(dc.domain.clone(), dc);
        domains.insert(domain.name.clone(), domain);
    }
    Ok(Config { domains, sources })
}

fn compile(dc: &DomainConfig) -> Result<Domain, String> {
    if dc.domain.is_empty() {
        return Err("domain: empty".into());
    }
    let hash_tag = match dc.hash_tag.as_deref() {
        None => HashTag::None,
        Some("domain") => HashTag::Domain,
        Some(s) => match s.strip_prefix("entry:") {
            Some(k) if !k.is_empty() => HashTag::Entry(k.to_string()),
            _ => {
                return Err(format!(
                    "hash_tag: '{s}' is neither 'domain' nor 'entry:<descriptor key>'"
                ))
            }
        },
    };
    let mut names = Vec::new();
    let root = compile_level(&dc.descriptors, &mut Vec::new(), &dc.domain, &mut names)?;
    // Every replaced name must exist.
    let mut all = std::collections::HashSet::new();
    for n in names.iter().filter_map(|(n, _)| n.as_ref()) {
        if !all.insert(n.clone()) {
            return Err(format!("rate_limit.name: '{n}' is used twice"));
        }
    }
    for (_, replaces) in &names {
        for r in replaces {
            if !all.contains(r) {
                return Err(format!("rate_limit.replaces: no rate limit is named '{r}'"));
            }
        }
    }
    Ok(Domain {
        name: dc.domain.clone(),
        hash_tag,
        root,
    })
}

fn compile_level(
    list: &[DescriptorConfig],
    path: &mut Vec<String>,
    domain: &str,
    names: &mut Vec<(Option<String>, Vec<String>)>,
) -> Result<Node, String> {
    let mut node = Node::default();
    for d in list {
        let here = format!(
            "descriptor {}.{}{}",
            domain,
            path.iter().map(|p| format!("{p}.")).collect::<String>(),
            match &d.value {
                Some(v) => format!("{}={}", d.key, v),
                None => d.key.clone(),
            }
        );
        if d.key.is_empty() {
            return Err(format!("{here}: key: empty"));
        }
        let stat = match &d.value {
            Some(v) => format!("{}_{}", d.key, v),
            None => d.key.clone(),
        };
        path.push(stat);
        let limit = match &d.rate_limit {
            Some(rate) => {
                names.push((
                    rate.name.clone(),
                    rate.replaces.iter().map(|r| r.name.clone()).collect(),
                ));
                Some(Arc::new(Limit {
                    rate: rate.clone(),
                    shadow_mode: d.shadow_mode,
                    detailed_metric: d.detailed_metric,
                    stat_path: path.clone(),
                }))
            }
            None => None,
        };
        let child = Child {
            limit,
            node: compile_level(&d.descriptors, path, domain, names)?,
        };
        path.pop();
        match &d.value {
            Some(v) if v.ends_with('*') => {
                let prefix = v[..v.len() - 1].to_string();
                if node
                    .prefix
                    .iter()
                    .any(|(k, p, _)| *k == d.key && *p == prefix)
                {
                    return Err(format!("{here}: defined twice at this level"));
                }
                node.prefix.push((d.key.clone(), prefix, child));
            }
            _ => {
                let id = match &d.value {
                    Some(v) => format!("{}\0{}", d.key, v),
                    None => d.key.clone(),
                };
                if node.exact.insert(id, child).is_some() {
                    return Err(format!("{here}: defined twice at this level"));
                }
            }
        }
    }
    // Longest prefix first.
    node.prefix.sort_by_key(|p| std::cmp::Reverse(p.1.len()));
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_one(text: &str) -> Result<Config, LoadError> {
        load(&[(PathBuf::from("t.yaml"), text.as_bytes().to_vec())])
    }

    #[test]
    fn reference_format_loads() {
        let c = load_one(
            "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: MINUTE, requests_per_unit: 5}\n    descriptors:\n      - key: path\n        value: /x\n        shadow_mode: true\n        rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: 3, name: a}\n  - key: k\n    rate_limit: {unlimited: true}\n",
        )
        .unwrap();
        let d = &c.domains["d"];
        assert!(d.root.exact["tenant"].limit.is_some());
        let inner = &d.root.exact["tenant"].node.exact["path\0/x"];
        let l = inner.limit.as_ref().unwrap();
        assert_eq!(l.rate.algorithm, Algorithm::Gcra);
        assert!(l.shadow_mode);
        assert_eq!(
            l.stat_path,
            vec!["tenant".to_string(), "path_/x".to_string()]
        );
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = load_one("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("t.yaml") && e.contains("line 5") && e.contains("unit"),
            "{e}"
        );
        let e = load_one("domain: d\ndescriptors:\n  - key: a\n    rate_limt: {unit: second}\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("rate_limt"), "{e}");
        let e = load_one("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n")
            .unwrap_err()
            .to_string();
        // A check across fields names the descriptor's line and its path.
        assert!(
            e.contains("rate_limit.burst") && e.contains("descriptors[0]") && e.contains("line 3"),
            "{e}"
        );
    }

    #[test]
    fn a_directory_is_one_domain_a_file() {
        let dir = std::env::temp_dir().join(format!("rls-config-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.yaml"), "domain: a\n").unwrap();
        std::fs::write(dir.join("b.yml"), "domain: b\n").unwrap();
        std::fs::write(dir.join(".hidden.yaml"), "not: yaml: at all").unwrap();
        std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
        let c = load(&snapshot(&dir).unwrap()).unwrap();
        let mut names: Vec<&String> = c.domains.keys().collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
        std::fs::write(dir.join("c.yaml"), "domain: a\n").unwrap();
        let e = load(&snapshot(&dir).unwrap()).unwrap_err();
        assert!(
            e.to_string().contains("c.yaml") && e.message.contains("twice"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn duplicates_and_replaces_are_checked() {
        assert!(load_one("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").is_err());
        assert!(load_one(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nope}]}\n"
        )
        .is_err());
    }
}
