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

/// One level of the tree: what the next entry of a request descriptor can
/// match, by its key.
#[derive(Debug, Default)]
pub struct Node {
    pub keys: HashMap<String, KeyDescriptors>,
}

/// The descriptors of one level that share a key.
#[derive(Debug, Default)]
pub struct KeyDescriptors {
    /// Values without a `*`.
    pub values: HashMap<String, Child>,
    /// Values with a `*`, in config order (the first match wins).
    pub globs: Vec<(Glob, Child)>,
    /// The key without a value.
    pub any: Option<Child>,
}

/// A value with `*`s: each `*` stands for any run of characters, the empty
/// one included; everything else is literal.
#[derive(Debug)]
pub struct Glob {
    /// The value as written, `*`s included.
    pub text: String,
    /// `text` split at its `*`s: at least two parts, some maybe empty.
    parts: Vec<String>,
}

impl Glob {
    /// None for a value without a `*` (a literal).
    pub fn new(text: &str) -> Option<Glob> {
        if !text.contains('*') {
            return None;
        }
        Some(Glob {
            text: text.to_string(),
            parts: text.split('*').map(str::to_string).collect(),
        })
    }

    /// Whether `value` matches: it starts with the first part and ends with
    /// the last one (not overlapping), and the parts between occur in order
    /// in what is left. Taking each inner part at its leftmost occurrence
    /// never loses a match, so there is no backtracking: one pass of
    /// `str::find` a part, no allocation.
    pub fn matches(&self, value: &str) -> bool {
        let [first, inner @ .., last] = self.parts.as_slice() else {
            return false;
        };
        let Some(mut left) = value
            .strip_prefix(first.as_str())
            .and_then(|v| v.strip_suffix(last.as_str()))
        else {
            return false;
        };
        for part in inner {
            match left.find(part.as_str()) {
                Some(at) => left = &left[at + part.len()..],
                None => return false,
            }
        }
        true
    }
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
        // An empty value is no value, as the reference's loadDescriptors
        // reads it: the limit covers every value of the key. Read as the
        // literal "", it would apply to almost no request (fail open).
        let value = d.value.as_deref().filter(|v| !v.is_empty());
        let here = format!(
            "descriptor {}.{}{}",
            domain,
            path.iter().map(|p| format!("{p}.")).collect::<String>(),
            match value {
                Some(v) => format!("{}={}", d.key, v),
                None => d.key.clone(),
            }
        );
        if d.key.is_empty() {
            return Err(format!("{here}: key: empty"));
        }
        let stat = match value {
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
        let twice = || format!("{here}: defined twice at this level");
        let same_key = node.keys.entry(d.key.clone()).or_default();
        match value {
            None => {
                if same_key.any.replace(child).is_some() {
                    return Err(twice());
                }
            }
            Some(v) => match Glob::new(v) {
                Some(glob) => {
                    if same_key.globs.iter().any(|(g, _)| g.text == glob.text) {
                        return Err(twice());
                    }
                    same_key.globs.push((glob, child));
                }
                None => {
                    if same_key.values.insert(v.to_string(), child).is_some() {
                        return Err(twice());
                    }
                }
            },
        }
    }
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
        let tenant = d.root.keys["tenant"].any.as_ref().unwrap();
        assert!(tenant.limit.is_some());
        let inner = &tenant.node.keys["path"].values["/x"];
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
    fn a_star_anywhere_in_a_value_is_a_glob() {
        let glob = |p: &str| Glob::new(p).unwrap();
        assert!(Glob::new("plain").is_none());
        let mid = glob("bar*b");
        for v in ["barab", "barb", "bar123b", "barbb"] {
            assert!(mid.matches(v), "bar*b ~ {v}");
        }
        for v in ["bara", "xbarb", "bar", "b", ""] {
            assert!(!mid.matches(v), "bar*b !~ {v}");
        }
        let multi = glob("foo*bar*baz");
        for v in [
            "foo123bar456baz",
            "foobarbaz",
            "foobarbarbaz",
            "foobazbarbaz",
        ] {
            assert!(multi.matches(v), "foo*bar*baz ~ {v}");
        }
        for v in [
            "foo123bar456ba",
            "foo123baz",
            "bar456baz",
            "foobaz",
            "foobarbaz!",
        ] {
            assert!(!multi.matches(v), "foo*bar*baz !~ {v}");
        }
        // The first and last parts may not share characters.
        assert!(!glob("ab*ba").matches("aba"));
        assert!(glob("ab*ba").matches("abba"));
        // A trailing star is a prefix; a leading one a suffix; a lone one
        // anything, the empty value included; `**` is one star.
        assert!(glob("/api*").matches("/api") && glob("/api*").matches("/api/v1"));
        assert!(!glob("/api*").matches("/ap"));
        assert!(glob("*.png").matches("a.png") && !glob("*.png").matches("a.png.txt"));
        assert!(glob("*").matches("") && glob("*").matches("anything"));
        assert!(glob("a**b").matches("ab") && glob("a**b").matches("axyb"));
        // Multi-byte characters are matched whole.
        assert!(glob("é*ü").matches("é—ü") && !glob("é*ü").matches("éu"));
    }

    #[test]
    fn duplicates_and_replaces_are_checked() {
        let twice = |v: &str| {
            load_one(&format!(
                "domain: d\ndescriptors:\n  - key: a\n    value: '{v}'\n  - key: a\n    value: '{v}'\n"
            ))
            .unwrap_err()
            .message
        };
        assert!(twice("x").contains("twice"));
        assert!(twice("x*y").contains("twice"));
        // Two globs that overlap, a literal that a glob matches: all allowed.
        assert!(load_one(
            "domain: d\ndescriptors:\n  - key: a\n    value: 'x*'\n  - key: a\n    value: 'x*y'\n  - key: a\n    value: xy\n  - key: a\n"
        )
        .is_ok());
        assert!(load_one("domain: d\ndescriptors:\n  - key: a\n  - key: a\n").is_err());
        assert!(load_one(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nope}]}\n"
        )
        .is_err());
    }
}
