//! Tests of the data loader (`loader.rs`).
use super::*;

fn loader(workers: usize, augment: AugmentRng, jitter: bool) -> Loader {
    let data = Arc::new(Dataset::generate(7, 96, 8, 3).unwrap());
    let cfg = LoaderConfig {
        batch: 16,
        workers,
        augment,
        jitter,
    };
    Loader::new(data, cfg, 7).unwrap()
}

fn strip(b: Batch) -> (Vec<f32>, Vec<i64>, Vec<usize>) {
    (b.x, b.y, b.indices)
}

#[test]
fn batches_identical_for_any_worker_count_and_timing() {
    // 15 batches = 2.5 epochs of 6, with random sleeps in the workers.
    let take =
        |mut l: Loader| -> Vec<_> { (0..15).map(|_| strip(l.next_batch().unwrap())).collect() };
    let want = take(loader(0, AugmentRng::PerSample, false));
    for w in [1, 2, 4] {
        let mut l = loader(w, AugmentRng::PerSample, true);
        assert_eq!(
            take(loader(w, AugmentRng::PerSample, true)),
            want,
            "{w} workers"
        );
        l.next_batch().unwrap();
        assert!(l.take_findings().is_empty());
    }
    // Epochs are shuffled differently and every sample appears once per epoch.
    let mut seen: Vec<usize> = want[..6].iter().flat_map(|b| b.2.clone()).collect();
    seen.sort();
    assert_eq!(seen, (0..96).collect::<Vec<_>>());
    assert_ne!(want[0].2, want[6].2);
}

#[test]
fn seek_reproduces_the_rest_of_the_stream() {
    let mut a = loader(2, AugmentRng::PerSample, false);
    let all: Vec<_> = (0..9).map(|_| strip(a.next_batch().unwrap())).collect();
    let mut b = loader(4, AugmentRng::PerSample, false);
    b.next_batch().unwrap(); // prefetches 4, consumes 1
    b.seek(Position { epoch: 1, batch: 1 }, None).unwrap();
    assert_eq!(strip(b.next_batch().unwrap()), all[7]);
    let e = b.seek(Position { epoch: 0, batch: 6 }, None).unwrap_err();
    assert!(e.to_string().contains("past the 6 batches"), "{e}");
}

#[test]
fn saved_worker_streams_count_handed_out_batches_only() {
    // The stateful (buggy) loader's streams are checkpointed as of the batches handed out,
    // not of what the workers prefetched, so a resume continues exactly.
    let mut a = loader(2, AugmentRng::SharedWorkerSeed, true);
    let all: Vec<_> = (0..5).map(|_| strip(a.next_batch().unwrap())).collect();
    let mut b = loader(2, AugmentRng::SharedWorkerSeed, true);
    b.next_batch().unwrap();
    b.next_batch().unwrap();
    let (pos, streams) = (b.position(), b.worker_streams().to_vec());
    drop(b);
    let mut c = loader(2, AugmentRng::SharedWorkerSeed, false);
    c.seek(pos, Some(streams)).unwrap();
    let rest: Vec<_> = (0..3).map(|_| strip(c.next_batch().unwrap())).collect();
    assert_eq!(rest, all[2..]);
}

#[test]
fn shared_worker_seed_is_reported_by_name() {
    let mut l = loader(2, AugmentRng::SharedWorkerSeed, false);
    for _ in 0..2 {
        l.next_batch().unwrap();
    }
    let f = l.take_findings();
    assert!(
        f[0].contains("workers 0 and 1 share one random stream"),
        "{f:?}"
    );
    assert!(f[1].contains("identical augmentation noise"), "{f:?}");
}
