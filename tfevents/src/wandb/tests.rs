//! The reader against a run file the real `wandb` package wrote
//! (`tests/fixtures/make_wandb.py`), whole, as it grows, and corrupted.

use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/wandb-offline/run.wandb")
}

fn series(found: &Found, key: &str) -> Vec<(i64, f64)> {
    let tag = found.tags.iter().position(|tag| tag == key).expect(key) as u32;
    found
        .scalars
        .iter()
        .filter(|scalar| scalar.tag == tag)
        .map(|scalar| (scalar.step, scalar.value))
        .collect()
}

#[test]
fn history_config_and_hand_set_summary_values_are_read() {
    let mut file = WandbFile::new(&fixture(), 0);
    let found = file.read_until(u64::MAX).unwrap();
    assert!(file.corrupt.is_none(), "{:?}", file.corrupt);
    assert_eq!(found.end, std::fs::metadata(fixture()).unwrap().len());
    let loss = series(&found, "train/loss");
    assert_eq!(loss.len(), 150);
    assert!(loss[13].1.is_nan());
    assert_eq!(loss[2], (2, 1.0 / 3.0));
    assert_eq!(series(&found, "acc")[149], (149, 149.0 / 150.0));
    assert_eq!(series(&found, "nested.a")[7], (7, 7.0));
    assert_eq!(series(&found, "inf"), [(150, f64::INFINITY)]);
    assert!(
        found.tags.iter().all(|tag| !tag.starts_with('_')),
        "{:?}",
        found.tags
    );
    let first = &found.scalars[0];
    assert!(
        first.wall_time > 1.7e9,
        "the row's _timestamp: {}",
        first.wall_time
    );

    let config = &found.hparams;
    assert_eq!(config["lr"], 0.1);
    assert_eq!(config["model.layers"], 4);
    assert_eq!(config["model.act"], "gelu");
    assert_eq!(config["sizes"], "[1,2]");
    assert_eq!(config["late"], "yes");
    assert_eq!(config["summary.best_acc"], 0.98);
    assert!(
        config
            .keys()
            .all(|key| !key.starts_with('_') && key != "summary.train/loss"),
        "W&B's own keys and the history's summary stay out: {config:?}"
    );
}

#[test]
fn a_growing_file_is_read_in_pieces_to_the_same_points() {
    let bytes = std::fs::read(fixture()).unwrap();
    let whole = WandbFile::new(&fixture(), 0).read_until(u64::MAX).unwrap();
    let dir = std::env::temp_dir().join(format!("wandb-grow-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run-grow.wandb");
    std::fs::write(&path, b"").unwrap();
    let mut file = WandbFile::new(&path, 0);
    let mut points = Vec::new();
    // Pieces of 997 bytes: cut inside records, chunk headers and the
    // record split across the first two blocks.
    for end in (0..=bytes.len()).step_by(997).chain([bytes.len()]) {
        std::fs::write(&path, &bytes[..end]).unwrap();
        let found = file.read_until(u64::MAX).unwrap();
        assert!(file.corrupt.is_none(), "at {end}: {:?}", file.corrupt);
        points.extend(
            found
                .scalars
                .iter()
                .map(|s| (found.tags[s.tag as usize].clone(), s.step, s.value.to_bits())),
        );
    }
    let expected: Vec<_> = whole
        .scalars
        .iter()
        .map(|s| (whole.tags[s.tag as usize].clone(), s.step, s.value.to_bits()))
        .collect();
    assert_eq!(points, expected);
    assert_eq!(file.offset, bytes.len() as u64);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_chunk_stops_the_file_with_every_point_before_it() {
    let mut bytes = std::fs::read(fixture()).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let dir = std::env::temp_dir().join(format!("wandb-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run-bad.wandb");
    std::fs::write(&path, &bytes).unwrap();
    let mut file = WandbFile::new(&path, 0);
    let found = file.read_until(u64::MAX).unwrap();
    let corrupt = file.corrupt.clone().expect("found");
    assert!(
        corrupt.offset <= middle as u64 && found.end <= corrupt.offset,
        "{corrupt:?}"
    );
    let loss = series(&found, "train/loss");
    assert!(
        !loss.is_empty() && loss.len() < 150,
        "the points before it: {}",
        loss.len()
    );
    assert_eq!(
        loss.iter().map(|(step, _)| *step).collect::<Vec<_>>(),
        (0..loss.len() as i64).collect::<Vec<_>>()
    );
    // Not a W&B file at all.
    std::fs::write(&path, b"events, not W&B, at all").unwrap();
    let mut other = WandbFile::new(&path, 0);
    other.read_until(u64::MAX).unwrap();
    assert!(other.corrupt.unwrap().reason.contains(":W&B"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_link_is_not_followed() {
    let dir = std::env::temp_dir().join(format!("wandb-link-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("run-link.wandb");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(fixture(), &link).unwrap();
    assert!(WandbFile::new(&link, 0).read_until(u64::MAX).is_err());
    assert!(crate::EventFile::new(&link, 0).read().is_err());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn fuzz_wandb_file_bytes() {
    bolero::check!().for_each(|bytes: &[u8]| {
        let mut file = WandbFile::new(Path::new("/nonexistent"), 0);
        let mut found = Found::default();
        let mut with_header = MAGIC.to_vec();
        with_header.push(0);
        with_header.extend_from_slice(bytes);
        let used = file.parse(&with_header, &mut found);
        assert!(used <= with_header.len());
    });
}
