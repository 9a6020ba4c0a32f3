//! The matching room: a request's descriptors against the compiled config
//! (`config`), as envoyproxy/ratelimit matches them, giving each descriptor
//! its limit (or none), the limiter key it counts in, and the policy words
//! RL.ADMITALL takes. Pure: no I/O.

use std::sync::Arc;

use crate::config::{Algorithm, Child, Domain, HashTag, Limit, Node, RateLimit, Unit};

/// One descriptor's entries, as the request gives them.
pub type Entries<'a> = &'a [(String, String)];

/// Finds the limit of one descriptor: each entry walks one level down; the
/// limit is the one at the last entry's level (an intermediate level's limit
/// does not apply), as in the reference.
pub fn find(domain: &Domain, entries: Entries<'_>) -> Option<Arc<Limit>> {
    let mut node: &Node = &domain.root;
    let mut found = None;
    for (i, (k, v)) in entries.iter().enumerate() {
        let child = child(node, k, v)?;
        if i + 1 == entries.len() {
            found = child.limit.clone();
        }
        node = &child.node;
    }
    found
}

/// The descriptor one entry matches at a level, in envoyproxy/ratelimit's
/// order (`GetLimit` in src/config/config_impl.go): the value itself (a
/// glob's own text counts as itself there, since its map holds it under
/// that text), then the first glob in config order that matches (not the
/// most specific one), then the key without a value. A matching value stops
/// the search even when its descriptor has no limit of its own.
fn child<'n>(node: &'n Node, key: &str, value: &str) -> Option<&'n Child> {
    let at = node.keys.get(key)?;
    at.values
        .get(value)
        .or_else(|| {
            at.globs
                .iter()
                .find(|(g, _)| g.text == value)
                .map(|(_, c)| c)
        })
        .or_else(|| {
            at.globs
                .iter()
                .find(|(g, _)| g.matches(value))
                .map(|(_, c)| c)
        })
        .or(at.any.as_ref())
}

/// A limit given in the request itself (`RateLimitDescriptor.limit`, from
/// Envoy's dynamic metadata): it replaces the config's, as in the reference.
pub fn override_limit(
    base: Option<&Arc<Limit>>,
    requests_per_unit: u32,
    unit: Unit,
    entries: Entries<'_>,
) -> Arc<Limit> {
    let (shadow_mode, detailed_metric, name, algorithm, burst) = match base {
        Some(b) => (
            b.shadow_mode,
            b.detailed_metric,
            b.rate.name.clone(),
            b.rate.algorithm,
            b.rate.burst,
        ),
        None => (false, false, None, Algorithm::Fixed, None),
    };
    Arc::new(Limit {
        rate: RateLimit {
            requests_per_unit: u64::from(requests_per_unit),
            unit,
            unlimited: false,
            name,
            replaces: Vec::new(),
            algorithm,
            burst,
            meta: None,
        },
        shadow_mode,
        detailed_metric,
        stat_path: entries.iter().map(|(k, _)| k.clone()).collect(),
    })
}

/// Escapes the characters the key layout uses as separators.
fn escape(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '%' => out.push_str("%25"),
            ':' => out.push_str("%3A"),
            '=' => out.push_str("%3D"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            _ => out.push(c),
        }
    }
}

/// The limiter key of one descriptor:
/// `<prefix>{<tag>}:<domain>:<k>=<v>:<k>=<v>:<algorithm>[:o<n>/<window ms>]`,
/// with `{<tag>}` only when the domain's `hash_tag` gives one, every part
/// escaped so that no two descriptors share a key. A limit given in the
/// request (an override) gets its own key, so that it never shares state
/// with the config's policy.
pub fn key(
    prefix: &str,
    domain: &Domain,
    entries: Entries<'_>,
    limit: &Limit,
    overridden: bool,
) -> String {
    let mut out = String::with_capacity(64);
    out.push_str(prefix);
    let tag = match &domain.hash_tag {
        HashTag::None => None,
        HashTag::Domain => Some(domain.name.as_str()),
        HashTag::Entry(k) => entries
            .iter()
            .find(|(ek, _)| ek == k)
            .map(|(_, v)| v.as_str()),
    };
    if let Some(t) = tag {
        out.push('{');
        escape(&mut out, t);
        out.push_str("}:");
    }
    escape(&mut out, &domain.name);
    for (k, v) in entries {
        out.push(':');
        escape(&mut out, k);
        out.push('=');
        escape(&mut out, v);
    }
    out.push(':');
    out.push_str(limit.rate.algorithm.name());
    if overridden {
        out.push_str(&format!(
            ":o{}/{}",
            limit.rate.requests_per_unit,
            limit.rate.unit.window_ms()
        ));
    }
    out
}

/// The policy words after `POLICY`: `ALGO a LIMIT n WINDOW ms [BURST b]
/// [META m]`. With a META hash and no inline numbers, the hash supplies
/// them (the operator's `HSET`); inline numbers from the config win over
/// the hash, as the module does.
pub fn policy_words(rate: &RateLimit) -> Vec<String> {
    let mut w = vec!["ALGO".to_string(), rate.algorithm.name().to_string()];
    if rate.meta.is_none() || rate.requests_per_unit > 0 {
        w.push("LIMIT".into());
        w.push(rate.requests_per_unit.to_string());
        w.push("WINDOW".into());
        w.push(rate.unit.window_ms().to_string());
    }
    if let Some(b) = rate.burst {
        w.push("BURST".into());
        w.push(b.to_string());
    }
    if let Some(m) = &rate.meta {
        w.push("META".into());
        w.push(m.clone());
    }
    w
}

/// The metric key of a limit: the config path (`key_value` or `key` a
/// level); with `detailed_metric`, the request's own values instead.
pub fn stat_key(limit: &Limit, entries: Entries<'_>) -> String {
    if limit.detailed_metric {
        entries
            .iter()
            .map(|(k, v)| format!("{k}_{v}"))
            .collect::<Vec<_>>()
            .join(".")
    } else {
        limit.stat_path.join(".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load;
    use std::path::PathBuf;

    fn domain(text: &str) -> Domain {
        let mut c = load(&[(PathBuf::from("t.yaml"), text.as_bytes().to_vec())]).unwrap();
        let name = c.domains.keys().next().unwrap().clone();
        c.domains.remove(&name).unwrap()
    }

    fn e(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const CFG: &str = "domain: d\nhash_tag: entry:tenant\ndescriptors:\n  - key: tenant\n    value: acme\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: tenant\n    rate_limit: {unit: second, requests_per_unit: 2}\n    descriptors:\n      - key: path\n        value: /api*\n        rate_limit: {unit: second, requests_per_unit: 3}\n      - key: path\n        rate_limit: {unit: second, requests_per_unit: 4}\n";

    #[test]
    fn matches_as_the_reference() {
        let d = domain(CFG);
        let rpu =
            |entries: &[(&str, &str)]| find(&d, &e(entries)).map(|l| l.rate.requests_per_unit);
        assert_eq!(rpu(&[("tenant", "acme")]), Some(1));
        assert_eq!(rpu(&[("tenant", "other")]), Some(2));
        assert_eq!(rpu(&[("tenant", "x"), ("path", "/api/v1")]), Some(3));
        assert_eq!(rpu(&[("tenant", "x"), ("path", "/web")]), Some(4));
        assert_eq!(rpu(&[("nope", "x")]), None);
        assert_eq!(rpu(&[("tenant", "x"), ("path", "/"), ("more", "1")]), None);
    }

    /// envoyproxy/ratelimit's test/config/wildcard.yaml, and the lookups its
    /// TestWildcardConfig asserts on it.
    const WILDCARDS: &str = "domain: test-domain
descriptors:
  - {key: wild, value: 'foo*', rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: noWild, value: foo, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: noVal, rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: midWild, value: 'bar*b', rate_limit: {unit: minute, requests_per_unit: 20}}
  - {key: multiWild, value: 'foo*bar*baz', rate_limit: {unit: minute, requests_per_unit: 10}}
  - key: nestedWild
    value: val1
    descriptors:
      - {key: wild, value: 'goo*', rate_limit: {unit: minute, requests_per_unit: 20}}
";

    #[test]
    fn wildcards_anywhere_in_a_value_as_the_reference() {
        let d = domain(WILDCARDS);
        let stat = |entries: &[(&str, &str)]| find(&d, &e(entries)).map(|l| l.stat_path.join("."));
        assert_eq!(stat(&[("noVal", "foo1")]).as_deref(), Some("noVal"));
        // One limit for every matching value, its metric named by the pattern.
        for v in ["foo1", "foo2", "foo"] {
            assert_eq!(stat(&[("wild", v)]).as_deref(), Some("wild_foo*"), "{v}");
        }
        assert_eq!(
            stat(&[("nestedWild", "val1"), ("wild", "goo2")]).as_deref(),
            Some("nestedWild_val1.wild_goo*")
        );
        assert_eq!(stat(&[("wild", "bar")]), None);
        assert_eq!(stat(&[("noWild", "foo1")]), None);
        for v in ["barab", "bar123b", "barb"] {
            assert_eq!(
                stat(&[("midWild", v)]).as_deref(),
                Some("midWild_bar*b"),
                "{v}"
            );
        }
        for v in ["bara", "xbarb"] {
            assert_eq!(stat(&[("midWild", v)]), None, "{v}");
        }
        for v in ["foo123bar456baz", "foobarbaz"] {
            let l = find(&d, &e(&[("multiWild", v)])).unwrap();
            assert_eq!(l.stat_path, ["multiWild_foo*bar*baz"], "{v}");
            assert_eq!(l.rate.requests_per_unit, 10);
        }
        for v in ["foo123baz", "bar456baz", "foo123bar456ba"] {
            assert_eq!(stat(&[("multiWild", v)]), None, "{v}");
        }
    }

    #[test]
    fn a_value_then_the_first_glob_in_config_order_then_the_key() {
        let d = domain(
            "domain: d
descriptors:
  - {key: p, value: '/a*', rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: p, value: '/a/b*', rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: p, value: '/a/b/c', rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: p, value: '*.png', rate_limit: {unit: minute, requests_per_unit: 4}}
  - {key: p, rate_limit: {unit: minute, requests_per_unit: 5}}
  - key: q
    value: 'x*'
    descriptors:
      - {key: r, rate_limit: {unit: minute, requests_per_unit: 6}}
  - {key: q, rate_limit: {unit: minute, requests_per_unit: 7}}
",
        );
        let rpu =
            |entries: &[(&str, &str)]| find(&d, &e(entries)).map(|l| l.rate.requests_per_unit);
        // The literal value wins over every glob that matches it.
        assert_eq!(rpu(&[("p", "/a/b/c")]), Some(3));
        // Among globs, config order decides, not the longest: `/a*` is first.
        assert_eq!(rpu(&[("p", "/a/b/d")]), Some(1));
        assert_eq!(rpu(&[("p", "/a/x.png")]), Some(1));
        assert_eq!(rpu(&[("p", "/z.png")]), Some(4));
        // A glob's own text is looked up as a value first.
        assert_eq!(rpu(&[("p", "/a/b*")]), Some(2));
        assert_eq!(rpu(&[("p", "/z")]), Some(5));
        // A matched glob stops the search even without a limit of its own:
        // its subtree decides, the key alone is not tried.
        assert_eq!(rpu(&[("q", "xy")]), None);
        assert_eq!(rpu(&[("q", "xy"), ("r", "1")]), Some(6));
        assert_eq!(rpu(&[("q", "y")]), Some(7));
        // A `*` in the request's value is just a character.
        assert_eq!(rpu(&[("p", "/b*")]), Some(5));
    }

    /// `value: ""` is read as no value, as the reference reads it: the
    /// limit covers every value of the key, and clashes with the key alone.
    #[test]
    fn an_empty_value_is_no_value() {
        let d = domain(
            "domain: d
descriptors:
  - {key: k, value: '', rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: j, value: x, rate_limit: {unit: minute, requests_per_unit: 4}}
",
        );
        let found = |entries: &[(&str, &str)]| find(&d, &e(entries));
        for v in ["a", "anything", ""] {
            let l = found(&[("k", v)]).unwrap_or_else(|| panic!("{v:?}: no limit"));
            assert_eq!(l.rate.requests_per_unit, 3);
            assert_eq!(l.stat_path, ["k"], "the metric names the key alone");
        }
        assert!(found(&[("j", "")]).is_none());
        assert!(crate::config::load(&[(
            PathBuf::from("t.yaml"),
            b"domain: d\ndescriptors:\n  - {key: k, value: ''}\n  - {key: k}\n".to_vec()
        )])
        .is_err());
    }

    #[test]
    fn keys_are_escaped_and_tagged() {
        let d = domain(CFG);
        let entries = e(&[("tenant", "a:b{c}"), ("path", "/x=1")]);
        let l = find(&d, &entries).unwrap();
        assert_eq!(
            key("rls:", &d, &entries, &l, false),
            "rls:{a%3Ab%7Bc%7D}:d:tenant=a%3Ab%7Bc%7D:path=/x%3D1:fixed"
        );
        assert_eq!(stat_key(&l, &entries), "tenant.path");
    }
}
