//! The gauge `objwal_pinned_objects`: the objects live regions keep from
//! collection, published after every indexed object and collection tick.

use crate::metrics as m;

use super::*;

fn pinned(t: &Bench) -> f64 {
    // Gauges keep their f64 in the slot's bits.
    f64::from_bits(t.counter(m::PINNED_OBJECTS))
}

#[tokio::test]
async fn the_pinned_objects_gauge_follows_the_cold_region() {
    let t = Bench::new(
        "p-gauge",
        Config {
            max_pinned_objects: 0,
            ..config()
        },
    );
    let wal = t.open().await;
    let cold = wal.append(vec![(1, b("cold"))]).await.unwrap();
    for n in 0..10 {
        let hot = wal.append(vec![(2, b(&format!("h{n}")))]).await.unwrap();
        wal.obsolete(2, hot[0]).await.unwrap();
    }
    wal.pinning().await.unwrap();
    // The cold entry's object through the newest: 11 objects.
    assert_eq!(pinned(&t), 11.0);
    wal.obsolete(1, cold[0]).await.unwrap();
    wal.append(vec![(2, b("h10"))]).await.unwrap();
    wal.pinning().await.unwrap();
    // Only the newest object holds a live entry now.
    assert_eq!(pinned(&t), 1.0);
    wal.stop().await.unwrap();
}
