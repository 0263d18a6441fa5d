//! The reverse-proxy recipe of docs/deploy.md, run for real: Debian's nginx
//! terminates TLS on loopback in front of a gateway with `trusted_proxies`
//! set. A signed webhook through it is `new` then `duplicate`, its body
//! reaches the target byte for byte, and `allow_ips` sees the client behind
//! the proxy, not the proxy.

use crate::helpers::process::free_port;
use crate::helpers::*;
use std::net::IpAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An nginx master process of this test's own, stopped by PID on drop.
struct Nginx {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
    cert: Vec<u8>,
}

impl Nginx {
    /// TLS on 127.0.0.1:<free port>, `/webhooks/` proxied to `upstream`,
    /// with the recipe's headers.
    fn start(upstream: std::net::SocketAddr) -> Self {
        let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("nginx is installed (scripts/test.sh installs Debian's nginx-light)");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let made = Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
            .arg("ec_paramgen_curve:P-256")
            .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
            .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
            .args(["-addext", "basicConstraints=critical,CA:FALSE"])
            .arg("-keyout")
            .arg(d.join("key.pem"))
            .arg("-out")
            .arg(d.join("cert.pem"))
            .stderr(Stdio::null())
            .status()
            .expect("openssl runs");
        assert!(made.success(), "openssl made the test certificate");
        let port = free_port();
        let p = d.display();
        let conf = format!(
            r#"
daemon off;
worker_processes 1;
# As root, workers would otherwise run as `nobody` and could not use the
# test's private temporary directory (ignored when not root).
user root;
pid {p}/nginx.pid;
error_log {p}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {p}/body;
    proxy_temp_path {p}/proxy;
    fastcgi_temp_path {p}/fastcgi;
    uwsgi_temp_path {p}/uwsgi;
    scgi_temp_path {p}/scgi;
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {p}/cert.pem;
        ssl_certificate_key {p}/key.pem;
        client_max_body_size 1m;
        location /webhooks/ {{
            proxy_pass http://{upstream};
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
        }}
    }}
}}
"#
        );
        std::fs::write(d.join("nginx.conf"), conf).unwrap();
        let child = Command::new(nginx)
            .arg("-p")
            .arg(d)
            .arg("-c")
            .arg(d.join("nginx.conf"))
            .arg("-e")
            .arg(d.join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts");
        let cert = std::fs::read(d.join("cert.pem")).unwrap();
        Self {
            child,
            port,
            _dir: dir,
            cert,
        }
    }

    /// A client that trusts the test certificate and connects from `from`.
    fn client(&self, from: IpAddr) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(reqwest::Certificate::from_pem(&self.cert).unwrap())
            .local_address(from)
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
    }

    fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM is nginx's fast shutdown: the master stops its worker and
        // exits. (SIGKILL of the master would leave the worker running.)
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..50 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_through_nginx_with_tls_is_new_then_duplicate_byte_for_byte_and_allow_ips_sees_the_client()
 {
    let target = TestTarget::start().await;
    let mut opts = Opts::new(Backend::Embedded);
    // nginx reaches the gateway from 127.0.0.1: that peer is trusted to
    // name the client in X-Forwarded-For.
    opts.server_extra = "trusted_proxies = [\"127.0.0.1/32\"]".into();
    opts.extra = format!(
        "[sources.behind]\nprovider = \"stripe\"\nsecrets = [\"{STRIPE_SECRET}\"]\n\
         targets = [\"t\"]\nallow_ips = [\"127.0.0.2/32\"]\n\
         [targets.t]\nurl = \"{}\"\n",
        target.url
    );
    let app = spawn_app(opts).await;
    let nginx = Nginx::start(app.addr);
    let allowed = nginx.client("127.0.0.2".parse().unwrap());
    let up = eventually(Duration::from_secs(10), || async {
        allowed
            .get(nginx.url("/webhooks/behind"))
            .send()
            .await
            .is_ok()
    })
    .await;
    assert!(up, "nginx did not come up");

    // A body whose bytes a careless proxy would change: non-ASCII, CRLF,
    // tabs, odd spacing, no trailing newline.
    let body = "{\"id\": \"evt_proxy_1\",\t\"type\":\"invoice.paid\",\r\n \"note\": \"caf\u{e9} \u{1f600}\"   }"
        .as_bytes()
        .to_vec();
    let send = |client: reqwest::Client, body: Vec<u8>| {
        let url = nginx.url("/webhooks/behind");
        async move {
            let mut req = client.post(url).header("content-type", "application/json");
            for (k, v) in signers::stripe(STRIPE_SECRET, now(), &body) {
                req = req.header(k, v);
            }
            req.body(body).send().await.expect("sent through nginx")
        }
    };

    let first = send(allowed.clone(), body.clone()).await;
    assert_eq!(first.status(), 200);
    assert_eq!(dedup_header(&first), "new");
    let retry = send(allowed.clone(), body.clone()).await;
    assert_eq!(retry.status(), 200);
    assert_eq!(dedup_header(&retry), "duplicate");

    // Another client, same proxy: refused by allow_ips, so the gateway saw
    // the client's address, not nginx's.
    let other = nginx.client("127.0.0.3".parse().unwrap());
    let refused = send(other, stripe_body("evt_proxy_2")).await;
    assert_eq!(refused.status(), 403);

    assert!(eventually(Duration::from_secs(10), || async { target.count() >= 1 }).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = target.received();
    assert_eq!(
        got.len(),
        1,
        "one delivery for the new event, none for its retry"
    );
    assert_eq!(
        got[0].body.as_ref(),
        body.as_slice(),
        "body bytes unchanged"
    );
    let s = app.stats().await;
    assert_eq!(s["sources"]["behind"]["unique"], 1, "{s}");
    assert_eq!(
        s["sources"]["behind"]["rejected_by_reason"]["ip_not_allowed"], 1,
        "{s}"
    );
}
