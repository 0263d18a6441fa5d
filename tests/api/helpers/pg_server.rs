//! A throwaway PostgreSQL cluster of the test's own (initdb in a temporary
//! directory, its own loopback port), for faults the shared server must
//! never suffer: a crash. Stopped by its own `pg_ctl`, never by name.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

pub struct PgServer {
    /// Holds the data directory; removed after the server stopped.
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// Run the server's tools as this user: PostgreSQL refuses root.
    user: Option<&'static str>,
}

impl PgServer {
    /// initdb + start, with `settings` (`name=value`) on the command line.
    pub async fn start(settings: &[&str]) -> Self {
        let bin = bindir();
        let dir = tempfile::tempdir().unwrap();
        let root = Command::new("id").arg("-u").output().unwrap().stdout == b"0\n";
        let user = root.then_some("postgres");
        if root {
            // The data directory and its parent belong to the server's user.
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown of the throwaway cluster's directory");
        }
        let s = Self {
            dir,
            bin,
            port: super::process::free_port(),
            user,
        };
        let data = s.data();
        let out = s
            .tool("initdb")
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {}\nunix_socket_directories = '{}'\n",
            s.port,
            s.dir.path().display()
        );
        for kv in settings {
            conf.push_str(kv);
            conf.push('\n');
        }
        let path = data.join("postgresql.auto.conf");
        let mut auto = std::fs::read_to_string(&path).unwrap_or_default();
        auto.push_str(&conf);
        std::fs::write(&path, auto).unwrap();
        s.pg_ctl_start().await;
        s
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// Immediate shutdown: every server process quits at once, no
    /// checkpoint, WAL not flushed; the next start recovers from the WAL
    /// on disk, as after a crash.
    pub fn crash(&self) {
        let ok = self
            .tool("pg_ctl")
            .args(["stop", "-m", "immediate", "-w", "-D"])
            .arg(self.data())
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(ok, "pg_ctl stop -m immediate");
    }

    pub async fn pg_ctl_start(&self) {
        let log = self.dir.path().join("server.log");
        let ok = self
            .tool("pg_ctl")
            .args(["start", "-w", "-t", "60", "-D"])
            .arg(self.data())
            .arg("-l")
            .arg(&log)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        assert!(
            ok,
            "pg_ctl start: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let up = super::eventually(Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
        })
        .await;
        assert!(up, "throwaway PostgreSQL listens on {}", self.port);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn tool(&self, name: &str) -> Command {
        let exe = self.bin.join(name);
        match self.user {
            Some(u) => {
                let mut c = Command::new("runuser");
                c.args(["-u", u, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = self
            .tool("pg_ctl")
            .args(["stop", "-m", "immediate", "-D"])
            .arg(self.data())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The server's binaries: `pg_config --bindir`, else Debian's layout.
fn bindir() -> PathBuf {
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return dir;
        }
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort();
    found
        .pop()
        .expect("PostgreSQL's server binaries (initdb, pg_ctl) are installed")
}
