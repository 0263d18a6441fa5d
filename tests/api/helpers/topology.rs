//! Throwaway Redis topologies on loopback, each process started and killed by
//! PID by the test that owns it: a master + replica + sentinel, and a
//! three-node cluster. Files (sentinel config, nodes.conf) live in a temp dir.

use super::eventually;
use super::process::free_port;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One `redis-server` process, killed on drop.
pub struct Node {
    pub port: u16,
    child: Option<Child>,
}

impl Node {
    /// Starts `redis-server <args>` in `dir` and waits until it answers PING.
    pub async fn start(dir: &Path, port: u16, args: &[&str]) -> Self {
        let child = Command::new("redis-server")
            .args(args)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let node = Self {
            port,
            child: Some(child),
        };
        let up = eventually(Duration::from_secs(10), || async {
            cli(port, &["PING"]).contains("PONG")
        })
        .await;
        assert!(up, "redis-server on {port} did not start");
        node
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `redis-cli -p <port> <args>`, stdout as text ("" if it cannot run).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Master `m` with one replica, watched by one sentinel (quorum 1) tuned to
/// fail over within a couple of seconds.
pub struct SentinelSet {
    pub master: Node,
    pub replica: Node,
    pub sentinel: Node,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let master = Node::start(dir.path(), free_port(), &[]).await;
        let mp = master.port.to_string();
        let replica =
            Node::start(dir.path(), free_port(), &["--replicaof", "127.0.0.1", &mp]).await;
        let conf = dir.path().join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "sentinel monitor m 127.0.0.1 {mp} 1\n\
                 sentinel down-after-milliseconds m 400\n\
                 sentinel failover-timeout m 2000\n\
                 sentinel parallel-syncs m 1\n"
            ),
        )
        .unwrap();
        let conf = conf.to_str().unwrap().to_owned();
        let sentinel = Node::start(dir.path(), free_port(), &[&conf, "--sentinel"]).await;
        let set = Self {
            master,
            replica,
            sentinel,
            _dir: dir,
        };
        // Promotion needs a replica the sentinel knows and that is in sync.
        let (s, r) = (set.sentinel.port, set.replica.port);
        let known = eventually(Duration::from_secs(15), || async {
            cli(r, &["INFO", "replication"]).contains("master_link_status:up")
                && cli(s, &["SENTINEL", "REPLICAS", "m"]).contains(&r.to_string())
        })
        .await;
        assert!(known, "sentinel did not discover the in-sync replica");
        set
    }

    pub fn url(&self) -> String {
        format!("redis+sentinel://127.0.0.1:{}/m", self.sentinel.port)
    }

    /// The master port the sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        let out = cli(
            self.sentinel.port,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"],
        );
        out.lines().nth(1)?.trim().parse().ok()
    }
}

/// Three masters (no replicas) sharing the 16384 slots.
pub struct Cluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = vec![];
        for i in 0..3 {
            let conf = format!("nodes-{i}.conf");
            let bus = free_port().to_string();
            let args = ["--cluster-enabled", "yes", "--cluster-config-file", &conf];
            let args = [
                &args[..],
                &["--cluster-port", &bus, "--cluster-node-timeout", "2000"],
            ];
            nodes.push(Node::start(dir.path(), free_port(), &args.concat()).await);
        }
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdout(Stdio::null())
            .status()
            .expect("redis-cli is installed");
        assert!(created.success(), "redis-cli --cluster create failed");
        let ok = eventually(Duration::from_secs(15), || async {
            nodes
                .iter()
                .all(|n| cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        })
        .await;
        assert!(ok, "cluster did not reach cluster_state:ok");
        Self { nodes, _dir: dir }
    }

    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes[..2]
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }
}
