//! A NATS cluster on loopback for the tests and the bench: `nodes`
//! `nats-server` processes with JetStream and cluster routes between them,
//! on free ports, their state in a temporary directory. Dropping the
//! [`Cluster`] kills every server (also when a test panics).
//!
//! Without `nats-server` on the PATH (or in /usr/sbin) [`Cluster::start`]
//! returns `None` and the test skips, unless `CONVLOG_REQUIRE_NATS=1` (CI
//! sets it), which makes a missing server a failure.
#![allow(dead_code)]

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a cluster may take to elect its JetStream leader, and a stream
/// its leader after a failover, before a test fails.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a state is polled while waiting for it.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

pub struct Node {
    pub name: String,
    pub port: u16,
    config: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    dir: tempfile::TempDir,
    binary: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/bin")])
        .map(|dir| dir.join("nats-server"))
        .find(|candidate| candidate.is_file())
}

/// Waits until `ready` holds, polling; panics naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {timeout:?}"
        );
        std::thread::sleep(POLL_INTERVAL);
    }
}

impl Cluster {
    /// Starts `nodes` servers (1 for a single server without routes) and
    /// waits until JetStream answers on every one of them.
    pub fn start(nodes: usize) -> Option<Cluster> {
        let Some(binary) = find_binary() else {
            if std::env::var("CONVLOG_REQUIRE_NATS").is_ok_and(|value| value == "1") {
                panic!("CONVLOG_REQUIRE_NATS=1 but no nats-server is installed (apt-get install nats-server)");
            }
            eprintln!("skipping: no nats-server installed (apt-get install nats-server)");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let client_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
        let route_ports: Vec<u16> = (0..nodes).map(|_| free_port()).collect();
        let mut cluster = Cluster {
            nodes: Vec::new(),
            dir,
            binary,
        };
        for index in 0..nodes {
            let name = format!("n{}", index + 1);
            let store_dir = cluster.dir.path().join(&name);
            let mut config = format!(
                "server_name: {name}\nlisten: 127.0.0.1:{}\njetstream {{\n  store_dir: {:?}\n  max_memory_store: 64MB\n  max_file_store: 2GB\n}}\n",
                client_ports[index],
                store_dir.display().to_string(),
            );
            if nodes > 1 {
                let routes: Vec<String> = route_ports
                    .iter()
                    .enumerate()
                    .filter(|(other, _)| *other != index)
                    .map(|(_, port)| format!("nats-route://127.0.0.1:{port}"))
                    .collect();
                config.push_str(&format!(
                    "cluster {{\n  name: convlog-test\n  listen: 127.0.0.1:{}\n  routes: [{}]\n}}\n",
                    route_ports[index],
                    routes.join(", ")
                ));
            }
            let path = cluster.dir.path().join(format!("{name}.conf"));
            std::fs::File::create(&path)
                .and_then(|mut file| file.write_all(config.as_bytes()))
                .expect("the server's config");
            cluster.nodes.push(Node {
                name,
                port: client_ports[index],
                config: path,
                child: None,
            });
        }
        for index in 0..nodes {
            cluster.restart(index);
        }
        cluster.wait_ready();
        Some(cluster)
    }

    /// Starts node `index` again (after [`Cluster::kill`]), on its port and
    /// with its state.
    pub fn restart(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        assert!(node.child.is_none(), "{} is running", node.name);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", node.name)))
            .expect("the server's log file");
        let child = Command::new(&self.binary)
            .arg("-c")
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("nats-server starts");
        node.child = Some(child);
    }

    /// SIGKILLs node `index`.
    pub fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.nodes[index].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    /// `nats://` + every running node's address + `/store`.
    pub fn url(&self, store: &str) -> String {
        let servers: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("nats://{}/{store}", servers.join(","))
    }

    /// The URL of one node only.
    pub fn node_url(&self, index: usize, store: &str) -> String {
        format!("nats://127.0.0.1:{}/{store}", self.nodes[index].port)
    }

    /// A server's log, for failure messages.
    pub fn log_of(&self, index: usize) -> String {
        std::fs::read_to_string(
            self.dir
                .path()
                .join(format!("{}.log", self.nodes[index].name)),
        )
        .unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Waits until every running node serves JetStream requests (a meta
    /// leader is elected and the node knows it).
    pub fn wait_ready(&self) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        for (index, node) in self.nodes.iter().enumerate() {
            if node.child.is_none() {
                continue;
            }
            let address = format!("127.0.0.1:{}", node.port);
            wait_for(
                &format!("JetStream on {} ({address})", node.name),
                READY_TIMEOUT,
                || {
                    runtime.block_on(async {
                        let Ok(client) = async_nats::ConnectOptions::new()
                            .connection_timeout(Duration::from_secs(1))
                            .connect(address.as_str())
                            .await
                        else {
                            return false;
                        };
                        // The account info request answers once JetStream
                        // (and, in a cluster, its meta leader) is up.
                        let request = client.request("$JS.API.INFO", "".into());
                        match tokio::time::timeout(Duration::from_secs(2), request).await {
                            Ok(Ok(reply)) => {
                                let text = String::from_utf8_lossy(&reply.payload);
                                text.contains("account_info_response")
                                    && !text.contains("\"error\"")
                            }
                            _ => false,
                        }
                    })
                },
            );
            let _ = index;
        }
        // A cluster answers before its meta leader counts every peer
        // online: a stream of one replica per node is placed only then
        // ("no suitable peers for placement" before, on a loaded machine).
        let running: Vec<&Node> = self
            .nodes
            .iter()
            .filter(|node| node.child.is_some())
            .collect();
        if running.len() > 1 {
            let address = format!("127.0.0.1:{}", running[0].port);
            let replicas = running.len();
            wait_for(
                &format!("a stream of {replicas} replicas to be placed"),
                READY_TIMEOUT,
                || {
                    runtime.block_on(async {
                        let Ok(client) = async_nats::connect(address.as_str()).await else {
                            return false;
                        };
                        let context = async_nats::jetstream::new(client);
                        let probe = async_nats::jetstream::stream::Config {
                            name: "ready-probe".to_string(),
                            subjects: vec!["ready-probe.>".to_string()],
                            num_replicas: replicas,
                            ..Default::default()
                        };
                        let created = context.get_or_create_stream(probe).await.is_ok();
                        created && context.delete_stream("ready-probe").await.is_ok()
                    })
                },
            );
        }
    }

    /// The name of the node leading `stream` now (asked of node `via`).
    pub fn stream_leader(&self, via: usize, stream: &str) -> Option<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let address = format!("127.0.0.1:{}", self.nodes[via].port);
        runtime.block_on(async {
            let client = async_nats::ConnectOptions::new()
                .connection_timeout(Duration::from_secs(1))
                .connect(address.as_str())
                .await
                .ok()?;
            let context = async_nats::jetstream::new(client);
            let info = tokio::time::timeout(Duration::from_secs(2), async {
                context.get_stream(stream).await.ok()?.get_info().await.ok()
            })
            .await
            .ok()??;
            info.cluster?.leader
        })
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for index in 0..self.nodes.len() {
            self.kill(index);
        }
    }
}
