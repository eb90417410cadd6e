//! etcd for comparison: a three-member cluster of real `etcd` processes on loopback with their
//! default fsync durability, written to through its v3 gRPC API or its gRPC-JSON gateway.

use crate::load::Writer;
use anyhow::{Context, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint};
use tonic_prost::ProstCodec;

/// The `etcd` binary on PATH, if there is one.
pub fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|candidate| candidate.is_file())
}

/// Three etcd members; they are killed when this is dropped, also while a panic unwinds.
#[derive(Debug)]
pub struct Etcd {
    members: Vec<Child>,
    pub clients: Vec<SocketAddr>,
    dir: tempfile::TempDir,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for child in &mut self.members {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Free loopback ports, held until all are picked so they differ.
fn free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl Etcd {
    /// Starts three members as a new cluster, data directories in a temporary directory.
    pub fn start(binary: &Path) -> anyhow::Result<Etcd> {
        let dir = tempfile::tempdir()?;
        let ports = free_ports(6)?;
        let names = ["m1", "m2", "m3"];
        let peer = |i: usize| format!("http://127.0.0.1:{}", ports[3 + i]);
        let initial = (0..3)
            .map(|i| format!("{}={}", names[i], peer(i)))
            .collect::<Vec<_>>()
            .join(",");
        let mut etcd = Etcd {
            members: Vec::new(),
            clients: Vec::new(),
            dir,
        };
        for (i, name) in names.iter().enumerate() {
            let client = format!("http://127.0.0.1:{}", ports[i]);
            let log = std::fs::File::create(etcd.dir.path().join(format!("{name}.log")))?;
            let child = Command::new(binary)
                .arg(format!("--name={name}"))
                .arg(format!(
                    "--data-dir={}",
                    etcd.dir.path().join(name).display()
                ))
                .arg(format!("--listen-client-urls={client}"))
                .arg(format!("--advertise-client-urls={client}"))
                .arg(format!("--listen-peer-urls={}", peer(i)))
                .arg(format!("--initial-advertise-peer-urls={}", peer(i)))
                .arg(format!("--initial-cluster={initial}"))
                .arg("--initial-cluster-token=gatehouse-bench")
                .arg("--initial-cluster-state=new")
                .args(["--logger=zap", "--log-level=warn"])
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .with_context(|| format!("starting {}", binary.display()))?;
            etcd.members.push(child);
            etcd.clients
                .push(SocketAddr::from(([127, 0, 0, 1], ports[i])));
        }
        Ok(etcd)
    }

    /// The client address of the member every member names as leader, within `timeout`.
    pub async fn leader(&mut self, timeout: Duration) -> anyhow::Result<SocketAddr> {
        let deadline = Instant::now() + timeout;
        let mut last_error = String::new();
        while Instant::now() < deadline {
            for (i, child) in self.members.iter_mut().enumerate() {
                if let Some(status) = child.try_wait()? {
                    bail!("etcd member m{} exited: {status}", i + 1);
                }
            }
            match self.statuses().await {
                Ok(statuses) => {
                    let leader = statuses[0].leader;
                    if leader != 0 && statuses.iter().all(|s| s.leader == leader) {
                        let at = statuses
                            .iter()
                            .position(|s| s.header.as_ref().map(|h| h.member_id) == Some(leader))
                            .context("the leader is not one of the members")?;
                        return Ok(self.clients[at]);
                    }
                    last_error = "no agreed leader yet".into();
                }
                Err(e) => last_error = format!("{e:#}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("etcd had no leader within {timeout:?}: {last_error}")
    }

    async fn statuses(&self) -> anyhow::Result<Vec<StatusResponse>> {
        let mut statuses = Vec::new();
        for &addr in &self.clients {
            let mut grpc = tonic::client::Grpc::new(channel(addr).await?);
            grpc.ready().await?;
            let status = grpc
                .unary(
                    tonic::Request::new(StatusRequest {}),
                    PathAndQuery::from_static("/etcdserverpb.Maintenance/Status"),
                    ProstCodec::<StatusRequest, StatusResponse>::default(),
                )
                .await?;
            statuses.push(status.into_inner());
        }
        Ok(statuses)
    }
}

async fn channel(addr: SocketAddr) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await?)
}

// The few messages of etcd's `etcdserverpb` the benchmark needs; prost skips the rest.
#[derive(Clone, PartialEq, prost::Message)]
struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PutResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ResponseHeader {
    #[prost(uint64, tag = "2")]
    member_id: u64,
    #[prost(int64, tag = "3")]
    revision: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
    #[prost(uint64, tag = "4")]
    leader: u64,
}

/// A client of etcd's v3 gRPC API (`KV.Put`) on its own HTTP/2 connection.
#[derive(Debug)]
pub struct GrpcPut {
    grpc: tonic::client::Grpc<Channel>,
    value: Vec<u8>,
}

impl GrpcPut {
    pub async fn connect(addr: SocketAddr, value: &str) -> anyhow::Result<Self> {
        Ok(GrpcPut {
            grpc: tonic::client::Grpc::new(channel(addr).await?),
            value: value.as_bytes().to_vec(),
        })
    }
}

impl Writer for GrpcPut {
    async fn write(&mut self, key: String) -> anyhow::Result<()> {
        self.grpc.ready().await?;
        let request = PutRequest {
            key: format!("bench/{key}").into_bytes(),
            value: self.value.clone(),
        };
        let reply = self
            .grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static("/etcdserverpb.KV/Put"),
                ProstCodec::<PutRequest, PutResponse>::default(),
            )
            .await?;
        match reply.into_inner().header {
            Some(h) if h.revision > 0 => Ok(()),
            other => bail!("a put answered {other:?}"),
        }
    }
}

/// A client of etcd's gRPC-JSON gateway (`POST /v3/kv/put`) on its own HTTP/1.1 keep-alive
/// connection.
#[derive(Debug)]
pub struct GatewayPut {
    sender: SendRequest<Full<Bytes>>,
    host: String,
    value: String,
}

impl GatewayPut {
    pub async fn connect(addr: SocketAddr, value: &str) -> anyhow::Result<Self> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
        // Ends when `sender` is dropped and the server closes.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(GatewayPut {
            sender,
            host: addr.to_string(),
            value: BASE64.encode(value),
        })
    }
}

impl Writer for GatewayPut {
    async fn write(&mut self, key: String) -> anyhow::Result<()> {
        let body = serde_json::json!({
            "key": BASE64.encode(format!("bench/{key}")),
            "value": self.value,
        });
        let request = hyper::Request::post("/v3/kv/put")
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body)?)))?;
        self.sender.ready().await?;
        let response = self.sender.send_request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        let reply: serde_json::Value = serde_json::from_slice(&body)
            .with_context(|| format!("{status}: {}", String::from_utf8_lossy(&body)))?;
        if !status.is_success() || reply["header"]["revision"].is_null() {
            bail!("{status}: {reply}");
        }
        Ok(())
    }
}
