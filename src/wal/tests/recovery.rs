//! Recovery: chain selection over real objects, the start object, and the
//! one-read-per-object promise.

use crate::catalog::IndexedObject;
use crate::format::{self, Header, Link, Object, ReleaseRecord, Segment};
use crate::storage::keys::Prefix;
use crate::storage::{Created, ObjectMeta, ObjectStorage, StorageError};
use crate::wal::open::recovery::recover;
use crate::WalReader;

use super::*;

fn object(
    sequence: u64,
    epoch: u64,
    link: Option<(u64, u64)>,
    boundary: u64,
    regions: &[u64],
) -> Object {
    Object {
        header: Header {
            sequence,
            epoch,
            link: link.map(|(sequence, epoch)| Link { sequence, epoch }),
            reclaim_boundary: boundary,
        },
        segments: regions
            .iter()
            .map(|&region| Segment {
                region,
                entries: vec![(
                    format::entry_id(sequence, 1),
                    b(&format!("{region}@{sequence}")),
                )],
            })
            .collect(),
        marks: Vec::new(),
        releases: Vec::new(),
    }
}

async fn plant(t: &Bench, o: &Object) {
    let bytes = format::encode(o).unwrap();
    t.faulty
        .inner()
        .create(&t.key(o.header.sequence), bytes)
        .await
        .unwrap();
}

fn prefix(t: &Bench) -> Prefix {
    Prefix::new(&t.prefix).unwrap()
}

#[tokio::test]
async fn a_linear_chain_is_indexed_whole() {
    let t = Bench::new("r-linear", config());
    for n in 0..3 {
        let wal = t.open().await;
        wal.append(vec![(1, b(&format!("e{n}")))]).await.unwrap();
        wal.stop().await.unwrap();
    }
    let r = recover(&t.storage, &prefix(&t), 4).await.unwrap();
    // The first start object held no live segment: the boundary the later
    // objects carry passed it and collection deleted it. Each reopen walks
    // to the key after the tip (its settle marker, an orphan) and starts a
    // window above it.
    let start = |tip: u64| crate::wal::protocol::rules::start_sequence(tip + 1, tip, 9);
    let (s2, s3) = (start(2), start(start(2) + 1));
    assert_eq!(r.selection.chain, vec![2, s2, s2 + 1, s3, s3 + 1]);
    assert!(r.selection.below_boundary.is_empty());
    assert_eq!(r.selection.orphans, vec![3, s2 + 2], "the settle markers");
    let mut present = r.selection.chain.clone();
    present.extend(&r.selection.orphans);
    present.sort_unstable();
    assert_eq!(t.sequences().await, present);
    assert_eq!(read(&t.open().await, 1).await, ["e0", "e1", "e2"]);
}

#[tokio::test]
async fn orphans_below_and_above_the_tip_raise_the_next_sequence() {
    let t = Bench::new("r-orphans", config());
    plant(&t, &object(1, 1, None, 1, &[1])).await;
    plant(&t, &object(2, 1, Some((1, 1)), 1, &[1])).await;
    plant(&t, &object(3, 1, Some((2, 9)), 1, &[1])).await; // wrong epoch: orphan below
    plant(&t, &object(4, 1, Some((2, 1)), 1, &[1])).await; // the tip
    plant(&t, &object(6, 1, Some((5, 1)), 1, &[1])).await; // missing 5: orphan above
    let r = recover(&t.storage, &prefix(&t), 4).await.unwrap();
    assert_eq!(r.selection.chain, vec![1, 2, 4]);
    assert_eq!(r.selection.orphans, vec![3, 6]);
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await, ["1@1", "1@2", "1@4"]);
    let ids = wal.append(vec![(1, b("new"))]).await.unwrap();
    assert_eq!(
        format::sequence_of(ids[0]),
        crate::wal::protocol::rules::start_sequence(5, 6, 2) + 1,
        "the walk settles 5; the start object lies a window above the listing"
    );
    wal.stop().await.unwrap();
}

#[tokio::test]
async fn a_broken_tip_falls_back_to_the_latest_complete_object() {
    let t = Bench::new("r-broken-tip", config());
    plant(&t, &object(1, 1, None, 1, &[1])).await;
    plant(&t, &object(2, 1, Some((1, 1)), 1, &[1])).await;
    plant(&t, &object(3, 2, Some((2, 5)), 1, &[1])).await;
    let r = recover(&t.storage, &prefix(&t), 4).await.unwrap();
    assert_eq!(r.selection.tip.unwrap().sequence, 2);
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await, ["1@1", "1@2"]);
    wal.stop().await.unwrap();
    // Its epoch still counts, and the walk stops at it: the new start
    // object lies a window above it.
    let reader = WalReader::open(t.storage.clone(), &t.prefix, config())
        .await
        .unwrap();
    let tip = reader.objects().last().cloned().unwrap();
    assert_eq!(
        (tip.sequence, tip.epoch),
        (crate::wal::protocol::rules::start_sequence(3, 3, 3), 3)
    );
}

#[tokio::test]
async fn a_missing_predecessor_is_accepted_only_below_the_boundary() {
    let t = Bench::new("r-missing-below", config());
    plant(&t, &object(5, 1, Some((4, 1)), 5, &[1])).await;
    let wal = t.open().await;
    assert_eq!(read(&wal, 1).await, ["1@5"], "4 was collected");
    wal.stop().await.unwrap();

    let t = Bench::new("r-missing-above", config());
    plant(&t, &object(5, 1, Some((4, 1)), 4, &[1])).await;
    let err = t.try_open().await.unwrap_err();
    assert!(matches!(err, Error::Recovery { .. }), "{err}");
    assert!(err.to_string().contains("no complete chain"), "{err}");
    assert!(
        t.sequences().await == vec![5],
        "a failed open writes nothing"
    );
}

#[tokio::test]
async fn structural_damage_fails_open_naming_the_key() {
    let t = Bench::new("r-damage", config());
    plant(&t, &object(1, 1, None, 1, &[1])).await;
    let mut bytes = format::encode(&object(2, 1, Some((1, 1)), 1, &[1]))
        .unwrap()
        .to_vec();
    let last = bytes.len() - 10;
    bytes[last] ^= 0xff;
    t.faulty
        .inner()
        .create(&t.key(2), bytes.into())
        .await
        .unwrap();
    let err = t.try_open().await.unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains(&t.key(2)), "{err}");
}

/// Plants an object at a key just before the first create of that key, as a
/// writer racing the start object would.
#[derive(Debug)]
struct PlantFirst {
    inner: Storage,
    key: String,
    bytes: Bytes,
}

#[async_trait::async_trait]
impl ObjectStorage for PlantFirst {
    async fn create(&self, key: &str, data: Bytes) -> Result<Created, StorageError> {
        if key == self.key {
            let _ = self.inner.create(key, self.bytes.clone()).await;
        }
        self.inner.create(key, data).await
    }
    async fn read(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes, StorageError> {
        self.inner.read(key, range).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.inner.delete(key).await
    }
}

/// An object landing after the listing at the key after the tip: adopted
/// when it continues the chain (an older writer's, which it may have
/// acknowledged), and a fence when a newer process's.
#[tokio::test]
async fn the_walk_adopts_an_earlier_epochs_late_object_and_fails_on_a_later_one() {
    for (epoch, opens) in [(1, true), (5, false)] {
        let inner = Storage::new(crate::storage::MemoryStorage::new());
        let seed = Bench::on(inner.clone(), "r-start", config());
        seed.open().await.stop().await.unwrap(); // epoch 1, sequence 1
        let late = format::encode(&object(2, epoch, Some((1, 1)), 1, &[1])).unwrap();
        let racing = Storage::new(PlantFirst {
            inner: inner.clone(),
            key: seed.key(2),
            bytes: late,
        });
        let t = Bench::on(racing, "r-start", config());
        match t.try_open().await {
            Ok(wal) => {
                assert!(opens, "epoch {epoch}");
                assert_eq!(read(&wal, 1).await, ["1@2"], "adopted");
                let ids = wal.append(vec![(1, b("x"))]).await.unwrap();
                // The walk adopted 2 and settled 3.
                assert_eq!(
                    format::sequence_of(ids[0]),
                    crate::wal::protocol::rules::start_sequence(3, 1, 2) + 1,
                );
                wal.stop().await.unwrap();
            }
            Err(err) => {
                // A later epoch at sequence 2 breaks W4 (every object has
                // epoch <= sequence): refused, never adopted or built on.
                assert!(!opens, "epoch {epoch}: {err}");
                assert!(err.to_string().contains("implausible epoch"), "{err}");
            }
        }
    }
}

#[tokio::test]
async fn tail_recovery_builds_the_catalog_that_whole_decoding_builds() {
    let t = Bench::new("r-tail-equals-whole", config());
    let wal = t.open().await;
    wal.append(vec![(1, b("a")), (2, b("b"))]).await.unwrap();
    // Many regions: a footer that starts before the tail window.
    wal.append((0..1500).map(|r| (r, b("x"))).collect())
        .await
        .unwrap();
    wal.append(vec![(3, Bytes::from(vec![9u8; 200_000]))])
        .await
        .unwrap();
    wal.release_region(2).await.unwrap();
    wal.stop().await.unwrap();

    let listed = t
        .faulty
        .inner()
        .list(&format!("{}/objects/", t.prefix))
        .await
        .unwrap();
    t.faulty.reset_counts();
    let recovered = recover(&t.storage, &prefix(&t), 1).await.unwrap();
    let counts = t.faulty.counts();
    // Per object, the bytes its tail takes (from its first records segment,
    // or the footer, to the end).
    let mut tails = Vec::new();
    let whole: Vec<IndexedObject> = {
        let mut out = Vec::new();
        for meta in &listed {
            let bytes = t
                .faulty
                .inner()
                .read(&meta.key, 0..meta.size)
                .await
                .unwrap();
            let object = format::decode(&bytes).unwrap();
            let tail = match format::decode_tail(&bytes, meta.size).unwrap() {
                format::TailDecode::Complete(tail) => tail,
                format::TailDecode::NeedFooter { .. } => unreachable!("whole object"),
            };
            let start = [tail.release_segment(), tail.marks_segment()]
                .into_iter()
                .flatten()
                .map(|s| s.offset)
                .fold(tail.trailer.footer_offset, u64::min);
            tails.push(meta.size - start);
            out.push(IndexedObject {
                sequence: object.header.sequence,
                epoch: object.header.epoch,
                link: object.header.link,
                reclaim_boundary: object.header.reclaim_boundary,
                size: meta.size,
                segments: tail.region_segments().copied().collect(),
                marks: object.marks.clone(),
                releases: object.releases.clone(),
            });
        }
        out
    };
    let from_tails: Vec<IndexedObject> = recovered.catalog.objects().cloned().collect();
    let indexed_whole: Vec<IndexedObject> = whole
        .iter()
        .filter(|o| recovered.selection.chain.contains(&o.sequence))
        .cloned()
        .collect();
    assert!(recovered.selection.below_boundary.is_empty(), "collected");
    assert_eq!(from_tails.len(), indexed_whole.len());
    assert!(
        from_tails == indexed_whole,
        "tail recovery differs from whole decoding"
    );
    assert_eq!(
        whole.last().map(|o| o.releases.clone()),
        Some(vec![ReleaseRecord {
            region: 2,
            released_through: format::entry_id(3, 1)
        }])
    );
    // One window per object, sized as learned from the objects read before
    // it (newest first, one at a time here), plus the footer of the object with 1,500
    // regions, the first tail larger than the window; never a segment read,
    // never a header read.
    assert_eq!(counts.read.requests, listed.len() as u64 + 1);
    let window = crate::wal::open::tail::TailWindow::default();
    let mut expected = 0;
    // Newest first, as recovery reads them.
    for (meta, tail) in listed.iter().zip(tails).rev() {
        expected += meta.size.min(window.len());
        window.learn(tail);
    }
    // The footer read takes the records segments before it along.
    // (a footer entry for each of its 1,500 regions and its marks segment).
    let footer = 1501 * format::FOOTER_ENTRY_LEN as u64 + crate::wal::open::tail::RECORDS_SLACK;
    assert_eq!(
        counts.read.bytes,
        expected + footer,
        "tail windows and one footer, nothing more"
    );
}
