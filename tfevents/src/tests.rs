//! The event file reader against files written here record by record,
//! and against event files that tensorboardX and TensorFlow wrote (`tests/fixtures`).

use super::*;

/// Parses `bytes` as a fresh file would be read: in one go, or in two
/// reads split at `split` (the second starting where the first stopped).
fn parse_in(bytes: &[u8], split: Option<usize>) -> (Vec<Scalar>, usize, Option<usize>) {
    let mut file = EventFile::new(Path::new("fuzz"), 0);
    let mut found = Found::default();
    let mut parsed = 0;
    if let Some(split) = split {
        parsed = file.parse(&bytes[..split.min(bytes.len())], &mut found);
        assert!(parsed <= split.min(bytes.len()));
    }
    if file.corrupt.is_none() {
        parsed += file.parse(&bytes[parsed..], &mut found);
    }
    assert!(parsed <= bytes.len());
    let corrupt = file.corrupt.map(|c| c.offset as usize);
    (found.scalars, parsed, corrupt)
}

/// Fuzz: any bytes, read in one go or in two pieces, give the same
/// scalars and stop at the same place; never a panic.
#[test]
fn fuzz_event_file_bytes() {
    bolero::check!()
        .with_type::<(Vec<u8>, u16)>()
        .for_each(|(bytes, split)| {
            let whole = parse_in(bytes, None);
            let pieces = parse_in(bytes, Some(*split as usize));
            assert_eq!(whole.0.len(), pieces.0.len());
            assert_eq!(whole.1, pieces.1);
        });
}

/// Fuzz: records with intact framing and CRCs around any payload (so
/// the event decoder sees them, not just the framing) are all consumed,
/// none is corrupt, and never a panic.
#[test]
fn fuzz_event_records() {
    bolero::check!().with_type::<Vec<Vec<u8>>>().for_each(|payloads| {
        let mut bytes = Vec::new();
        for payload in payloads {
            let length = (payload.len() as u64).to_le_bytes();
            bytes.extend_from_slice(&length);
            bytes.extend_from_slice(&masked_crc(&length).to_le_bytes());
            bytes.extend_from_slice(payload);
            bytes.extend_from_slice(&masked_crc(payload).to_le_bytes());
        }
        let (_, parsed, corrupt) = parse_in(&bytes, None);
        assert_eq!(corrupt, None);
        assert_eq!(parsed, bytes.len());
    });
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn check_fixture(path: PathBuf) {
    let mut file = EventFile::new(&path, 0);
    let found = file.read().unwrap();
    let scalars = &found.scalars;
    assert!(file.corrupt.is_none());
    assert_eq!(scalars.len(), 100, "two tags x 50 steps");
    let loss: Vec<&Scalar> = scalars
        .iter()
        .filter(|s| found.tags[s.tag as usize] == "train/loss")
        .collect();
    assert_eq!(loss.len(), 50);
    assert_eq!(
        (loss[0].step, loss[0].value, loss[0].wall_time),
        (0, 1.0, 1_764_460_800.0)
    );
    assert!(loss[13].value.is_nan());
    assert_eq!(loss[14].value, f64::INFINITY);
    assert_eq!(loss[15].value, f64::NEG_INFINITY);
    assert!((loss[49].value - 0.02).abs() < 1e-6);
    let accuracy: Vec<&Scalar> = scalars
        .iter()
        .filter(|s| found.tags[s.tag as usize] == "eval/accuracy")
        .collect();
    assert!((accuracy[25].value - 0.5).abs() < 1e-6);
    assert_eq!(accuracy[25].step, 25);
}

/// A TFRecord around `data`.
fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut record = length.to_vec();
    record.extend(masked_crc(&length).to_le_bytes());
    record.extend(data);
    record.extend(masked_crc(data).to_le_bytes());
    record
}

/// A length-delimited protobuf field.
fn field(number: u8, bytes: &[u8]) -> Vec<u8> {
    let mut out = vec![number << 3 | 2];
    let mut length = bytes.len();
    while length >= 0x80 {
        out.push((length as u8) | 0x80);
        length >>= 7;
    }
    out.push(length as u8);
    out.extend(bytes);
    out
}

/// An event at `step` with one summary value.
fn event(step: u8, value: Vec<u8>) -> Vec<u8> {
    let mut event = vec![0x09];
    event.extend((1_764_460_800.0 + f64::from(step)).to_le_bytes());
    event.extend([0x10, step & 0x7f]);
    event.extend(field(5, &field(1, &value)));
    record(&event)
}

fn simple(tag: &str, value: f32) -> Vec<u8> {
    let mut out = field(1, tag.as_bytes());
    out.push(0x15);
    out.extend(value.to_le_bytes());
    out
}

/// A float tensor, with the plugin named in its metadata when given.
fn tensor(tag: &str, value: f32, plugin: Option<&str>) -> Vec<u8> {
    let mut out = field(1, tag.as_bytes());
    if let Some(plugin) = plugin {
        out.extend(field(9, &field(1, &field(1, plugin.as_bytes()))));
    }
    let mut proto = vec![0x08, 1];
    proto.extend(field(5, &value.to_le_bytes()));
    out.extend(field(8, &proto));
    out
}

#[test]
fn a_big_read_decoded_on_several_threads_keeps_order_declarations_and_corruption() {
    // TF2 names a tag's plugin only in its first event: `t/scalar` as
    // scalars, `t/hist` as something else. Those first events land in the
    // first thread's records; the later threads see only plain tensors.
    let mut bytes = event(0, tensor("t/scalar", -1.0, Some("scalars")));
    bytes.extend(event(0, tensor("t/hist", -2.0, Some("histograms"))));
    let records = 3 * PARALLEL_RECORDS;
    for i in 0..records {
        let step = (i % 100) as u8;
        bytes.extend(match i % 3 {
            0 => event(step, simple("simple", i as f32)),
            1 => event(step, tensor("t/scalar", i as f32, None)),
            _ => event(step, tensor("t/hist", i as f32, None)),
        });
    }
    let dir = tempfile_dir("parallel");
    let path = dir.join("events.out.tfevents.parallel");
    std::fs::write(&path, &bytes).unwrap();
    let mut file = EventFile::new(&path, 0);
    let found = file.read().unwrap();
    assert!(file.corrupt.is_none());
    assert_eq!(file.offset, bytes.len() as u64);
    let values: Vec<(&str, f64)> = found
        .scalars
        .iter()
        .map(|s| (found.tags[s.tag as usize].as_str(), s.value))
        .collect();
    let mut expected = vec![("t/scalar", -1.0)];
    for i in 0..records {
        match i % 3 {
            0 => expected.push(("simple", i as f64)),
            1 => expected.push(("t/scalar", i as f64)),
            _ => {}
        }
    }
    assert_eq!(
        values, expected,
        "every scalar once, in file order, histograms left out"
    );

    // A record in the last third corrupted: everything before it kept.
    let mut offset = 0;
    let cut = records * 5 / 6;
    for _ in 0..cut {
        let length = u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap()) as usize;
        offset += 16 + length;
    }
    bytes[offset + 13] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let mut file = EventFile::new(&path, 0);
    let found = file.read().unwrap();
    assert_eq!(file.corrupt.as_ref().unwrap().offset, offset as u64);
    assert_eq!(file.offset, offset as u64);
    let kept = expected
        .iter()
        .take_while(|(_, v)| *v < (cut - 2) as f64 || *v == -1.0)
        .count();
    assert_eq!(found.scalars.len(), kept);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn simple_value_scalars_from_tensorboardx() {
    check_fixture(fixture("tb-simple/events.out.tfevents.simple"));
}

#[test]
fn tensor_scalars_with_plugin_metadata_only_in_the_first_event() {
    check_fixture(fixture("tb-tensor/events.out.tfevents.tensor"));
}

#[test]
fn a_growing_file_is_read_record_by_record_and_a_cut_record_waits() {
    let bytes = std::fs::read(fixture("tb-simple/events.out.tfevents.simple")).unwrap();
    let dir = tempfile_dir("grow");
    let path = dir.join("events.out.tfevents.grow");
    let mut file = EventFile::new(&path, 0);
    let mut total = 0;
    // Append the file in odd-sized pieces; every read returns only whole records.
    for piece in bytes.chunks(97) {
        let mut handle = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut handle, piece).unwrap();
        total += file.read().unwrap().scalars.len();
    }
    assert_eq!(total, 100);
    assert_eq!(file.offset, bytes.len() as u64);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_corrupt_record_stops_the_file_there_and_keeps_what_came_before() {
    let mut bytes = std::fs::read(fixture("tb-simple/events.out.tfevents.simple")).unwrap();
    let dir = tempfile_dir("corrupt");
    let path = dir.join("events.out.tfevents.bad");
    // Find the offset of the 30th record and flip a byte in its data.
    let mut offset = 0;
    for _ in 0..30 {
        let length = u64::from_le_bytes(bytes[offset..offset + 8].try_into().unwrap()) as usize;
        offset += 16 + length;
    }
    bytes[offset + 14] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let mut file = EventFile::new(&path, 0);
    let scalars = file.read().unwrap().scalars;
    let corruption = file.corrupt.clone().expect("the corruption is reported");
    assert_eq!(corruption.offset, offset as u64);
    assert_eq!(corruption.reason, "the record's data fails its CRC");
    // Record 0 holds the file version; records 1..30 hold one scalar each.
    assert_eq!(scalars.len(), 29);
    assert!(
        file.read().unwrap().scalars.is_empty(),
        "nothing after the corruption"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn hyperparameters_come_from_the_hparams_plugin() {
    let mut file = EventFile::new(&fixture("tb-hparams").join("events.out.tfevents.hparams"), 0);
    let found = file.read().unwrap();
    let expected = serde_json::json!({"amp": true, "depth": 12, "lr": 0.001, "optimizer": "adam"});
    assert_eq!(serde_json::to_value(&found.hparams).unwrap(), expected);
    // The scalar beside them is read as usual; the plugin's own records are not scalars.
    let tags: Vec<&str> = found
        .scalars
        .iter()
        .map(|s| found.tags[s.tag as usize].as_str())
        .collect();
    assert_eq!(tags, ["eval/accuracy"]);
}

#[test]
fn halves_and_bfloat16s_decode() {
    assert_eq!(half(0x3c00), 1.0);
    assert_eq!(half(0x7c00), f64::INFINITY);
    assert!(half(0x7e00).is_nan());
    assert_eq!(from_int(14, 0x3f80), 1.0);
}

fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gpuplane-tb-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
