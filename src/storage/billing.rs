//! Whether a cloud URL's requests are billed: what `early_seals = "auto"`
//! budgets (rfcs/0008-sealing.md, "What auto means for a self-hosted
//! endpoint").
//!
//! A cloud URL reaches a provider that bills every request (S3, GCS, Azure)
//! unless its endpoint is one only a self-hosted server can be: an IP
//! address that is loopback, private (RFC 1918, RFC 6598's shared space,
//! IPv6 unique local) or link-local, the name `localhost`, a name without a
//! dot (a container's or a cluster's service name, `http://minio:9000`), or
//! a name under a suffix that never resolves on the public internet
//! (`.localhost`, `.local`, `.internal`, `.svc`, `.lan`, `.home.arpa`).
//! Such a store answers `charges_per_request() == false`, so the default
//! budget of early seals is unlimited there, as on a local directory. Any
//! other endpoint (a public name or address: MinIO behind a public name
//! looks exactly like R2, Wasabi or B2, which do bill) keeps the budget;
//! `early_seals = "unlimited"` lifts it. Names are never resolved: the
//! decision is made from the URL alone, the same on every machine.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::Range;

use bytes::Bytes;

use super::{Created, ObjectMeta, ObjectStorage, Storage, StorageError, Suffix};

/// Suffixes of names that do not resolve on the public internet.
const PRIVATE_SUFFIXES: &[&str] = &[
    ".localhost",
    ".local",
    ".internal",
    ".svc",
    ".lan",
    ".home.arpa",
];

/// Whether `endpoint` (an `http://` or `https://` URL) can only name a
/// self-hosted server, whose requests cost nothing per request.
pub(crate) fn is_self_hosted(endpoint: &str) -> bool {
    let Ok(url) = ::url::Url::parse(endpoint) else {
        return false;
    };
    match url.host() {
        Some(::url::Host::Ipv4(ip)) => private_v4(ip),
        Some(::url::Host::Ipv6(ip)) => private_v6(ip),
        Some(::url::Host::Domain(name)) => {
            let name = name.trim_end_matches('.').to_ascii_lowercase();
            match name.parse::<IpAddr>() {
                Ok(IpAddr::V4(ip)) => private_v4(ip),
                Ok(IpAddr::V6(ip)) => private_v6(ip),
                Err(_) => {
                    name == "localhost"
                        || (!name.is_empty() && !name.contains('.'))
                        || PRIVATE_SUFFIXES.iter().any(|s| name.ends_with(s))
                }
            }
        }
        None => false,
    }
}

fn private_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    // 100.64.0.0/10: RFC 6598's shared address space (carrier NAT, tailnets).
    let shared = a == 100 && (64..128).contains(&b);
    ip.is_loopback() || ip.is_private() || ip.is_link_local() || shared
}

fn private_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    let mapped = ip.to_ipv4_mapped().is_some_and(private_v4);
    ip.is_loopback() || unique_local || link_local || mapped
}

/// `storage`, answering `charges_per_request() == false` when `endpoint`
/// is self-hosted ([`is_self_hosted`]).
pub(crate) fn unless_self_hosted(storage: Storage, endpoint: Option<&str>) -> Storage {
    match endpoint {
        Some(endpoint) if is_self_hosted(endpoint) => {
            tracing::debug!(
                endpoint,
                "a self-hosted endpoint: requests count as free (early_seals auto: unlimited)"
            );
            Storage::new(SelfHosted { inner: storage })
        }
        _ => storage,
    }
}

/// A store on a self-hosted endpoint: every request passed on unchanged,
/// `charges_per_request` false.
#[derive(Debug)]
struct SelfHosted {
    inner: Storage,
}

#[async_trait::async_trait]
impl ObjectStorage for SelfHosted {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        self.inner.create(key, data).await
    }

    async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }

    async fn read_suffix(&self, key: &str, len: u64) -> Result<Suffix, StorageError> {
        self.inner.read_suffix(key, len).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }

    fn charges_per_request(&self) -> bool {
        false
    }

    async fn remove_leftovers(&self, prefix: &str) -> Result<(), StorageError> {
        self.inner.remove_leftovers(prefix).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_endpoints_that_cannot_be_a_provider_count_as_self_hosted() {
        for endpoint in [
            "http://127.0.0.1:9000",
            "http://127.1.2.3",
            "http://localhost:9000",
            "http://LOCALHOST:9000/",
            "http://[::1]:9000",
            "http://10.0.0.5:9000",
            "http://172.16.8.1",
            "http://172.31.255.255",
            "http://192.168.1.20:9000",
            "http://169.254.10.10",
            "http://100.64.1.1:9000",
            "http://[fd12:3456::1]:9000",
            "http://[fe80::1]:9000",
            "http://[::ffff:192.168.1.2]:9000",
            "http://minio:9000",
            "https://minio.storage.svc:9000",
            "http://minio.default.svc.cluster.local:9000",
            "http://nas.local",
            "http://s3.corp.internal",
            "http://box.lan",
            "http://store.home.arpa",
            "http://s3.localhost",
        ] {
            assert!(is_self_hosted(endpoint), "{endpoint}");
        }
        for endpoint in [
            "https://s3.us-east-1.amazonaws.com",
            "https://storage.googleapis.com",
            "https://acct.r2.cloudflarestorage.com",
            "https://minio.example.com",
            "http://8.8.8.8:9000",
            "http://172.32.0.1",
            "http://100.128.0.1",
            "http://[2001:db8::1]",
            "http://localhost.example.com",
            "not a url",
            "",
        ] {
            assert!(!is_self_hosted(endpoint), "{endpoint}");
        }
    }

    #[tokio::test]
    async fn a_self_hosted_store_is_free_and_passes_every_request_on() {
        let memory = || Storage::new(crate::storage::MemoryStorage::new());
        let inner = Storage::new(AlwaysBilled(memory()));
        assert!(inner.charges_per_request());
        let billed = unless_self_hosted(inner.clone(), Some("https://s3.amazonaws.com"));
        assert!(billed.charges_per_request());
        let billed = unless_self_hosted(inner.clone(), None);
        assert!(billed.charges_per_request());
        let free = unless_self_hosted(inner, Some("http://127.0.0.1:9000"));
        assert!(!free.charges_per_request());
        assert_eq!(
            free.create("k", Bytes::from_static(b"v")).await.unwrap(),
            Created::New
        );
        assert_eq!(&free.read("k", 0..1).await.unwrap()[..], b"v");
        assert_eq!(free.list("").await.unwrap().len(), 1);
        free.delete("k").await.unwrap();
        assert!(free.list("").await.unwrap().is_empty());
    }

    /// Issue 30, item 5 (b): the wrapper did not pass `read_suffix` on, so
    /// on MinIO or any loopback endpoint every poll of a follower was the
    /// trait's default. An idle follower through it costs what the README
    /// promises: one read per wait, 9 listings in the first idle hour.
    #[tokio::test(start_paused = true)]
    async fn an_idle_follower_through_a_self_hosted_store_reads_once_a_wait() {
        use futures::StreamExt;

        let faulty = crate::storage::fault::FaultyStorage::new(Storage::new(
            crate::storage::MemoryStorage::new(),
        ));
        let free = unless_self_hosted(faulty.storage(), Some("http://127.0.0.1:9000"));
        let config = crate::Config {
            flush_interval: std::time::Duration::from_millis(10),
            ..crate::Config::default()
        };
        let wal = crate::Wal::open(free.clone(), "t", config.clone())
            .await
            .unwrap();
        wal.append(vec![(1, Bytes::from_static(b"x"))])
            .await
            .unwrap();
        let reader = crate::WalReader::open(free, "t", config).await.unwrap();
        let mut follower = reader.follow([(1, 0)]);
        let first = tokio::time::timeout(std::time::Duration::from_secs(30), follower.next())
            .await
            .unwrap();
        assert!(matches!(first, Some(Ok(_))), "{first:?}");
        let consumer = tokio::spawn(async move { while follower.next().await.is_some() {} });
        faulty.reset_counts();
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        let idle = faulty.counts();
        let (reads, lists) = (idle.read.requests, idle.list.requests);
        assert!((3550..=3620).contains(&(reads + lists)), "{idle:?}");
        assert!(lists <= 9, "{idle:?}");
        consumer.abort();
        wal.stop().await.unwrap();
    }

    /// A store that keeps the trait's default: billed.
    #[derive(Debug)]
    struct AlwaysBilled(Storage);

    #[async_trait::async_trait]
    impl ObjectStorage for AlwaysBilled {
        async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
            self.0.create(key, data).await
        }
        async fn read(&self, key: &str, range: Range<u64>) -> Result<Bytes, StorageError> {
            self.0.read(key, range).await
        }
        async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
            self.0.list(prefix).await
        }
        async fn delete(&self, key: &str) -> Result<(), StorageError> {
            self.0.delete(key).await
        }
    }
}
